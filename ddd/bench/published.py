"""Published GPU measurements of EAGLE, EAGLE-2 and EAGLE-3, and the GPU projection (ddd/bench/projection.py) fitted
on them and checked against them.

Each figure names its card, target and mean accept length (tau), and its benchmark and temperature where its source
names them. The projection's free parameters (projection.Overheads) are fitted on all of them (`fit`), and each is
checked by the rule fitted on the others (`leave_one_out`): docs/results.md, "The projection against published
measurements", has the table `python -m ddd.bench.published` prints (20 s or so). Figures from compiled decoding
(gpt-fast, CUDA graphs) and figures that name no card or no tau are listed (NOT_FITTED) but not fitted: the rule
models eager PyTorch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ddd.catalog import PAIRS, ModelPair
from ddd.numbers import readable

from .projection import FIT, Gpu, Overheads, project

RTX3090 = Gpu("RTX 3090", 936e9, 71e12,
              "NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X, 936 GB/s; NVIDIA Ampere GA102 GPU architecture "
              "whitepaper: 71 TFLOPS FP16 tensor, dense, with FP32 accumulate (142 with FP16 accumulate)")
# Neither source says which A100 80GB: the SXM card's 2,039 GB/s is taken; the PCIe card reads 1,935 GB/s. Both
# compute 312 TFLOPS.
A100 = Gpu("A100 80GB", 2039e9, 312e12,
           "NVIDIA A100 datasheet: A100 80GB SXM, 2,039 GB/s (PCIe: 1,935 GB/s); 312 TFLOPS FP16 tensor, dense")

VICUNA_7B = PAIRS[1]
VICUNA_13B = ModelPair("Vicuna-13B v1.3 + EAGLE head", "lmsys/vicuna-13b-v1.3", "yuhuili/EAGLE-Vicuna-13B-v1.3")
# The EAGLE-3 code drafts 8 calls deep (the catalog's EAGLE-3 pair's settings); Vicuna's 32,000-token vocabulary is
# taken as the head's own.
VICUNA_13B_EAGLE3 = ModelPair("Vicuna-13B v1.3 + EAGLE-3 head", "lmsys/vicuna-13b-v1.3",
                              "yuhuili/EAGLE3-Vicuna1.3-13B", settings=PAIRS[3].settings, head_kind="eagle3")
VICUNA_33B = ModelPair("Vicuna-33B v1.3 + EAGLE head", "lmsys/vicuna-33b-v1.3", "yuhuili/EAGLE-Vicuna-33B-v1.3")

SPEC_BENCH = ("Spec-Bench leaderboard (github.com/hemingkx/Spec-Bench, Leaderboard.md, 2025-04-22): the 'Overall' "
              "speedup and '#Mean Accepted Tokens'; greedy, FP16, batch 1")
SPEC_BENCH_TASKS = "Spec-Bench (6 tasks)"


@dataclass(frozen=True)
class Figure:
    """One published measurement: a method's speedup over plain decoding at its tau, or (method "plain") plain
    decoding's tokens per second."""

    label: str  # the method as the source names it
    method: str  # the engine's method the projection runs for it (EAGLE-3: EAGLE-2's tree on an EAGLE-3 head)
    pair: ModelPair  # the target and head structure the projection counts
    target: str  # the target as the source names it
    gpu: Gpu
    benchmark: str
    temperature: float | None  # None: the source does not say
    tau: float
    value: float
    source: str

    @property
    def unit(self) -> str:
        return " tokens/s" if self.method == "plain" else "x"

    def projected(self, fit: Overheads) -> float:
        run = project(self.pair, self.gpu, {} if self.method == "plain" else {self.method: self.tau}, fit)
        return run.methods["plain"].tokens_per_s if self.method == "plain" else run.speedup(self.method)


def _spec_bench(label: str, method: str, pair: ModelPair, gpu: Gpu, tau: float, speedup: float) -> Figure:
    where = "'Leaderboard on 3090'" if gpu is RTX3090 else f"'Leaderboard on A100', {pair.model.split('/')[1]}"
    return Figure(label, method, pair, pair.label.split(" + ")[0], gpu, SPEC_BENCH_TASKS, 0.0, tau, speedup,
                  f"{SPEC_BENCH}, {where}")


