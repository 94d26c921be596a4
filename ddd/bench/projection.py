"""What each model pair the app offers would decode at on three GPUs: ZeroGPU's, the DDD paper's A40 and an H100.

`python -m ddd.bench.projection` prints the table (docs/results.md, "GPU projection", has it with every source);
`--bandwidth` and `--tau` project onto another card or accept length. `python -m ddd.bench.published` fits the rule
on the published GPU measurements and checks it against each of them.

A decoding step on a GPU at batch 1 is bound either by reading memory or by the host issuing its operations one by
one (ddd/ops.py): each phase of a step takes the longer of the two,

    max(bytes read / (bandwidth x reached fraction), host operations x launch cost)

and the engine waits for the device between phases, so a step is the sum of its phases: the target's forward
(its 16-bit weights and the KV cache of a typical context), each draft call (the head's layer and the LM head
rows it drafts over), and the step's remaining operations (acceptance, the cache kept). Bytes come from the
pairs' configs (ddd.catalog). Operations are counted live, by running the engine on a tiny random model of the
pair's structure: the operations a step dispatches depend on the number of layers, the attention's grouping and
the head's kind, not on widths, so the counts follow the engine as it changes. What the counts miss, the host's
own work per speculative step (building the tree, waiting for the device) and per verified token, is counted in
operations too. Those two, the launch cost and the fraction of the card's bandwidth a batch-1 forward reaches are
the rule's free parameters (Overheads), fitted on published GPU measurements (ddd/bench/published.py). A method's
tokens per second is its mean acceptance length tau (published for the papers' pairs, measured for the default
one) over its step time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ddd.catalog import PAIRS, TARGET_SIZES, ModelPair, head_shape, parameter_count
from ddd.costs import StepCosts
from ddd.eagle3 import new_eagle3_head
from ddd.engine import generate
from ddd.head import for_target, new_head
from ddd.models import DEFAULT_HUB_ID, DEFAULT_MODEL, Target, load_target
from ddd.numbers import readable
from ddd.settings import CHECK_STEPS, EAGLE_TREE, METHOD_DECLARATIONS, TOTAL_TOKENS
from ddd.trace import RunTrace

METHODS = ("plain", "eagle2", "ddd")  # what the app races and the table shows
COUNTED = ("plain", "eagle", "eagle2", "ddd")  # what operations are counted for (EAGLE too, for published figures)
WEIGHT_BYTES = 2  # 16-bit weights and KV cache, as the papers and ZeroGPU (float16) run them
# An MT-bench turn's context (its question and answer so far), for the KV cache each forward reads: assumed.
CONTEXT_TOKENS = 512


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth: float  # bytes per second, from memory: the card's specification
    source: str


ZEROGPU = Gpu("ZeroGPU (half an RTX PRO 6000)", 1792e9 / 2,
              "NVIDIA's RTX PRO 6000 Blackwell: 96 GB of GDDR7 at 1,792 GB/s; ZeroGPU's default 'large' size is "
              "half the card (48 GB), assumed to read at half its bandwidth, as a MIG half holds half its memory")
A40 = Gpu("A40", 696e9, "NVIDIA A40 datasheet: 48 GB GDDR6, 696 GB/s")
H100 = Gpu("H100 SXM", 3.35e12, "NVIDIA H100 datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s")
GPUS = (ZEROGPU, A40, H100)


@dataclass(frozen=True)
class Overheads:
    """What the roofline leaves out: the rule's free parameters, fitted on published GPU measurements."""

    launch_s: float  # host seconds per dispatched operation: PyTorch's dispatch and the CUDA launch
    bandwidth_fraction: float  # of the card's specified bandwidth, what a batch-1 forward reads at
    step_ops: float  # the host's work per speculative step that the counts miss, in operations
    token_ops: float  # the host's work per verified token beyond the root, in operations


# `python -m ddd.bench.published` fits these (the least squares of the log errors over every published
# figure, ddd/bench/published.py); tests/test_projection.py fits them again and checks they are these.
FIT = Overheads(launch_s=22.34e-6, bandwidth_fraction=0.4342, step_ops=552.2, token_ops=8.987)
# The largest leave-one-out error of that fit (each figure projected by the rule fitted on the others): the band
# every projected figure the app shows carries.
BAND = 0.11


