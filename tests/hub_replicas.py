"""Tiny stand-ins for the files the hub's repositories hold, in the layouts those repositories use."""
from __future__ import annotations

import io
import json
from pathlib import Path

from tests.tiny import CORPUS

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


def save_bin_shards(model, directory: Path, shards: int) -> list[str]:
    """`model` as pre-safetensors checkpoints hold it: its config and generation config, its state dict split into
    `shards` pickled files `pytorch_model-0000N-of-0000M.bin` and the `pytorch_model.bin.index.json` that maps each
    weight to its file (the layout `save_pretrained` wrote before safetensors became its only format). The files."""
    import torch

    model.config.save_pretrained(directory)
    model.generation_config.save_pretrained(directory)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    names = list(state)
    files = [f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin" for i in range(shards)]
    weight_map = {}
    for i, file in enumerate(files):
        part = names[i * len(names) // shards:(i + 1) * len(names) // shards]
        torch.save({name: state[name] for name in part}, directory / file)
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    (directory / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return files
