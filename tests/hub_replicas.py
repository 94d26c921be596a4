"""Tiny stand-ins for the hub repositories a ZeroGPU Space preloads, put where `preload_from_hub` puts them (the hub
cache under HF_HOME): the same file names, weight formats, tokenizer files, config keys and head layouts as the real
repositories, with tiny random weights (docs/deploy.md, "The build, rehearsed").

Where each listing comes from:
- lmsys/vicuna-7b-v1.3: a LLaMA-1-era repository (FastChat's docs/vicuna_weights_version.md: v1.3 is LLaMA-1 based,
  its weights merged). Its tokenizer is a SentencePiece `tokenizer.model` with `tokenizer_config.json` and
  `special_tokens_map.json` and no `tokenizer.json`; its weights `pytorch_model-0000N-of-00002.bin` with
  `pytorch_model.bin.index.json`, as the LLaMA-era repositories that predate safetensors ship them, beside
  `config.json` and `generation_config.json`. The hub's own listing could not be read from here (no network, and no
  search result quotes it), so `tests/test_hub_replicas.py` loads its weights as safetensors shards too.
- meta-llama/Meta-Llama-3-8B-Instruct and HuggingFaceTB/SmolLM2-135M-Instruct: exactly the files the export preloads
  (explorer.space_pairs.TARGET_FILES), a `tokenizer.json` with the chat template inside `tokenizer_config.json`.
- yuhuili/EAGLE-Vicuna-7B-v1.3 and yuhuili/EAGLE-LLaMA3-Instruct-8B (EAGLE-1 heads, the EAGLE repository's README,
  "EAGLE Models on Hugging Face"): `config.json` and the weights. The official loader (EAGLE's
  eagle/model/ea_model.py) reads `pytorch_model.bin` and, failing that, `model.safetensors`: both layouts are
  plausible and both are built (HEAD_FORMATS). The config keys are those of the configs the heads were trained with
  (EAGLE's eagle/train/vicuna_7B_config.json and eagle/train/EAGLE-LLaMA3-Instruct-8B).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from ddd import Target, new_head
from ddd.catalog import SHIPPED_HEAD
from ddd.models import DEFAULT_HUB_ID
from tests.tiny import CHAT_TEMPLATE, CORPUS, hub_snapshot, tiny_tokenizer

VICUNA, VICUNA_HEAD = "lmsys/vicuna-7b-v1.3", "yuhuili/EAGLE-Vicuna-7B-v1.3"
LLAMA3, LLAMA3_HEAD = "meta-llama/Meta-Llama-3-8B-Instruct", "yuhuili/EAGLE-LLaMA3-Instruct-8B"
HEAD_FORMATS = ("pytorch_model.bin", "model.safetensors")
# The targets' shapes, scaled down: what the tiny random weights are.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)

# LLaMA's SentencePiece model numbers its special pieces so: unknown, begin and end of sequence, no padding piece.
SPECIAL_IDS = dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
SPECIAL_PIECES = dict(unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def sentencepiece_tokenizer(directory: Path, vocab_size: int = 320) -> int:
    """A LLaMA-1-era tokenizer in `directory`: a byte-fallback BPE `tokenizer.model` trained on the tiny corpus, with
    `tokenizer_config.json` (tokenizer_class LlamaTokenizer, its special tokens as AddedToken records) and
    `special_tokens_map.json`, and no `tokenizer.json`. Returns the vocabulary's size."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=vocab_size,
                                   model_type="bpe", byte_fallback=True, hard_vocab_limit=False, minloglevel=2,
                                   **SPECIAL_IDS)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.model").write_bytes(model.getvalue())

    def added(content: str) -> dict:
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": True, "rstrip": False,
                "single_word": False}

    config = {"add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
              "model_max_length": 2048, "pad_token": None, "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
              **{name: added(piece) for name, piece in SPECIAL_PIECES.items()}}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(json.dumps(SPECIAL_PIECES, indent=2))
    return spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()


