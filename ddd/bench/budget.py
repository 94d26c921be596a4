"""Tree budgets for the machine at hand.

The best budget is a trade between how many tokens a step accepts and what the step costs, and on a
CPU the cost of verifying n tokens grows fast with n. `auto_budget` measures both at start-up:

1. costs: after a context of CONTEXT_TOKENS it times the target verifying n tokens and its LM head over
   n rows for a few n, and a plain decoding forward;
2. acceptance: it decodes two calibration prompts with a generous EAGLE-2 tree (greedy) and keeps each
   step's pool. Under greedy verification the accepted path is the chain of the target's own tokens,
   so for any smaller budget (fewer draft calls = the pool's shallower levels; fewer tokens = what
   rerank keeps) the accepted length is exactly the part of that chain the smaller tree still holds;
   for DDD the depth each threshold would have chosen is read from the recorded confidences.

It then predicts tokens per second for every candidate and picks the fastest EAGLE-2 and DDD settings.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from transformers import DynamicCache

from ddd import metrics
from ddd.catalog import resolve_head
from ddd.cli import model_arguments
from ddd.costs import StepCosts, fit_verify, steps_of
from ddd.devices import clock_after
from ddd.engine import encode_prompt, generate
from ddd.head import DraftHead, HeadLoadError
from ddd.numbers import readable
from ddd.models import ModelLoadError, Target, load_target
from ddd.settings import (BEAM_WIDTH, COST_SETTINGS, DRAFT_CALLS, TOTAL_TOKENS, DDDSettings, Eagle2Settings,
                          SettingsError, add_argument, argument_type)
from ddd.trace import PHASES, Step
from ddd.tree import DraftTree
from ddd.whatif import accepted_within, ddd_depth, kept_nodes

# One prose and one code prompt; none of them is a benchmark question.
CALIBRATION_PROMPTS = (
    "Explain step by step how a bicycle gear system works.",
    "Write a short Python function that computes the gear ratio from the teeth on two sprockets.",
)
SIZES = (1, 2, 4, 8, 16, 32, 64)
# The context the forwards are timed after. On a CPU the extra cost of each verified token grows with the
# context (its attention reads every cached token), so timings after a bare calibration prompt (about 30
# tokens) made verification look cheaper than in answers to real questions (docs/benchmark.md).
CONTEXT_TOKENS = 256
TOKEN_BUDGETS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


def interpolate(table: dict[int, float], n: int) -> float:
    """Linear interpolation between measured sizes (extrapolated from the last two beyond them)."""
    sizes = sorted(table)
    if n <= sizes[0]:
        return table[sizes[0]]
    lo = max(s for s in sizes if s <= n) if n <= sizes[-1] else sizes[-2]
    hi = min((s for s in sizes if s >= n), default=sizes[-1])
    if lo == hi:
        return table[lo]
    return table[lo] + (table[hi] - table[lo]) * (n - lo) / (hi - lo)


@dataclass
class Costs:
    """Measured milliseconds on this machine."""

    forward_ms: dict[int, float]  # target forward (no LM head) verifying n tokens after CONTEXT_TOKENS
    lm_ms: dict[int, float]  # the target's LM head on n rows
    draft_call_ms: float  # one draft call, from the calibration run
    other_ms: float  # per-step bookkeeping of a speculative step, from the calibration run
    plain_ms: float  # one whole plain decoding step at the same context

    def step_costs(self, verified: int) -> StepCosts:
        """The cost rule's costs (ddd/costs.py) in plain steps, by the fit the rule itself makes of its timings
        (fit_verify): the timed forwards up to `verified` tokens (at least 4), a draft call, a plain step."""
        sizes = {n: ms for n, ms in self.forward_ms.items() if n <= max(verified, 4)}
        fit = fit_verify(sizes, dict.fromkeys(sizes, 1.0))
        return steps_of(fit, self.draft_call_ms, self.plain_ms)

    def step_ms(self, verified: int, draft_calls: int, lm_rows: list[int]) -> float:
        """lm_rows: the sizes of the LM-head calls greedy acceptance makes (see accept_greedy)."""
        return (draft_calls * self.draft_call_ms + interpolate(self.forward_ms, verified)
                + sum(interpolate(self.lm_ms, r) for r in lm_rows if r) + self.other_ms)


@dataclass
class Candidate:
    method: str
    settings: dict
    tau: float  # predicted tokens per step
    step_ms: float  # predicted milliseconds per step
    speedup: float  # predicted, vs the measured plain step


@dataclass
class OpCount:
    """Operations a method dispatched (ddd/ops.py) decoding a calibration prompt: per generated token, per decode
    step and per draft call, and a step's drafting, verification and the rest."""

    method: str
    per_token: float
    per_step: float
    per_draft_call: float | None
    draft: float
    verify: float
    other: float