FIGURES = (
    _spec_bench("EAGLE-2", "eagle2", VICUNA_7B, RTX3090, 4.35, 2.19),
    _spec_bench("EAGLE", "eagle", VICUNA_7B, RTX3090, 3.57, 2.03),
    _spec_bench("EAGLE-2", "eagle2", VICUNA_7B, A100, 4.34, 2.36),
    _spec_bench("EAGLE", "eagle", VICUNA_7B, A100, 3.58, 2.10),
    _spec_bench("EAGLE-3", "eagle2", VICUNA_13B_EAGLE3, A100, 5.71, 3.02),
    _spec_bench("EAGLE-2", "eagle2", VICUNA_13B, A100, 4.43, 2.46),
    _spec_bench("EAGLE", "eagle", VICUNA_13B, A100, 3.64, 2.16),
    _spec_bench("EAGLE-2", "eagle2", VICUNA_33B, A100, 4.05, 2.59),
    _spec_bench("EAGLE", "eagle", VICUNA_33B, A100, 3.39, 2.43),
    # LLaMA2-Chat 7B and LLaMA-7B have Vicuna-7B's structure (Vicuna v1.3 fine-tunes LLaMA-7B).
    Figure("plain (eager)", "plain", VICUNA_7B, "LLaMA2-Chat 7B", RTX3090, "MT-bench", None, 1.0, 24.5,
           "EAGLE repository README (github.com/SafeAILab/EAGLE at 22325d9), 'With gpt-fast': 'vanilla', fp16"),
    Figure("plain (eager)", "plain", VICUNA_7B, "LLaMA-7B", A100, "not named", None, 1.0, 25.5,
           "PyTorch blog, 'Accelerating Generative AI with PyTorch II: GPT, Fast': the starting point, batch 1, an "
           "A100-80GB power-limited to 330 W, 'heavily CPU overhead bound'"),
)

# Published GPU figures the rule is not fitted on, and why.
NOT_FITTED = (
    "EAGLE repository README, 'With gpt-fast' (RTX 3090, LLaMA2-Chat 7B, MT-bench, fp16): gpt-fast 55.1 tokens/s, "
    "EAGLE + gpt-fast 100.2 tokens/s, 1.82x; compiled decoding (torch.compile, CUDA graphs) launches no operation "
    "from Python: another regime.",
    "SGLang's documentation, speculative decoding (one H100, Llama-3.1 8B Instruct, MT-bench): 158.34 tokens/s "
    "without speculation, 244.10 with EAGLE-2, 373.25 with EAGLE-3; SGLang replays CUDA graphs: another regime.",
    "DDD paper (arXiv 2409.00142): DDD 3.16x plain decoding on one A40, averaged over Vicuna 7B and 13B and "
    "LLaMA2-Chat 7B and 13B (MT-bench, temperature 0), 4% ahead of EAGLE-2: no tau (Section 3.1: 'We also do not "
    "measure token acceptance rate').",
    "EAGLE-2 paper (arXiv 2406.16858), Table 1: Vicuna-7B EAGLE-2 3.62x at tau 4.98 (MT-bench, temperature 0); "
    "Table 2: LLaMA3-Instruct 8B 3.46x at 4.53: its text names no card.",
    "EAGLE-3 paper (arXiv 2503.01840), Table 1: Llama-3.1 8B EAGLE-3 4.40x at tau 6.13 (MT-bench, temperature 0): "
    "no card found named for it in the sources at hand.",
)

# Where the fit looks: each parameter's range, searched on a grid that narrows around the best point.
RANGES = {"launch_s": (1e-6, 60e-6), "bandwidth_fraction": (0.3, 1.0), "compute_fraction": (0.05, 1.0),
          "layer_ops": (0.0, 120.0), "token_ops": (0.0, 60.0)}
GRID = 5  # points per parameter and round
ROUNDS = 12  # each round narrows the grid to one of the last round's steps either side of the best point


