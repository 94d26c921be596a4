"""What each model pair the app offers would decode at on three GPUs: ZeroGPU's, the DDD paper's A40 and an H100.

`python -m ddd.bench.projection` prints the table (docs/results.md, "GPU projection", has it with every source);
`--bandwidth`, `--tflops` and `--tau` project onto another card or accept length. `python -m ddd.bench.published`
fits the rule on the published GPU measurements and checks it against each of them.

A decoding step on a GPU at batch 1 is bound by reading memory, by computing, or by the host issuing its operations
one by one (ddd/ops.py): each phase of a step takes the longest of the three,

    max(bytes read / (bandwidth x reached fraction), FLOPs / (peak FLOPS x reached fraction),
        host operations x launch cost)

and the engine waits for the device between phases, so a step is the sum of its phases: the target's forward over
the step's tree (its 16-bit weights and the KV cache of a typical context; two FLOPs per weight and token), each
draft call (the head's layer and the LM head rows it drafts over, for the beam's tokens), and the step's remaining
operations (acceptance, the cache kept). Bytes and FLOPs come from the pairs' configs (ddd.catalog), operations are
counted live on a tiny random model of the pair's structure (ddd/bench/opcount.py), so the counts follow the engine
as it changes; ddd/bench/pairshape.py holds all three. What the counts miss, the host's own work per speculative
step (building the tree, keeping each layer's cache, waiting for the device: so much per target layer) and per
verified token, is counted in operations too. Those two, the launch cost and the fractions of the card's bandwidth
and FLOPS a batch-1 forward reaches are the rule's free parameters (Overheads), fitted on published GPU
measurements (ddd/bench/published.py). A method's tokens per second is its mean acceptance length tau (published
for the papers' pairs, measured for the default one) over its step time.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ddd.catalog import PAIRS, ModelPair, head_shape
from ddd.costs import StepCosts
from ddd.models import DEFAULT_HUB_ID, DEFAULT_MODEL
from ddd.numbers import readable
from ddd.settings import TOTAL_TOKENS
from ddd.trace import RunTrace

from .opcount import COUNTED
from .pairshape import CONTEXT_TOKENS, PairBytes, pair_bytes, pair_ops, pair_shape

METHODS = ("plain", "eagle2", "ddd")  # what the app races and the table shows


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth: float  # bytes per second, from memory: the card's specification
    # Its tensor cores' peak in 16 bits, dense (without 2:4 sparsity) and summing in 32 bits, as PyTorch's half
    # matmuls do (a GeForce card does that at half its 16-bit-sum rate): the card's specification.
    flops: float
    source: str


ZEROGPU = Gpu("ZeroGPU (half an RTX PRO 6000)", 1792e9 / 2, 500e12 / 2,
              "NVIDIA's RTX PRO 6000 Blackwell: 96 GB of GDDR7 at 1,792 GB/s; 4,000 AI TOPS, its sparse FP4 rate, "
              "of which dense FP16 runs an eighth, 500 TFLOPS; ZeroGPU's default 'large' size is half the card "
              "(48 GB), assumed to read and compute at half its rates, as a MIG half holds half its memory and SMs")
A40 = Gpu("A40", 696e9, 149.7e12, "NVIDIA A40 datasheet: 48 GB GDDR6, 696 GB/s; 149.7 TFLOPS FP16 tensor, dense")
H100 = Gpu("H100 SXM", 3.35e12, 989.4e12,
           "NVIDIA H100 datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s; FP16 tensor 1,979 TFLOPS with sparsity, half that "
           "dense")
GPUS = (ZEROGPU, A40, H100)


@dataclass(frozen=True)
class Overheads:
    """What the roofline leaves out: the rule's free parameters, fitted on published GPU measurements."""

    launch_s: float  # host seconds per dispatched operation: PyTorch's dispatch and the CUDA launch
    bandwidth_fraction: float  # of the card's specified bandwidth, what a batch-1 forward reads at
    # Of the card's peak FLOPS, what a forward over a step's tree reaches: its matmuls multiply a few dozen rows,
    # far from the large ones the peak is reached on.
    compute_fraction: float
    # The host's work per speculative step that the counts miss, in operations per target layer: a step's
    # bookkeeping runs through every layer (its cache cut to the accepted path and grown by the tree).
    layer_ops: float
    token_ops: float  # the host's work per verified token beyond the root, in operations


# `python -m ddd.bench.published` fits these (the least squares of the log errors over every published
# figure, ddd/bench/published.py); tests/test_projection.py fits them again and checks they are these.
FIT = Overheads(launch_s=21.89e-6, bandwidth_fraction=0.3597, compute_fraction=1.0, layer_ops=16.64,
                token_ops=7.976)
# The largest leave-one-out error of that fit (each figure projected by the rule fitted on the others): the band
# every projected figure the app shows carries.
BAND = 0.08


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

# -- the projection --------------------------------------------------------------------------------------------