def count_ops(target: Target, head: DraftHead | None, method: str, settings: dict, prompt: str,
              new_tokens: int) -> OpCount:
    run = generate(target, head, prompt, method, max_new_tokens=new_tokens, record=False, count_ops=True, **settings)
    counts = metrics.counts_from_steps(list(run))
    figures = metrics.op_figures(counts)
    steps = counts["decode_steps"]
    return OpCount(method, figures["ops_per_token"], figures["ops_per_step"], figures["ops_per_draft_call"],
                   *(counts[f"ops_{phase}"] / steps for phase in PHASES))


@dataclass
class BudgetReport:
    costs: Costs
    calibration_steps: int
    beam_width: int
    eagle2: Eagle2Settings
    ddd: DDDSettings
    candidates: list[Candidate] = field(default_factory=list)
    ops: list[OpCount] = field(default_factory=list)  # plain, then the picked EAGLE-2 and DDD settings

    def best(self, method: str, **where) -> Candidate:
        """The fastest candidate of `method` among those whose settings match `where` (e.g. total_tokens=8)."""
        pool = [c for c in self.candidates
                if c.method == method and all(c.settings.get(k) == v for k, v in where.items())]
        return max(pool, key=lambda c: c.speedup)


def _ms(fn, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((clock_after(device) - start) * 1e3)
    return statistics.median(times)


@dataclass
class Timings:
    forward_ms: dict[int, float]  # the target verifying n tokens (a chain, with the tree mask), no LM head
    lm_ms: dict[int, float]  # the target's LM head on n rows
    plain_forward_ms: float  # one plain decoding forward (one token, no mask), no LM head


@torch.inference_mode()
def time_target(target: Target, prompt: str = CALIBRATION_PROMPTS[0], sizes=SIZES, repeats: int = 7,
                context: int = CONTEXT_TOKENS) -> Timings:
    """Forward times after `context` cached tokens (the prompt's ids repeated; what the tokens say does not
    change the cost): verifying n tokens for each n in `sizes` as the engine does, one plain forward, and the
    LM head on n rows. Each round times every size once and the median round counts, so that a shared
    machine's drift reaches all sizes alike."""
    model = target.model
    prompt_ids = encode_prompt(target, prompt, True)
    length = max(1, min(context, target.context_limit - max(sizes) - 1))
    ids = torch.tensor([(prompt_ids * (length // len(prompt_ids) + 1))[:length]], device=target.device)
    cache = DynamicCache(config=model.config)
    hidden = model.model(input_ids=ids, cache=cache, use_cache=True).last_hidden_state[0]

    def forward(n: int, **inputs) -> None:
        model.model(**inputs, cache=cache, use_cache=True)
        cache.crop(-n)

    jobs: dict[tuple[str, int], Callable[[], None]] = {("plain", 1): partial(forward, 1, input_ids=ids[:, -1:])}
    for n in sizes:
        tree = DraftTree.chain(ids[0, -1:].expand(n).contiguous())
        jobs["verify", n] = partial(forward, n, input_ids=tree.tokens[None], position_ids=(length + tree.depths)[None],
                                    attention_mask=tree.attention_mask(length, model.dtype))
        jobs["lm", n] = partial(model.lm_head, hidden[-1:].expand(n, -1).contiguous())
    times: dict[tuple[str, int], list[float]] = {key: [] for key in jobs}
    for round_ in range(repeats + 1):  # the first round warms up
        for key, job in jobs.items():
            ms = _ms(job, 1, target.device)
            if round_:
                times[key].append(ms)
    median = {key: statistics.median(values) for key, values in times.items()}
    return Timings({n: median["verify", n] for n in sizes}, {n: median["lm", n] for n in sizes}, median["plain", 1])


def lm_rows(step: Step, keep: set[int], accepted: int) -> list[int]:
    """The LM-head calls greedy acceptance makes on that tree: its internal nodes at once, then the last
    accepted node when it is a leaf."""
    internal = {node.parent for node in step.pool if node.index in keep and node.parent >= 0}
    last = step.accepted_path[accepted]
    return [len(internal), 0 if last in internal else 1]


def _candidate(method: str, settings: dict, steps: list[Step], costs: Costs, calls_of, total_tokens: int) -> Candidate:
    tokens = ms = 0.0
    for step in steps:
        calls = calls_of(step)
        keep = kept_nodes(step, calls, total_tokens)
        accepted = accepted_within(step, keep)
        tokens += 1 + accepted
        ms += costs.step_ms(len(keep), calls, lm_rows(step, keep, accepted))
    tau = tokens / len(steps)
    step_ms = ms / len(steps)
    return Candidate(method, settings, tau, step_ms, tau * costs.plain_ms / step_ms)


def plan(steps: list[Step], costs: Costs, beam_width: int, max_calls: int, max_tokens: int) -> list[Candidate]:
    """Every EAGLE-2 (draft calls x tokens) and DDD (threshold x tokens, checks every call) candidate."""
    budgets = [b for b in TOKEN_BUDGETS if b <= max_tokens]
    out = []
    for calls in range(1, max_calls + 1):
        for tokens in budgets:
            out.append(_candidate("eagle2", {"beam_width": beam_width, "draft_calls": calls, "total_tokens": tokens},
                                  steps, costs, lambda s, c=calls: c, tokens))
    seen = sorted({round(h, 1) + 0.0 for s in steps for h in s.confidence[: max_calls - 1]})  # + 0.0: no "-0.0"
    thresholds = sorted(set(seen[:: max(1, len(seen) // 12)]) | {-0.3})
    for threshold in thresholds:
        for tokens in budgets:
            out.append(_candidate(
                "ddd", {"beam_width": beam_width, "max_draft_calls": max_calls, "check_steps": "all",
                        "threshold": threshold, "total_tokens": tokens},
                steps, costs, lambda s, x=threshold: ddd_depth(s.confidence, x, max_calls), tokens))
    return out


def auto_budget(target: Target, head: DraftHead, *, prompts: tuple[str, ...] = CALIBRATION_PROMPTS,
                new_tokens: int = 32, beam_width: int = 8, max_calls: int = 8, max_tokens: int = 64,
                repeats: int = 7) -> BudgetReport:
    """Measure this machine and return the fastest EAGLE-2 and DDD settings it predicts (greedy decoding)."""
    widest = Eagle2Settings(beam_width=beam_width, draft_calls=max_calls, total_tokens=max_tokens)
    widest.validate(head.draft_vocab_size)
    if new_tokens < 2:
        raise SettingsError(f"new_tokens must be at least 2 (a calibration step and the one after), not {new_tokens}.")
    timings = time_target(target, prompts[0], repeats=repeats)
    # A plain step as the engine takes it, at the context the forwards were timed after: one forward, the LM
    # head on one row, and the step's bookkeeping as measured on a few real plain steps.
    plain = [s for s in generate(target, None, prompts[0], "plain", max_new_tokens=8, record=False) if not s.prefill]
    plain_ms = timings.plain_forward_ms + timings.lm_ms[1] + statistics.median(s.other_ms for s in plain)
    steps: list[Step] = []
    for prompt in prompts:
        run = [s for s in generate(target, head, prompt, "eagle2", max_new_tokens=new_tokens, beam_width=beam_width,
                                   draft_calls=max_calls, total_tokens=max_tokens) if not s.prefill]
        steps += run[:-1] or run  # the last step may be cut short by the token limit or the end of turn
    costs = Costs(
        forward_ms=timings.forward_ms, lm_ms=timings.lm_ms,
        draft_call_ms=statistics.median(s.draft_ms / max(1, s.draft_calls) for s in steps),
        other_ms=statistics.median(s.other_ms for s in steps), plain_ms=plain_ms,
    )
    candidates = plan(steps, costs, beam_width, max_calls, max_tokens)
    best_e2 = max((c for c in candidates if c.method == "eagle2"), key=lambda c: c.speedup)
    best_ddd = max((c for c in candidates if c.method == "ddd"), key=lambda c: c.speedup)
    # Counted apart from the timed runs: counting slows every operation.
    ops = [count_ops(target, head if method != "plain" else None, method, settings, prompts[0], new_tokens)
           for method, settings in (("plain", {}), ("eagle2", best_e2.settings), ("ddd", best_ddd.settings))]
    return BudgetReport(costs, len(steps), beam_width, Eagle2Settings(**best_e2.settings),
                        DDDSettings(**best_ddd.settings), candidates, ops)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddd.bench.budget",
                                     description="time this machine and predict the fastest EAGLE-2 and DDD settings")
    model_arguments(parser)
    add_argument(parser, BEAM_WIDTH, default=8,
                 help=f"the beam width, kept fixed ({BEAM_WIDTH.allowed()}; default %(default)s)")
    parser.add_argument("--max-calls", type=argument_type(DRAFT_CALLS), default=8,
                        help=f"the deepest tree tried, in draft calls ({DRAFT_CALLS.allowed()}; default %(default)s)")
    parser.add_argument("--max-tokens", type=argument_type(TOTAL_TOKENS), default=64,
                        help=f"the largest verify budget tried ({TOTAL_TOKENS.allowed()}; default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens decoded per calibration prompt")
    parser.add_argument("--show", type=int, default=5, help="candidates listed per method")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _report(args)
    except (ModelLoadError, HeadLoadError, SettingsError) as err:
        parser.exit(2, f"error: {err}\n")


def _report(args) -> int:
    target = load_target(args.model, dtype=args.dtype, device=args.device)
    head, note = resolve_head(args.head, target)
    if note:
        print(f"note: {note}", file=sys.stderr)
    print("measuring (forward timings, plain steps, greedy calibration runs)...", file=sys.stderr, flush=True)
    report = auto_budget(target, head, beam_width=args.beam_width, max_calls=args.max_calls, max_tokens=args.max_tokens,
                         new_tokens=args.new_tokens)
    c = report.costs
    for label, table in (("target forward", c.forward_ms), ("LM head", c.lm_ms)):
        print(f"{label} ms by rows  " + ", ".join(f"{n}: {ms:.0f}" for n, ms in sorted(table.items())))
    print(f"draft call {c.draft_call_ms:.1f} ms; step bookkeeping {c.other_ms:.1f} ms; "
          f"plain step {c.plain_ms:.1f} ms; {report.calibration_steps} calibration steps")
    for method in ("eagle2", "ddd"):
        ranked = sorted((x for x in report.candidates if x.method == method), key=lambda x: -x.speedup)
        print(f"\n{method}: predicted speedup vs plain, tau, ms per step")
        for cand in ranked[: args.show]:
            shown = " ".join(f"{k}={v}" for k, v in cand.settings.items())
            print(f"  {cand.speedup:5.2f}x  tau {cand.tau:4.2f}  {cand.step_ms:6.1f} ms  {shown}")
    print("\noperations dispatched, the same on any machine (the picks below, on the first calibration prompt):")
    plain = report.ops[0]
    for count in report.ops:
        call = f", {count.per_draft_call:.0f} a draft call" if count.per_draft_call else ""
        print(f"  {count.method}: {count.per_token:.0f} a token ({count.per_token / plain.per_token:.2f}x plain), "
              f"{count.per_step:.0f} a step: drafting {count.draft:.0f}{call}, verification {count.verify:.0f}, "
              f"the rest {count.other:.0f}")
    print("\nbest, as settings:")
    for method in ("eagle2", "ddd"):
        print(f"  {method}: " + " ".join(f"--set {k}={v}" for k, v in report.best(method).settings.items()))
    costs = c.step_costs(report.best("eagle2").settings["total_tokens"])
    print("  cost: " + " ".join(f"--set {s.name}={readable(getattr(costs, s.name))}" for s in COST_SETTINGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
