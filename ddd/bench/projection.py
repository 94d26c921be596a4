"""What each model pair the app offers would decode at on three GPUs: ZeroGPU's, the DDD paper's A40 and an H100.

`python -m ddd.bench.projection` prints the table (docs/results.md, "GPU projection", has it with every source).

A decoding step on a GPU at batch 1 is bound either by reading memory or by launching its operations one by one
(ddd/ops.py): each phase of a step takes the longer of the two,

    max(bytes read / memory bandwidth, operations x LAUNCH_S)

and the engine waits for the device between phases, so a step is the sum of its phases: the target's forward
(its 16-bit weights and the KV cache of a typical context), each draft call (the head's layer and the LM head
rows it drafts over), and the step's remaining operations (acceptance, the cache kept). Bytes come from the
pairs' configs (ddd.catalog). Operations are counted live, by running the engine on a tiny random model of the
pair's structure: the operations a step dispatches depend on the number of layers, the attention's grouping and
the head's kind, not on widths, so the counts follow the engine as it changes. A method's tokens per second
is its mean acceptance length tau (published for the papers' pairs, measured for the default one) over its
step time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ddd.catalog import PAIRS, ModelPair, head_shape, parameter_count, target_size
from ddd.costs import StepCosts
from ddd.eagle3 import new_eagle3_head
from ddd.engine import generate
from ddd.head import for_target, new_head
from ddd.models import DEFAULT_HUB_ID, DEFAULT_MODEL, Target, load_target
from ddd.numbers import readable
from ddd.settings import CHECK_STEPS, METHOD_DECLARATIONS
from ddd.trace import RunTrace

METHODS = ("plain", "eagle2", "ddd")
WEIGHT_BYTES = 2  # 16-bit weights and KV cache, as the papers and ZeroGPU (float16) run them
# An MT-bench turn's context (its question and answer so far), for the KV cache each forward reads: assumed.
CONTEXT_TOKENS = 512
# Assumed, the same on every card (the host issues the operations): PyTorch's dispatch and the CUDA launch of
# one operation. A kernel launch alone takes on the order of microseconds (Modal's GPU Glossary, "CUDA Graph").
LAUNCH_S = 5e-6


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth: float  # bytes per second, from memory
    source: str


ZEROGPU = Gpu("ZeroGPU (half an RTX PRO 6000)", 1792e9 / 2,
              "NVIDIA's RTX PRO 6000 Blackwell: 96 GB of GDDR7 at 1,792 GB/s; ZeroGPU's default 'large' size is "
              "half the card (48 GB), assumed to read at half its bandwidth, as a MIG half holds half its memory")
A40 = Gpu("A40", 696e9, "NVIDIA A40 datasheet: 48 GB GDDR6, 696 GB/s")
H100 = Gpu("H100 SXM", 3.35e12, "NVIDIA H100 datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s")
GPUS = (ZEROGPU, A40, H100)


@dataclass(frozen=True)
class Tau:
    """Mean acceptance length (tokens per step, the bonus token included) of EAGLE-2 and DDD on a pair."""

    eagle2: float
    ddd: float
    source: str

    def of(self, method: str) -> float:
        return {"plain": 1.0, "eagle2": self.eagle2, "ddd": self.ddd}[method]


# The default pair at the papers' settings, float32, 42 dev questions (docs/results.md, "float32, the papers'
# settings"): measured here.
DEFAULT_TAU = Tau(2.38, 2.36, "docs/results.md, 'float32, the papers' settings' (42 dev questions)")


def published(eagle2: float, source: str) -> Tau:
    """A published EAGLE-2 tau. No paper gives DDD's (the DDD paper reports speedups only, Section 3.1): DDD's is
    taken to lose what it lost against EAGLE-2 on the default pair at the same settings."""
    return Tau(eagle2, eagle2 * DEFAULT_TAU.ddd / DEFAULT_TAU.eagle2,
               f"{source}; DDD's scaled by {DEFAULT_TAU.ddd}/{DEFAULT_TAU.eagle2} (the default pair's)")


TAUS = {
    None: DEFAULT_TAU,
    "lmsys/vicuna-7b-v1.3": published(4.98, "EAGLE-2 paper (arXiv 2406.16858), Table 1: V 7B, EAGLE-2, MT-bench, "
                                            "temperature 0"),
    "meta-llama/Meta-Llama-3-8B-Instruct": published(
        4.53, "EAGLE-2 paper (arXiv 2406.16858), Table 2: LLaMA3-Instruct 8B, EAGLE-2, MT-bench, temperature 0"),
    # EAGLE-3's own algorithm is EAGLE-2's dynamic tree drafted 8 deep with an EAGLE-3 head: what this pair races.
    "meta-llama/Llama-3.1-8B-Instruct": published(
        6.13, "EAGLE-3 paper (arXiv 2503.01840), Table 1: L31 8B, EAGLE-3, MT-bench, temperature 0"),
}

# -- operations, counted on a tiny model of the pair's structure -------------------------------------------------

TINY_VOCAB = 64  # at least the beam width: a draft call takes the beam's best tokens
TINY_HEADS = 4
PROMPT = list(range(1, 9))
COUNTED_TOKENS = 8  # a random head is accepted almost never: about one step per token


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
        for method in METHODS:
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


def pair_ops(pair: ModelPair) -> dict[str, MethodOps]:
    size = target_size(pair)
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


def pair_bytes(pair: ModelPair) -> PairBytes:
    """From the target's config; the head has one decoder layer of the target's widths (EAGLE-3's attention reads
    the embedding and the hidden state side by side, 2H wide)."""
    size = target_size(pair)
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


# -- the projection --------------------------------------------------------------------------------------------

def phase_seconds(nbytes: float, ops: float, gpu: Gpu) -> float:
    """One phase of a step: reading `nbytes` from memory or launching `ops` operations, whichever takes longer."""
    return max(nbytes / gpu.bandwidth, ops * LAUNCH_S)


@dataclass(frozen=True)
class MethodProjection:
    method: str
    tau: float
    draft_s: float  # a step's draft calls
    verify_s: float  # the target's forward over the step's tree (the root alone for plain decoding)
    other_s: float

    @property
    def step_s(self) -> float:
        return self.draft_s + self.verify_s + self.other_s

    @property
    def tokens_per_s(self) -> float:
        return self.tau / self.step_s


@dataclass(frozen=True)
class PairProjection:
    pair: ModelPair
    gpu: Gpu
    methods: dict[str, MethodProjection]
    draft_call_s: float  # one draft call (EAGLE-2's)
    prefill_ops: dict[str, float]
    nbytes: PairBytes

    def speedup(self, method: str) -> float:
        return self.methods[method].tokens_per_s / self.methods["plain"].tokens_per_s

    def seconds_per_token(self, method: str) -> float:
        return 1 / self.methods[method].tokens_per_s

    def prefill_s(self, method: str) -> float:
        """The prompt's forward: the weights read once (a prompt's tokens go through them together)."""
        return phase_seconds(self.nbytes.target, self.prefill_ops[method], self.gpu)

    def costs(self) -> StepCosts:
        """The cost rule's costs here, in plain steps (ddd.costs.StepCosts): a draft call; a tree forward (with the
        step's remaining operations) beyond a one-token one; and no cost per verified token, since neither the
        bytes read nor the operations grow with the tree."""
        plain = self.methods["plain"].step_s
        eagle2 = self.methods["eagle2"]
        return StepCosts(self.draft_call_s / plain, max(eagle2.verify_s + eagle2.other_s - plain, 0.0) / plain, 0.0)


def ddd_calls(pair: ModelPair) -> int:
    """DDD's draft calls per step: its first check. At the papers' threshold the beam's confidence is below it there
    on every step for the shipped head (docs/results.md, "DDD's depth"); no paper reports DDD's depth."""
    checks = pair.tree_settings()[CHECK_STEPS.name]
    return min(checks) if checks != "all" else 1