def phase_seconds(nbytes: float, flops: float, ops: float, gpu: Gpu, fit: Overheads = FIT) -> float:
    """One phase of a step: reading `nbytes` from memory, computing `flops` or the host issuing `ops` operations,
    whichever takes longest. numpy's maximum, so that a fit's whole grid of rules (each field an array) projects at
    once (ddd/bench/published.py)."""
    return np.maximum(np.maximum(nbytes / (gpu.bandwidth * fit.bandwidth_fraction),
                                 flops / (gpu.flops * fit.compute_fraction)), ops * fit.launch_s)


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
        """The prompt's forward: the weights read once (a prompt's tokens go through them together). Its compute is
        left out: the prompt's length is the visitor's, and a question's hundred-odd tokens compute in a fraction of
        the time the host takes to issue the forward on these cards."""
        return phase_seconds(self.nbytes.target, 0.0, self.prefill_ops[method], self.gpu, self.fit)

    def costs(self) -> StepCosts:
        """The cost rule's costs here, in plain steps (ddd.costs.StepCosts): a draft call; a tree forward (with the
        step's remaining operations) beyond a one-token one, less what its tokens add; and each verified token."""
        plain = self.methods["plain"].step_s
        eagle2 = self.methods["eagle2"]
        per_token = self.fit.token_ops * self.fit.launch_s
        tokens = self.pair.tree_settings()[TOTAL_TOKENS.name]
        base = eagle2.verify_s + eagle2.other_s - plain - per_token * (tokens - 1)
        return StepCosts(self.draft_call_s / plain, max(base, 0.0) / plain, per_token / plain)


def project(pair: ModelPair, gpu: Gpu, taus: Mapping[str, float] | None = None,
            fit: Overheads = FIT) -> PairProjection:
    """`pair` on `gpu`: each method of `taus` (method -> tau; default: the pair's published or measured EAGLE-2 and
    DDD taus, TAUS) and plain decoding."""
    shape, nbytes, ops = pair_shape(pair), pair_bytes(pair), pair_ops(pair)
    taus = {"plain": 1.0, **(taus if taus is not None else TAUS[pair.model].per_method())}
    methods = {}
    for method, tau in taus.items():
        m = shape.methods[method]
        draft = m.calls * phase_seconds(nbytes.call, shape.call_flops, m.call_ops, gpu, fit) + (
            m.root_bytes / (gpu.bandwidth * fit.bandwidth_fraction))
        host = fit.layer_ops * m.layer_units + fit.token_ops * m.token_units
        verify = phase_seconds(shape.target_bytes, m.verify_flops, m.verify_ops, gpu, fit)
        methods[method] = MethodProjection(method, tau, draft, verify, (m.other_ops + host) * fit.launch_s)
    return PairProjection(pair, gpu, methods, phase_seconds(nbytes.call, shape.call_flops, ops["eagle2"].per_call, gpu,
                                                            fit), {m: ops[m].prefill for m in COUNTED}, nbytes, fit)


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
    lines = [f"- {gpu.name}: {readable(gpu.bandwidth / 1e9)} GB/s, {readable(gpu.flops / 1e12)} TFLOPS ({gpu.source})"
             for gpu in gpus]
    lines.append(f"- fitted on published measurements (python -m ddd.bench.published): {readable(FIT.launch_s * 1e6)} "
                 f"us per operation, {FIT.bandwidth_fraction:.0%} of the card's bandwidth, {FIT.compute_fraction:.0%} "
                 f"of its FLOPS, {readable(FIT.layer_ops)} operations of host work per speculative step and target "
                 f"layer, {readable(FIT.token_ops)} per verified token; leave-one-out error within {BAND:.0%}")
    lines.append(f"- context: {CONTEXT_TOKENS} tokens of KV cache per forward (assumed)")
    lines += [f"- {pair.label}: tau EAGLE-2 {TAUS[pair.model].eagle2:.2f}, DDD {TAUS[pair.model].ddd:.2f} "
              f"({TAUS[pair.model].source})" for pair in PAIRS]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddd-projection", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidth", type=float, metavar="GB/S",
                        help="project onto a card reading this many GB/s (its specification) instead of the three")
    parser.add_argument("--tflops", type=float, metavar="TFLOPS",
                        help="with --bandwidth: the card's dense 16-bit tensor TFLOPS, summing in 32 bits (its "
                             "specification)")
    parser.add_argument("--card", default="given card", help="the name --bandwidth's card goes by in the table")
    parser.add_argument("--tau", type=float, metavar="TAU",
                        help="every pair's EAGLE-2 accept length (tokens per step, the bonus token included) "
                             "instead of its published one; DDD's is scaled as for the papers' pairs")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.bandwidth is None) != (args.tflops is None):
        parser.error("--bandwidth and --tflops go together: a card reads and computes")
    gpus = (GPUS if args.bandwidth is None else
            (Gpu(args.card, args.bandwidth * 1e9, args.tflops * 1e12, "given on the command line"),))
    print(table(projections(gpus=gpus, eagle2_tau=args.tau)))
    print()
    print(sources(gpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
