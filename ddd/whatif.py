"""What other depth settings would have done in a recorded greedy run, step by step, without a model.

Under greedy verification a step accepts the longest path of its verified tree that spells the target's own
tokens, and the record holds those tokens: what the run emitted from that step on. So for any tree that is a
part of a step's recorded draft pool, what it would have accepted is exact. DDD's depth is read from the H
recorded after each draft call; the cost rule's comes from its own policy (ddd.drafting.CostDepth) fed the
recorded pool level by level, as the engine feeds it the live one.

A rule may want to draft deeper than the step did; the pool then ends too early and the step is a bound: its
depth is the least the rule could have chosen, its accepted tokens the most it could have accepted (the chain
through the whole recorded pool, plus one token per extra level where that chain reaches the pool's deepest
level at a node the next call would expand).

Step times are predicted from the step's own measured parts: its draft time per call times the calls, its
verify time scaled to the verified count by the cost rule's model of a forward (StepCosts.time without draft
calls: 1 plain step, plus verify_base + (n - 1) x verify_cost for n > 1 tokens), and its other time as it was.
ddd/bench/budget.py sizes budgets from the same pools.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .costs import IDENTITY, Calibration, StepCosts
from .drafting import CostDepth
from .settings import COST_SETTINGS, MAX_DRAFT_CALLS, parse_settings
from .trace import DraftNode, RunTrace, Step
from .tree import Pool, pool_size, rerank

# The methods whose pools hold whole levels: every call expands the beam's best nodes into all their children.
DYNAMIC_METHODS = ("ddd", "cost", "eagle2")


class WhatIfError(ValueError):
    """A run the what-if cannot replay; the message says why."""


@dataclass(frozen=True)
class StepWhatIf:
    """One step under another rule, beside what it recorded. When `bound`, `calls` is the least the rule would
    have drafted, `accepted` the most it could have accepted, and `verified` and `ms` belong to that least depth."""

    index: int
    calls: int
    verified: int  # tokens the target verifies, the root included
    accepted: int  # draft tokens accepted
    ms: float  # predicted
    bound: bool
    recorded_calls: int
    recorded_verified: int
    recorded_accepted: int
    recorded_ms: float


@dataclass(frozen=True)
class WhatIf:
    rule: str  # "ddd" or "cost"
    method: str  # the recorded run's
    settings: dict[str, Any]  # the rule's settings as replayed
    steps: tuple[StepWhatIf, ...]
    calibrated: bool  # the run recorded its head's calibration (without it the cost rule reads IDENTITY)
    complete: bool  # every pool holds every drafted node; a compact race file keeps part, and counts may be low

    @property
    def bounds(self) -> int:
        return sum(s.bound for s in self.steps)

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted decode tokens per second (the prefill apart): accepted tokens and each step's bonus token."""
        return _rate(sum(s.accepted + 1 for s in self.steps), sum(s.ms for s in self.steps))

    @property
    def measured_tokens_per_s(self) -> float | None:
        """The same over the recorded steps."""
        return _rate(sum(s.recorded_accepted + 1 for s in self.steps), sum(s.recorded_ms for s in self.steps))


def _rate(tokens: int, ms: float) -> float | None:
    return tokens / ms * 1e3 if ms > 0 else None


# -- what a part of a recorded pool accepts (also ddd/bench/budget.py's) ---------------------------------

def _chain(step: Step, keep: Collection[int], target: Sequence[int] | None) -> list[DraftNode]:
    """The pool nodes the target's tokens follow down the kept tree, from the root's first child on."""
    children = {(n.parent, n.token_id): n for n in step.pool if n.index in keep and n.parent >= 0}
    tokens = step.token_ids if target is None else target
    chain: list[DraftNode] = []
    at = 0
    for token in tokens[:-1]:  # the last token comes from the target itself, after the accepted ones
        node = children.get((at, token))
        if node is None:
            break
        chain.append(node)
        at = node.index
    return chain


