"""What a model pair's decoding step reads, computes and issues, whatever the card: the target's and the head's bytes,
a forward's FLOPs, and the operations counted on a tiny model of the pair's structure (ddd/bench/opcount.py). The GPU
projection (ddd/bench/projection.py) turns them into seconds on a card.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

from ddd.catalog import TARGET_SIZES, ModelPair, head_shape, parameter_count
from ddd.models import DEFAULT_HUB_ID
from ddd.settings import BEAM_WIDTH, CHECK_STEPS, EAGLE_TREE, TOTAL_TOKENS

from .opcount import MethodOps, counted_ops

WEIGHT_BYTES = 2  # 16-bit weights and KV cache, as the papers and ZeroGPU (float16) run them
# An MT-bench turn's context (its question and answer so far), for the KV cache each forward reads: assumed.
CONTEXT_TOKENS = 512

# Targets of published measurements beyond the model menu's: Vicuna v1.3 13B and 33B fine-tune LLaMA 13B and 30B and
# keep their configs (hidden size, MLP width, layers, heads, the 32,000-token vocabulary).
OTHER_SIZES = {
    "lmsys/vicuna-13b-v1.3": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                  num_attention_heads=40, num_key_value_heads=40, vocab_size=32000),
    "lmsys/vicuna-33b-v1.3": dict(hidden_size=6656, intermediate_size=17920, num_hidden_layers=60,
                                  num_attention_heads=52, num_key_value_heads=52, vocab_size=32000),
}


def size_of(pair: ModelPair) -> SimpleNamespace:
    """A pair's target config: the model menu's (ddd.catalog.TARGET_SIZES) or a published measurement's."""
    model = pair.model or DEFAULT_HUB_ID
    return SimpleNamespace(**(TARGET_SIZES[model] if model in TARGET_SIZES else OTHER_SIZES[model]))


# -- operations, counted on a tiny model of the pair's structure (ddd/bench/opcount.py) ----------------------

@cache
def pair_ops(pair: ModelPair) -> dict[str, MethodOps]:
    size = size_of(pair)
    kind, draft_vocab = head_shape(pair)
    grouped = getattr(size, "num_key_value_heads", size.num_attention_heads) < size.num_attention_heads
    return counted_ops(size.num_hidden_layers, grouped, kind, draft_vocab is not None,
                       tuple(sorted(pair.tree_settings().items())))


# -- bytes -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairBytes:
    """What a pair's forwards read, in bytes."""

    target: float  # the target's weights
    kv_per_token: float  # the KV cache each context token adds, read by every forward
    call: float  # one draft call: the head's layer and the LM head rows it drafts over (EAGLE's fc too)
    root: float  # read at each step's first call only (EAGLE-3's fc, which fuses the target's features)


@cache
def pair_bytes(pair: ModelPair) -> PairBytes:
    """From the target's config; the head has one decoder layer of the target's widths (EAGLE-3's attention reads
    the embedding and the hidden state side by side, 2H wide)."""
    size = size_of(pair)
    kind, draft_vocab = head_shape(pair)
    hidden, heads = size.hidden_size, size.num_attention_heads
    kv_heads = getattr(size, "num_key_value_heads", heads)
    head_dim = hidden // heads
    mlp = 3 * hidden * size.intermediate_size
    if kind == "eagle3":
        layer = 2 * hidden * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden + mlp
        call, root = layer + (draft_vocab or size.vocab_size) * hidden, 3 * hidden * hidden
    else:
        layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + mlp
        call, root = layer + (draft_vocab or size.vocab_size) * hidden + 2 * hidden * hidden, 0
    kv = 2 * size.num_hidden_layers * kv_heads * head_dim
    return PairBytes(parameter_count(size) * WEIGHT_BYTES, kv * WEIGHT_BYTES, call * WEIGHT_BYTES,
                     root * WEIGHT_BYTES)


def forward_flops(pair: ModelPair, tokens: int) -> float:
    """The target's forward over `tokens` tokens: two FLOPs per weight each token is multiplied by (every matrix but
    the input embedding, a lookup) and four per context position and attention width in each layer (the scores
    and the weighted values, over the context and the tokens themselves)."""
    size = size_of(pair)
    hidden, heads = size.hidden_size, size.num_attention_heads
    lookup = 0 if getattr(size, "tie_word_embeddings", False) else size.vocab_size * hidden
    attention = 4 * size.num_hidden_layers * heads * (hidden // heads) * (CONTEXT_TOKENS + tokens)
    return tokens * (2 * (parameter_count(size) - lookup) + attention)



def ddd_calls(pair: ModelPair) -> int:
    """DDD's draft calls per step: its first check. At the papers' threshold the beam's confidence is below it there
    on every step for the shipped head (docs/results.md, "DDD's depth"); no paper reports DDD's depth."""
    checks = pair.tree_settings()[CHECK_STEPS.name]
    return min(checks) if checks != "all" else 1


def tree_tokens(pair: ModelPair, method: str) -> int:
    """The tokens a method's step verifies, the root included: EAGLE's static tree, or the dynamic tree's budget."""
    return {"plain": 1, "eagle": len(EAGLE_TREE) + 1}.get(method, pair.tree_settings()[TOTAL_TOKENS.name])


@dataclass(frozen=True)
class MethodShape:
    """What a method's step reads, computes and issues on a pair, whatever the card and the fit."""

    calls: int  # draft calls
    call_ops: float  # operations per draft call
    root_bytes: float  # read at the step's first call only (0 without draft calls)
    layer_units: int  # target layers (0 for plain decoding, which has no speculative host work)
    token_units: int  # tree tokens beyond the root
    verify_flops: float
    verify_ops: float
    other_ops: float


@dataclass(frozen=True)
class PairShape:
    target_bytes: float  # the target's weights and the KV cache a forward reads
    call_flops: float  # one draft call
    methods: dict[str, MethodShape]


@cache  # the fit projects each published figure many times over
def pair_shape(pair: ModelPair) -> PairShape:
    ops, nbytes, layers = pair_ops(pair), pair_bytes(pair), size_of(pair).num_hidden_layers
    # A draft call runs the beam's tokens through the head's layer and LM head (EAGLE's static tree at most 8 a level).
    call_flops = 2 * nbytes.call / WEIGHT_BYTES * pair.tree_settings()[BEAM_WIDTH.name]
    calls = {"plain": 0, "eagle": ops["eagle"].calls, "eagle2": pair.tree_settings()["draft_calls"],
             "ddd": ddd_calls(pair)}
    methods = {}
    for method, counted in ops.items():
        speculative = method != "plain"
        methods[method] = MethodShape(
            calls[method], counted.per_call, nbytes.root if calls[method] else 0.0,
            layers if speculative else 0, tree_tokens(pair, method) - 1 if speculative else 0,
            forward_flops(pair, tree_tokens(pair, method)), counted.verify, counted.other)
    return PairShape(nbytes.target + nbytes.kv_per_token * CONTEXT_TOKENS, call_flops, methods)

