"""The hub's repository layouts, loaded through the project's loader: a LLaMA-era tokenizer shipped as
`tokenizer.model` alone, weights as `.bin` shards with their index, and a replica of every repository the ZeroGPU
export preloads (tests/hub_replicas.py), read offline from the hub cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from transformers import LlamaConfig, LlamaForCausalLM

from ddd import encode_prompt, generate, load_target
from explorer.deploy import SPACE_KINDS, requirements
from explorer.space_pairs import TARGET_FILES, space_pairs
from tests.hub_replicas import HEAD_FORMATS, REPLICAS, llama3, save_shards, sentencepiece_tokenizer, smollm2, vicuna

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
    save_shards(LlamaForCausalLM(config), directory, 2)
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


@pytest.mark.slow
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


# Loads each pair given (hub ids) in a fresh interpreter, where HF_HOME and HF_HUB_OFFLINE take effect, and races a
# few tokens of EAGLE-2 on it.
RACE_PAIRS = """
import json, sys
from ddd import generate, load_target, resolve_head
out = {}
for model, head in json.loads(sys.argv[1]):
    target = load_target(model)
    drafter, note = resolve_head(head, target)
    run = generate(target, drafter, "the cat sat", "eagle2", max_new_tokens=6)
    list(run)
    out[model] = [type(target.tokenizer).__name__, drafter.kind, len(run.token_ids)]
print(json.dumps(out))
"""


def snapshot_files(hf_home: Path, repo_id: str) -> set[str]:
    snapshots = hf_home / "hub" / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return {p.name for p in next(snapshots.iterdir()).iterdir()}


@pytest.mark.slow
@pytest.mark.parametrize("head_weights,target_weights", list(zip(HEAD_FORMATS, ("bin", "safetensors"))))
def test_every_preloaded_pair_loads_and_races_from_its_replica_offline(tmp_path, head_weights, target_weights):
    """Both plausible layouts of the EAGLE heads (and of Vicuna's weights): each offered pair loads from the hub
    cache alone and drafts."""
    hf_home = tmp_path / "hf"
    vicuna(hf_home, head_weights, target_weights)
    llama3(hf_home, head_weights)
    smollm2(hf_home)
    pairs = space_pairs()
    assert {p.target for p in pairs} == set(REPLICAS)
    for pair in pairs:  # where the export names the files it preloads, the replica holds exactly those
        if pair.target in TARGET_FILES:
            assert snapshot_files(hf_home, pair.target) == set(TARGET_FILES[pair.target].split(","))
    assert "tokenizer.json" not in snapshot_files(hf_home, pairs[0].target)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "DDD_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", RACE_PAIRS, json.dumps([[p.target, p.head] for p in pairs])],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    raced = json.loads(out.stdout.strip().splitlines()[-1])
    assert raced == {p.target: [raced[p.target][0], "eagle" if p.head else "eagle3", 6] for p in pairs}