def accepted_within(step: Step, keep: Collection[int], target: Sequence[int] | None = None) -> int:
    """Draft tokens the step would have accepted (greedy) had only the pool nodes in `keep` been verified.
    `target`: the tokens the run emitted from this step on; by default the step's own, which reach as far as any
    tree inside the one it verified."""
    return len(_chain(step, keep, target))


def ddd_depth(confidence: Sequence[float], threshold: float, max_calls: int,
              checks: Collection[int] | None = None) -> int:
    """Draft calls DDD makes: it stops after the first call in `checks` (None: every call) whose H (the
    confidence after call c is index c - 1) is below `threshold`, and at `max_calls` at the latest. A check past
    the recorded confidences counts as a stop: the least depth the rule could have chosen there."""
    for call in range(1, max_calls):
        if (checks is None or call in checks) and (call > len(confidence) or confidence[call - 1] < threshold):
            return call
    return max_calls


def kept_nodes(step: Step, calls: int, total_tokens: int) -> set[int]:
    """Pool indices a tree of `calls` draft calls and `total_tokens` verified tokens keeps (as rerank does)."""
    nodes = [n for n in step.pool if n.depth <= calls]  # in pool order: by level
    keep = rerank(torch.tensor([n.score for n in nodes]), total_tokens)
    return {nodes[i].index for i in keep.tolist()}


# -- replaying a run ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Run:
    """What every rule reads from the recorded run."""

    trace: RunTrace
    steps: list[Step]  # decode steps
    targets: list[list[int]]  # per step, the tokens the run emitted from it on (as far as a tree could reach)
    beam_width: int
    total_tokens: int
    max_calls: int
    complete: bool


def replayable(trace: RunTrace) -> str:
    """Why the what-if cannot replay `trace` ("" when it can)."""
    if trace.method not in DYNAMIC_METHODS:
        return (f"A {trace.method} run drafts no dynamic tree, so it holds no levels to replay; the what-if replays "
                "EAGLE-2, DDD or cost-rule runs.")
    if float(trace.sampling.get("temperature") or 0) > 0:
        return ("This run sampled (temperature above 0): a sampled step's accepted tokens are chance, so what "
                "another tree would have accepted cannot be read from the record. Run a greedy race (temperature 0).")
    if any(s.draft_calls and not s.pool for s in trace.steps):
        return "This run was recorded without its draft pools, so there is no tree to replay."
    if not any(s.draft_calls for s in trace.steps):
        return "This run has no drafting steps to replay."
    return ""


def _run(trace: RunTrace, max_calls: int | None) -> _Run:
    why = replayable(trace)
    if why:
        raise WhatIfError(why)
    settings = trace.settings
    beam_width, total_tokens = int(settings["beam_width"]), int(settings["total_tokens"])
    max_calls = max_calls or int(settings.get("max_draft_calls", MAX_DRAFT_CALLS.default))
    steps = [s for s in trace.steps if not s.prefill]
    reach = 1 + max(max_calls, *(s.draft_calls for s in steps))
    emitted = [t for s in steps for t in s.token_ids]
    targets, start = [], 0
    for step in steps:
        targets.append(emitted[start: start + reach])
        start += len(step.token_ids)
    complete = all(len(s.pool) == pool_size(beam_width, s.draft_calls) for s in steps if s.draft_calls)
    return _Run(trace, steps, targets, beam_width, total_tokens, max_calls, complete)


def own_costs(trace: RunTrace | None) -> StepCosts:
    """The run's own step costs: what a cost-rule run priced its last step with (measured as it decoded, or its
    settings'), else the declared defaults (a 2-core CPU's)."""
    settings = trace.settings if trace is not None and trace.method == "cost" else {}
    priced = [s.costs for s in trace.steps if s.costs is not None] if settings else []
    if priced:
        return StepCosts(priced[-1].draft_cost, priced[-1].verify_base, priced[-1].verify_cost)
    declared = {s.name: settings[s.name] for s in COST_SETTINGS if s.name in settings}
    return StepCosts.of(parse_settings("cost", declared))