def save_shards(model: LlamaForCausalLM, directory: Path, shards: int, weights: str = "bin") -> list[str]:
    """`model` as a sharded checkpoint: its config and generation config, its state dict split into `shards` files
    with the index that maps each weight to its file. weights "bin": `pytorch_model-0000N-of-0000M.bin` and
    `pytorch_model.bin.index.json` (the layout `save_pretrained` wrote before safetensors became its only format);
    "safetensors": `model-0000N-of-0000M.safetensors` and `model.safetensors.index.json`. The weight files."""
    model.config.save_pretrained(directory)
    model.generation_config.save_pretrained(directory)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: published checkpoints keep the embeddings once
    names = list(state)
    stem, suffix = ("pytorch_model", "bin") if weights == "bin" else ("model", "safetensors")
    files = [f"{stem}-{i + 1:05d}-of-{shards:05d}.{suffix}" for i in range(shards)]
    weight_map = {}
    for i, file in enumerate(files):
        part = {name: state[name] for name in names[i * len(names) // shards:(i + 1) * len(names) // shards]}
        if weights == "bin":
            torch.save(part, directory / file)
        else:
            save_file(part, directory / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    (directory / f"{stem}.{suffix}.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return files


def fast_tokenizer(directory: Path, bos: str, eos: str) -> int:
    """A `tokenizer.json` tokenizer as the newer repositories ship it: `tokenizer_config.json` holding the chat
    template (not a separate chat_template.jinja) and `special_tokens_map.json`. Returns the vocabulary's size."""
    tokenizer = tiny_tokenizer(directory)
    (directory / "chat_template.jinja").unlink(missing_ok=True)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
              "chat_template": CHAT_TEMPLATE.replace("<|im_end|>", eos), "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 1000000000000000019884624838656}
    tokenizer.add_special_tokens({"bos_token": bos, "eos_token": eos})
    tokenizer.backend_tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}, indent=2))
    return len(tokenizer)


def eagle_head(snapshot: Path, model: LlamaForCausalLM, tokenizer_dir: Path, weights: str, config: dict) -> None:
    """An EAGLE-1 head for `model` in `snapshot`: `config.json` with the keys of the official head's training config
    (`config`, sizes from the model), and its weights under their published names in `weights`."""
    from transformers import AutoTokenizer

    target = Target(model.eval(), AutoTokenizer.from_pretrained(tokenizer_dir), "replica")
    state = {name: tensor.contiguous() for name, tensor in new_head(target).state_dict_official().items()
             if config.get("bias", True) or name != "fc.bias"}  # a head trained without fc's bias ships none
    size = {key: getattr(model.config, key) for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                                                       "num_key_value_heads", "vocab_size", "rms_norm_eps")}
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "initializer_range": 0.02,
        "max_position_embeddings": 2048, "model_type": "llama", "num_hidden_layers": 1, "pad_token_id": 0,
        "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True,
        **config, **size}, indent=2))
    if weights == "pytorch_model.bin":
        torch.save(state, snapshot / weights)
    else:
        save_file(state, snapshot / weights, metadata={"format": "pt"})


def vicuna(hf_home: Path, head_weights: str = HEAD_FORMATS[0], target_weights: str = "bin") -> None:
    """lmsys/vicuna-7b-v1.3 and its EAGLE head, tiny."""
    snapshot = hub_snapshot(hf_home, VICUNA)
    vocab = sentencepiece_tokenizer(snapshot)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                         max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                         num_key_value_heads=TINY["num_attention_heads"], **TINY))
    save_shards(model, snapshot, 2, target_weights)
    eagle_head(hub_snapshot(hf_home, VICUNA_HEAD), model, snapshot, head_weights,
               {"bos_token_id": 1, "eos_token_id": 2})


def llama3(hf_home: Path, head_weights: str = HEAD_FORMATS[0]) -> None:
    """meta-llama/Meta-Llama-3-8B-Instruct (the files the export preloads) and its EAGLE head, tiny."""
    snapshot = hub_snapshot(hf_home, LLAMA3)
    snapshot.mkdir(parents=True)
    vocab = fast_tokenizer(snapshot, "<|begin_of_text|>", "<|eot_id|>")
    torch.manual_seed(1)
    ids = dict(bos_token_id=vocab - 2, eos_token_id=vocab - 1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, max_position_embeddings=8192, rms_norm_eps=1e-5,
                                         rope_theta=500000.0, tie_word_embeddings=False, num_key_value_heads=2,
                                         **ids, **TINY))
    save_shards(model, snapshot, 4, "safetensors")
    eagle_head(hub_snapshot(hf_home, LLAMA3_HEAD), model, snapshot, head_weights,
               {**ids, "rope_theta": 500000.0, "bias": False})


def smollm2(hf_home: Path) -> None:
    """HuggingFaceTB/SmolLM2-135M-Instruct (the files the export preloads): the default model's hidden size and
    vocabulary, as many layers as the shipped head reads features from, one attention head and a small MLP (the
    Space times and measures each pair it holds at start-up, on this replica in the rehearsal: with a sixth of the
    real attention's weights its measurement took 30 s instead of 52 on one core here)."""
    snapshot = hub_snapshot(hf_home, DEFAULT_HUB_ID)
    snapshot.mkdir(parents=True)
    fast_tokenizer(snapshot, "<|im_start|>", "<|im_end|>")
    shapes = json.loads((SHIPPED_HEAD / "config.json").read_text())
    layers = shapes.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids", [0])
    config = LlamaConfig(**{k: shapes[k] for k in ("vocab_size", "hidden_size", "head_dim", "rms_norm_eps",
                                                    "max_position_embeddings")},
                         num_attention_heads=1, num_key_value_heads=1, intermediate_size=16,
                         num_hidden_layers=max(layers) + 1, tie_word_embeddings=True)
    torch.manual_seed(2)
    model = LlamaForCausalLM(config)
    model.config.save_pretrained(snapshot)
    model.generation_config.save_pretrained(snapshot)
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              snapshot / "model.safetensors", metadata={"format": "pt"})


REPLICAS = {VICUNA: vicuna, LLAMA3: llama3, DEFAULT_HUB_ID: smollm2}


def replicate(hf_home: Path, targets: list[str]) -> None:
    """The replica of each of `targets` (and its head) in the hub cache under `hf_home`."""
    for target in targets:
        REPLICAS[target](hf_home)
