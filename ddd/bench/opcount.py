"""The operations each method dispatches per step, counted live on a tiny random model of a pair's structure: the
GPU projection's host side (ddd/bench/projection.py).

The operations a step dispatches depend on the number of layers, the attention's grouping and the head's kind, not
on widths, so a tiny model of the same structure dispatches what the pair does, and the counts follow the engine as
it changes (ddd/ops.py counts them).
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ddd.eagle3 import new_eagle3_head
from ddd.engine import generate
from ddd.head import for_target, new_head
from ddd.models import Target, load_target
from ddd.settings import METHOD_DECLARATIONS

COUNTED = ("plain", "eagle", "eagle2", "ddd")  # what operations are counted for (EAGLE too, for published figures)
TINY_VOCAB = 64  # at least the beam width: a draft call takes the beam's best tokens
TINY_HEADS = 4
PROMPT = list(range(1, 9))
COUNTED_TOKENS = 8  # a random head is accepted almost never: about one step per token
SEED = 0  # the tiny models' weights: how often their drafts are accepted moves the medians a little


@dataclass(frozen=True)
class MethodOps:
    """A method's operations per step (medians over the run's steps), by the phases ddd.ops.StepOps counts."""

    calls: float  # draft calls
    per_call: float  # operations per draft call
    verify: float
    other: float
    prefill: float  # the prompt's forward


def _tiny_target(folder: str, layers: int, grouped: bool) -> Target:
    """A random Llama target with `layers` layers (attention grouped or not), loaded as any model directory is."""
    words = Tokenizer(WordLevel({f"t{i}": i for i in range(TINY_VOCAB)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0").save_pretrained(folder)
    config = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=TINY_HEADS, num_key_value_heads=TINY_HEADS // 2 if grouped else TINY_HEADS,
                         max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    LlamaForCausalLM(config).save_pretrained(folder)
    return load_target(folder, dtype="float32")


@lru_cache(maxsize=None)
def counted_ops(layers: int, grouped: bool, head_kind: str, own_vocab: bool,
                tree: tuple[tuple[str, Any], ...]) -> dict[str, MethodOps]:
    """Each method's operations per step on a tiny random pair: `layers` target layers, grouped attention or not, a
    head of `head_kind` drafting over its own smaller vocabulary or the target's, at the tree settings `tree`.
    float32 on the CPU runs the native kernels a GPU runs in 16 bits (ddd/precision.py). One thread: a tiny model's
    operations are too small to share, and the counts do not depend on it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(SEED)
            return _count(layers, grouped, head_kind, own_vocab, tree)
    finally:
        torch.set_num_threads(threads)


def _count(layers: int, grouped: bool, head_kind: str, own_vocab: bool,
           tree: tuple[tuple[str, Any], ...]) -> dict[str, MethodOps]:
    with tempfile.TemporaryDirectory() as folder:
        target = _tiny_target(folder, layers, grouped)
        draft_vocab = torch.arange(TINY_VOCAB // 2) if own_vocab else None
        head = (new_eagle3_head(target, draft_vocab=draft_vocab) if head_kind == "eagle3" else
                for_target(new_head(target, draft_vocab=draft_vocab), target))
        out = {}
        for method in COUNTED:
            names = {s.name for s in METHOD_DECLARATIONS.get(method, ())}
            run = generate(target, head if method != "plain" else None, PROMPT, method, chat=False,
                           max_new_tokens=COUNTED_TOKENS, count_ops=True, **{k: v for k, v in tree if k in names})
            steps = list(run)
            decoded = [s for s in steps if not s.prefill]
            calls = statistics.median(s.draft_calls or 0 for s in decoded)
            out[method] = MethodOps(
                calls, statistics.median(s.ops.draft / s.draft_calls for s in decoded) if calls else 0.0,
                statistics.median(s.ops.verify for s in decoded), statistics.median(s.ops.other for s in decoded),
                steps[0].ops.total)
        return out