def _context_cap(step: Step) -> int | None:
    """The step's depth when the context's end cut it short (fewer calls than allowed, and no check stopped it)."""
    if step.context_cut:
        return step.draft_calls
    return None


def _levels(step: Step) -> dict[int, list[DraftNode]]:
    levels: dict[int, list[DraftNode]] = {}
    for node in sorted(step.pool, key=lambda n: n.index):
        levels.setdefault(node.depth, []).append(node)
    return levels


def _beam(level: list[DraftNode], beam_width: int) -> list[DraftNode]:
    """The level's nodes the next call expands, best first: those it did expand, or (for the last level drafted)
    its best `beam_width` by draft score, as the drafter picks them."""
    expanded = [n for n in level if n.in_beam]
    if expanded:
        return sorted(expanded, key=lambda n: -n.score)
    best = torch.tensor([n.score for n in level]).topk(min(beam_width, len(level))).indices.tolist()
    return [level[i] for i in best]


def _most_accepted(run: _Run, step: Step, target: list[int], calls: int) -> int:
    """A deeper tree's accepted tokens at most: the chain through the whole pool, and a token per extra level up to
    `calls` where the chain ends at the deepest recorded level on a node the next call would expand."""
    chain = _chain(step, {n.index for n in step.pool}, target)
    count = len(chain)
    if chain and chain[-1].depth == step.draft_calls:
        beam = _beam(_levels(step)[step.draft_calls], run.beam_width)
        if chain[-1].index in {n.index for n in beam}:
            count += calls - step.draft_calls
    return min(count, len(target) - 1)


def _predict(step: Step, calls: int, verified: int, accepted: int, bound: bool, costs: StepCosts) -> StepWhatIf:
    draft_ms = step.draft_ms / step.draft_calls * calls
    verify_ms = step.verify_ms * costs.time(0, verified) / costs.time(0, step.verified)
    return StepWhatIf(step.index, calls, verified, accepted, draft_ms + verify_ms + step.other_ms, bound,
                      step.draft_calls, step.verified, step.accepted, step.ms)


def _as_recorded(step: Step) -> StepWhatIf:
    """A step that drafted nothing (at the context's end): every rule verifies the root alone there."""
    return StepWhatIf(step.index, 0, step.verified, step.accepted, step.ms, False, step.draft_calls,
                      step.verified, step.accepted, step.ms)


def ddd_whatif(trace: RunTrace, threshold: Any, check_steps: Any, *, max_draft_calls: int | None = None,
               time_costs: StepCosts | None = None) -> WhatIf:
    """`trace` replayed with DDD at `threshold` checking after `check_steps` (values or text, parsed by their
    declarations; SettingsError when bad), within the run's max draft calls; times by `time_costs` (the run's own)."""
    run = _run(trace, max_draft_calls)
    settings = parse_settings("ddd", dict(beam_width=run.beam_width, max_draft_calls=run.max_calls,
                                          check_steps=check_steps, threshold=threshold, total_tokens=run.total_tokens))
    settings.validate()
    checks, costs = settings.checks(), time_costs or own_costs(trace)
    out = []
    for step, target in zip(run.steps, run.targets):
        if not step.draft_calls:
            out.append(_as_recorded(step))
            continue
        calls = ddd_depth(step.confidence, settings.threshold, run.max_calls, checks)
        calls = min(calls, _context_cap(step) or calls)
        bound = calls > step.draft_calls
        verified = min(run.total_tokens, pool_size(run.beam_width, calls))
        accepted = (_most_accepted(run, step, target, run.max_calls) if bound else
                    accepted_within(step, kept_nodes(step, calls, run.total_tokens), target))
        out.append(_predict(step, calls, verified, accepted, bound, costs))
    shown = {"threshold": settings.threshold, "check_steps": settings.check_steps, "max_draft_calls": run.max_calls}
    return WhatIf("ddd", trace.method, shown, tuple(out), trace.calibration is not None, run.complete)