def project(pair: ModelPair, gpu: Gpu) -> PairProjection:
    ops, nbytes, tau = pair_ops(pair), pair_bytes(pair), TAUS[pair.model]
    target = nbytes.target + nbytes.kv_per_token * CONTEXT_TOKENS
    calls = {"plain": 0, "eagle2": pair.tree_settings()["draft_calls"], "ddd": ddd_calls(pair)}
    methods = {}
    for method in METHODS:
        counted = ops[method]
        draft = calls[method] * phase_seconds(nbytes.call, counted.per_call, gpu) + (
            nbytes.root / gpu.bandwidth if calls[method] else 0.0)
        methods[method] = MethodProjection(method, tau.of(method), draft, phase_seconds(target, counted.verify, gpu),
                                           counted.other * LAUNCH_S)
    return PairProjection(pair, gpu, methods, phase_seconds(nbytes.call, ops["eagle2"].per_call, gpu),
                          {m: ops[m].prefill for m in METHODS}, nbytes)


def zerogpu_costs(run: RunTrace) -> StepCosts | None:
    """The cost rule's costs on ZeroGPU's GPU for a recorded run's pair: the projection's for the catalog's pair of
    its target and head kind; None for a pair the catalog lacks."""
    pair = next((p for p in PAIRS if run.model in ((p.model,) if p.model else (DEFAULT_MODEL, DEFAULT_HUB_ID))
                 and run.head_kind == head_shape(p)[0]), None)
    return project(pair, ZEROGPU).costs() if pair else None


def projections(pairs: list[ModelPair] = PAIRS, gpus: tuple[Gpu, ...] = GPUS) -> list[PairProjection]:
    return [project(pair, gpu) for pair in pairs for gpu in gpus]


def table(rows: list[PairProjection]) -> str:
    """The projection as a Markdown table: per pair and GPU, each method's tokens/s and speedup over plain."""
    lines = ["| pair | GPU | plain tokens/s | EAGLE-2 tokens/s (speedup) | DDD tokens/s (speedup) |",
             "|---|---|---:|---:|---:|"]
    for row in rows:
        cells = [readable(row.methods["plain"].tokens_per_s)] + [
            f"{readable(row.methods[m].tokens_per_s)} ({row.speedup(m):.2f}x)" for m in ("eagle2", "ddd")]
        lines.append(f"| {row.pair.label} | {row.gpu.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sources() -> str:
    """Every figure the projection rests on, with where it comes from."""
    lines = [f"- {gpu.name}: {readable(gpu.bandwidth / 1e9)} GB/s ({gpu.source})" for gpu in GPUS]
    lines.append(f"- launch: {readable(LAUNCH_S * 1e6)} us per operation (assumed)")
    lines.append(f"- context: {CONTEXT_TOKENS} tokens of KV cache per forward (assumed)")
    lines += [f"- {pair.label}: tau EAGLE-2 {TAUS[pair.model].eagle2:.2f}, DDD {TAUS[pair.model].ddd:.2f} "
              f"({TAUS[pair.model].source})" for pair in PAIRS]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="python -m ddd.bench.projection", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print(table(projections()))
    print()
    print(sources())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