def banded(value: float, suffix: str = "x") -> str:
    """A projected figure with its band: "3.4x (±8%)"."""
    return f"{readable(value, 2) if value < 10 else readable(value)}{suffix} (±{BAND:.0%})"


@dataclass(frozen=True)
class Tau:
    """Mean acceptance length (tokens per step, the bonus token included) of EAGLE-2 and DDD on a pair."""

    eagle2: float
    ddd: float
    source: str

    def per_method(self) -> dict[str, float]:
        return {"plain": 1.0, "eagle2": self.eagle2, "ddd": self.ddd}


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


# -- operations, counted on a tiny model of the pair's structure -------------------------------------------------

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


# -- the projection --------------------------------------------------------------------------------------------

def phase_seconds(nbytes: float, ops: float, gpu: Gpu, fit: Overheads = FIT) -> float:
    """One phase of a step: reading `nbytes` from memory or the host issuing `ops` operations, whichever takes
    longer."""
    return max(nbytes / (gpu.bandwidth * fit.bandwidth_fraction), ops * fit.launch_s)


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
    fit: Overheads

    def speedup(self, method: str) -> float:
        return self.methods[method].tokens_per_s / self.methods["plain"].tokens_per_s

    def seconds_per_token(self, method: str) -> float:
        return 1 / self.methods[method].tokens_per_s

    def prefill_s(self, method: str) -> float:
        """The prompt's forward: the weights read once (a prompt's tokens go through them together)."""
        return phase_seconds(self.nbytes.target, self.prefill_ops[method], self.gpu, self.fit)

    def costs(self) -> StepCosts:
        """The cost rule's costs here, in plain steps (ddd.costs.StepCosts): a draft call; a tree forward (with the
        step's remaining operations) beyond a one-token one, less what its tokens add; and each verified token."""
        plain = self.methods["plain"].step_s
        eagle2 = self.methods["eagle2"]
        per_token = self.fit.token_ops * self.fit.launch_s
        tokens = self.pair.tree_settings()[TOTAL_TOKENS.name]
        base = eagle2.verify_s + eagle2.other_s - plain - per_token * (tokens - 1)
        return StepCosts(self.draft_call_s / plain, max(base, 0.0) / plain, per_token / plain)


def ddd_calls(pair: ModelPair) -> int:
    """DDD's draft calls per step: its first check. At the papers' threshold the beam's confidence is below it there
    on every step for the shipped head (docs/results.md, "DDD's depth"); no paper reports DDD's depth."""
    checks = pair.tree_settings()[CHECK_STEPS.name]
    return min(checks) if checks != "all" else 1


def tree_tokens(pair: ModelPair, method: str) -> int:
    """The tokens a method's step verifies, the root included: EAGLE's static tree, or the dynamic tree's budget."""
    return {"plain": 1, "eagle": len(EAGLE_TREE) + 1}.get(method, pair.tree_settings()[TOTAL_TOKENS.name])


def project(pair: ModelPair, gpu: Gpu, taus: Mapping[str, float] | None = None,
            fit: Overheads = FIT) -> PairProjection:
    """`pair` on `gpu`: each method of `taus` (method -> tau; default: the pair's published or measured EAGLE-2 and
    DDD taus, TAUS) and plain decoding."""
    ops, nbytes = pair_ops(pair), pair_bytes(pair)
    taus = {"plain": 1.0, **(taus if taus is not None else TAUS[pair.model].per_method())}
    target = nbytes.target + nbytes.kv_per_token * CONTEXT_TOKENS
    calls = {"plain": 0, "eagle": ops["eagle"].calls, "eagle2": pair.tree_settings()["draft_calls"],
             "ddd": ddd_calls(pair)}
    methods = {}
    for method, tau in taus.items():
        counted = ops[method]
        draft = calls[method] * phase_seconds(nbytes.call, counted.per_call, gpu, fit) + (
            nbytes.root / (gpu.bandwidth * fit.bandwidth_fraction) if calls[method] else 0.0)
        host = (fit.step_ops + fit.token_ops * (tree_tokens(pair, method) - 1)) if method != "plain" else 0.0
        methods[method] = MethodProjection(method, tau, draft, phase_seconds(target, counted.verify, gpu, fit),
                                           (counted.other + host) * fit.launch_s)
    return PairProjection(pair, gpu, methods, phase_seconds(nbytes.call, ops["eagle2"].per_call, gpu, fit),
                          {m: ops[m].prefill for m in COUNTED}, nbytes, fit)