def _add_level(pool: Pool, level: list[DraftNode], position: dict[int, int]) -> None:
    """The recorded level into the replayed pool, in its order (`position`: recorded index -> replayed index)."""
    added = pool.add(torch.tensor([n.token_id for n in level]), torch.tensor([position[n.parent] for n in level]),
                     level[0].depth, torch.tensor([n.logprob for n in level]), torch.tensor([n.score for n in level]),
                     torch.tensor([n.rank for n in level]))
    position.update(zip((n.index for n in level), range(added, added + len(level))))


def cost_whatif(trace: RunTrace, costs: Mapping[str, Any] | None, *, max_draft_calls: int | None = None,
                time_costs: StepCosts | None = None) -> WhatIf:
    """`trace` replayed with the cost rule at `costs` (by the names of COST_SETTINGS; values or text, parsed by
    their declarations; None: each step at the costs it recorded, as a cost-rule run that measured its own priced
    it), the run's head calibration (IDENTITY when it recorded none) and max draft calls; times by `time_costs`
    (the run's own)."""
    run = _run(trace, max_draft_calls)
    as_priced = costs is None
    if as_priced:
        costs = {s.name: getattr(own_costs(trace), s.name) for s in COST_SETTINGS}
    settings = parse_settings("cost", dict(costs, beam_width=run.beam_width, max_draft_calls=run.max_calls,
                                           total_tokens=run.total_tokens))
    settings.validate()
    calibration = Calibration.from_json(trace.calibration) if trace.calibration is not None else IDENTITY
    policy = CostDepth(run.max_calls, run.total_tokens, StepCosts.of(settings), calibration)
    costs = time_costs or own_costs(trace)
    out = []
    for step, target in zip(run.steps, run.targets):
        priced = step.costs if as_priced else None
        if not step.draft_calls or (priced is not None and priced.retimed):  # a re-timing step: its size was asked
            out.append(_as_recorded(step))
            continue
        if priced is not None:
            policy.pinned = StepCosts(priced.draft_cost, priced.verify_base, priced.verify_cost)
        levels = _levels(step)
        root = levels[0][0]
        pool = Pool.with_root(torch.tensor(root.token_id))
        position = {root.index: 0}
        # As DynamicTreeDrafter drafts: after every call but the last allowed, the policy checks the pool so far.
        limit = min(run.max_calls, _context_cap(step) or run.max_calls)
        calls, bound = 1, False
        policy.begin()
        _add_level(pool, levels[1], position)
        while calls < limit:
            beam = torch.tensor([position[n.index] for n in _beam(levels[calls], run.beam_width)])
            if policy.check(calls, torch.tensor(step.confidence[calls - 1]), pool, beam).stop:
                break
            if calls == step.draft_calls:  # it would draft a level the step never drafted
                bound = True
                break
            calls += 1
            _add_level(pool, levels[calls], position)
        keep = policy.keep(pool, pool.cat(), calls, run.total_tokens)
        recorded = {v: k for k, v in position.items()}
        kept = {recorded[i] for i in keep.tolist()}
        if bound:
            accepted = _most_accepted(run, step, target, run.max_calls)
            out.append(_predict(step, calls + 1, len(kept), accepted, True, costs))
        else:
            out.append(_predict(step, calls, len(kept), accepted_within(step, kept, target), False, costs))
    shown = {**{s.name: getattr(settings, s.name) for s in COST_SETTINGS}, "max_draft_calls": run.max_calls,
             "as_priced": as_priced}
    return WhatIf("cost", trace.method, shown, tuple(out), trace.calibration is not None, run.complete)
