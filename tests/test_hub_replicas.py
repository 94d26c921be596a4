"""The hub's repository layouts, loaded through the project's loader: a LLaMA-era tokenizer shipped as
`tokenizer.model` alone, weights as `.bin` shards with their index."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from transformers import LlamaConfig, LlamaForCausalLM

from ddd import encode_prompt, generate, load_target
from explorer.deploy import SPACE_KINDS, requirements
from tests.hub_replicas import save_bin_shards, sentencepiece_tokenizer

ROOT = Path(__file__).resolve().parents[1]
# Loads a model folder with the tokenizer's libraries hidden, as in an environment without them.
WITHOUT_SENTENCEPIECE = """
import sys
sys.modules["sentencepiece"] = sys.modules["google.protobuf"] = None
from ddd import ModelLoadError, load_target
try:
    load_target(sys.argv[1])
except ModelLoadError as err:
    print(err)
"""


def vicuna_like(directory: Path) -> Path:
    """A tiny Llama as LLaMA-era repositories ship one: tokenizer.model without tokenizer.json, weights in .bin shards
    with pytorch_model.bin.index.json."""
    vocab = sentencepiece_tokenizer(directory)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    save_bin_shards(LlamaForCausalLM(config), directory, 2)
    return directory


def test_a_llama_tokenizer_shipped_as_tokenizer_model_only_loads_with_bin_shards(tmp_path):
    folder = vicuna_like(tmp_path / "vicuna")
    assert not (folder / "tokenizer.json").exists() and (folder / "tokenizer.model").exists()
    shards = json.loads((folder / "pytorch_model.bin.index.json").read_text())["weight_map"].values()
    assert len(set(shards)) > 1 and not list(folder.glob("*.safetensors"))
    target = load_target(str(folder))
    ids = encode_prompt(target, "the cat sat")
    assert ids[0] == 1 and target.tokenizer.decode(ids, skip_special_tokens=True) == "the cat sat"
    run = generate(target, None, "the cat sat", "plain", max_new_tokens=4)
    assert len(list(run)) >= 1


def test_without_its_libraries_the_message_names_them(tmp_path):
    folder = vicuna_like(tmp_path / "vicuna")
    out = subprocess.run([sys.executable, "-c", WITHOUT_SENTENCEPIECE, str(folder)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    message = out.stdout.strip().splitlines()[-1]
    assert "pip install sentencepiece protobuf" in message and "tokenizer.model" in message


def test_the_spaces_install_the_tokenizers_libraries():
    for kind in ("zerogpu", "cpu"):
        names = {Requirement(line).name.lower() for line in requirements(SPACE_KINDS[kind]).splitlines()
                 if line and not line.startswith("#")}
        assert {"sentencepiece", "protobuf"} <= names, kind