def zerogpu_costs(run: RunTrace) -> StepCosts | None:
    """The cost rule's costs on ZeroGPU's GPU for a recorded run's pair: the projection's for the catalog's pair of
    its target and head kind; None for a pair the catalog lacks."""
    pair = next((p for p in PAIRS if run.model in ((p.model,) if p.model else (DEFAULT_MODEL, DEFAULT_HUB_ID))
                 and run.head_kind == head_shape(p)[0]), None)
    return project(pair, ZEROGPU).costs() if pair else None


def projections(pairs: list[ModelPair] = PAIRS, gpus: tuple[Gpu, ...] = GPUS,
                eagle2_tau: float | None = None) -> list[PairProjection]:
    """Each pair on each card; `eagle2_tau`: every pair's EAGLE-2 tau instead of its own (DDD's scaled as TAUS
    scales it)."""
    taus = published(eagle2_tau, "given").per_method() if eagle2_tau else None
    return [project(pair, gpu, taus) for pair in pairs for gpu in gpus]


def table(rows: list[PairProjection]) -> str:
    """The projection as a Markdown table: per pair and GPU, each method's tokens/s and speedup over plain, with
    the band of the rule's leave-one-out error."""
    lines = [f"| pair | GPU | plain tokens/s | EAGLE-2 tokens/s (speedup) | DDD tokens/s (speedup) |",
             "|---|---|---:|---:|---:|"]
    for row in rows:
        cells = [readable(row.methods["plain"].tokens_per_s)] + [
            f"{readable(row.methods[m].tokens_per_s)} ({readable(row.speedup(m), 2)}x ±{BAND:.0%})"
            for m in ("eagle2", "ddd")]
        lines.append(f"| {row.pair.label} | {row.gpu.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sources(gpus: tuple[Gpu, ...] = GPUS) -> str:
    """Every figure the projection rests on, with where it comes from."""
    lines = [f"- {gpu.name}: {readable(gpu.bandwidth / 1e9)} GB/s ({gpu.source})" for gpu in gpus]
    lines.append(f"- fitted on published measurements (python -m ddd.bench.published): {readable(FIT.launch_s * 1e6)} us per "
                 f"operation, {FIT.bandwidth_fraction:.0%} of the card's bandwidth, {readable(FIT.step_ops)} "
                 f"operations of host work per speculative step, {readable(FIT.token_ops)} per verified token; "
                 f"leave-one-out error within {BAND:.0%}")
    lines.append(f"- context: {CONTEXT_TOKENS} tokens of KV cache per forward (assumed)")
    lines += [f"- {pair.label}: tau EAGLE-2 {TAUS[pair.model].eagle2:.2f}, DDD {TAUS[pair.model].ddd:.2f} "
              f"({TAUS[pair.model].source})" for pair in PAIRS]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddd-projection", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidth", type=float, metavar="GB/S",
                        help="project onto a card reading this many GB/s (its specification) instead of the three")
    parser.add_argument("--card", default="given card", help="the name --bandwidth's card goes by in the table")
    parser.add_argument("--tau", type=float, metavar="TAU",
                        help="every pair's EAGLE-2 accept length (tokens per step, the bonus token included) "
                             "instead of its published one; DDD's is scaled as for the papers' pairs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gpus = (Gpu(args.card, args.bandwidth * 1e9, "given on the command line"),) if args.bandwidth else GPUS
    print(table(projections(gpus=gpus, eagle2_tau=args.tau)))
    print()
    print(sources(gpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