def log_error(figure: Figure, fit: Overheads) -> float | np.ndarray:
    """The figure's projected value over its published one, in log; one per rule of a grid (fit's arrays)."""
    return np.log(figure.projected(fit) / figure.value)


def fit(figures: tuple[Figure, ...] = FIGURES) -> Overheads:
    """The parameters that minimise the sum of squared log errors over `figures`. Where figures cannot tell two
    points apart (a figure bound by the host does not depend on the bandwidth or the FLOPS), the grid's first wins:
    the highest bandwidth and compute fractions, the least overhead."""
    ranges = dict(RANGES)
    best = None
    for _ in range(ROUNDS):
        axes = {name: _axis(name, low, high) for name, (low, high) in ranges.items()}
        # Every point of the grid at once, each field an array, the last parameter varying fastest: numpy's argmin
        # keeps the first of equal points, the tie rule above.
        grid = Overheads(**{name: values.ravel() for name, values in
                            zip(axes, np.meshgrid(*axes.values(), indexing="ij"))})
        first = int(np.argmin(sum(log_error(f, grid) ** 2 for f in figures)))
        best = Overheads(**{name: float(getattr(grid, name)[first]) for name in axes})
        ranges = {name: _narrowed(getattr(best, name), RANGES[name], low, high) for name, (low, high) in ranges.items()}
    return best


def _axis(name: str, low: float, high: float) -> list[float]:
    points = [low + (high - low) * i / (GRID - 1) for i in range(GRID)]
    return points[::-1] if name.endswith("_fraction") else points  # ties: the card's bandwidth and FLOPS first


def _narrowed(value: float, bounds: tuple[float, float], low: float, high: float) -> tuple[float, float]:
    step = (high - low) / (GRID - 1)
    return max(bounds[0], value - step), min(bounds[1], value + step)


@dataclass(frozen=True)
class Checked:
    """A figure, the rule fitted on every figure, and the rule fitted on the others (leave one out)."""

    figure: Figure
    fitted: float  # projected by the fit on every figure
    left_out: float  # projected by the fit on the others

    @property
    def error(self) -> float:
        """The leave-one-out error: above 0, the projection is above the published figure."""
        return self.left_out / self.figure.value - 1


def leave_one_out(figures: tuple[Figure, ...] = FIGURES) -> list[Checked]:
    whole = fit(figures)
    return [Checked(f, f.projected(whole), f.projected(fit(figures[:i] + figures[i + 1:])))
            for i, f in enumerate(figures)]


def band(checked: list[Checked]) -> float:
    """The largest leave-one-out error, rounded up to a whole percent: the band projected figures carry."""
    return math.ceil(max(abs(c.error) for c in checked) * 100) / 100


def table(checked: list[Checked]) -> str:
    lines = ["| figure | GPU | target | benchmark | T | tau | published | projected (all fitted) | "
             "projected (left out) | leave-one-out error |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in checked:
        f = c.figure
        lines.append(f"| {f.label} | {f.gpu.name} | {f.target} | {f.benchmark} | "
                     f"{'not named' if f.temperature is None else readable(f.temperature)} | "
                     f"{f.tau:.2f} | {readable(f.value)}{f.unit} | {readable(c.fitted)}{f.unit} | "
                     f"{readable(c.left_out)}{f.unit} | {c.error:+.1%} |")
    return "\n".join(lines)


def report() -> str:
    """The fit, every figure checked, the band and the figures left out."""
    checked = leave_one_out()
    whole = fit()
    lines = [table(checked), "",
             f"fit: {whole}", f"band: ±{band(checked):.0%} (the declared FIT: {FIT})", "",
             "Sources:"]
    lines += [f"- {f.label}, {f.target}, {f.gpu.name}: {f.source}" for f in FIGURES]
    lines += [f"- {g.name}: {readable(g.bandwidth / 1e9)} GB/s, {readable(g.flops / 1e12)} TFLOPS ({g.source})"
              for g in (RTX3090, A100)]
    lines += ["", "Not fitted:"] + [f"- {line}" for line in NOT_FITTED]
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
