"""A run file's numbers checked against each other, after every field has been checked on its own.

A file whose every field is in range can still contradict itself: a step that emits fifty copies of its tokens,
a pool deeper than its draft calls, a verified count no pool holds, timings of zero, a race whose columns
answered different prompts (components/racecheck.py checks a race's runs against each other). The views would show such numbers as facts (a speed-up of 125x, "kept the 39,999"
of a 47-node pool) or draw them for minutes (a chain 4,096 levels deep). So every count the views derive from is
checked here against what the run's own settings can produce, with the app's own limits (ddd.settings, the
declarations' ui ranges); what the views can recompute (the summary, the answer's text) is recomputed instead.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ddd.costs import StepCosts
from ddd.metrics import summarize
from ddd.settings import COST_SETTINGS, MAX_NEW_TOKENS, parse_settings
from ddd.trace import FILE_DECIMALS, CostsUsed, DepthCheck, RunTrace, Step
from ddd.tree import pool_size

from .inputs import PROMPT_LIMITS
from .race import RaceFileError

Fail = Callable[[str, str], RaceFileError]
# What a race in this app can hold: its max new tokens, and the longest prompt any device reads.
MAX_TOKENS = int(MAX_NEW_TOKENS.bounds(ui=True)[1])
MAX_PROMPT_TOKENS = max(limit.prompt_tokens for limit in PROMPT_LIMITS.values())
WEIGHED = ("expected", "time", "verified", "gain", "time_gain")  # what a cost rule's check records (DepthCheck)
# Every step runs the target model at least once. A forward of a transformers model, with the Python around it,
# takes far longer than 0.05 ms anywhere (the tests' two-layer model takes about 0.7 ms on a 2-core CPU): a step
# recorded faster than that would turn into an impossible speed (a 0.001 ms step is a million tokens a second).
MIN_STEP_MS = 0.05
TOLERANCE = 1e-6  # the cost rule's figures are recomputed from each other: floats that went through JSON
FILE_TOLERANCE = 10.0 ** -FILE_DECIMALS  # a number a saved race rounded
COST_NAMES = tuple(s.name for s in COST_SETTINGS)


@dataclass(frozen=True)
class Shape:
    """The largest draft a run's settings make in one step."""

    calls: int  # draft calls (tree depth)
    width: int | None  # beam width: K nodes at the root call, K x K candidates per later call (None: static tree)
    nodes: int  # drafted nodes of a static tree
    verified: int  # nodes sent to the target, the root included
    checks: bool  # whether the run checks its depth (DDD, the cost rule)
    weighs: bool  # whether its checks weigh expected tokens against time (the cost rule, ddd/costs.py)
    costs: StepCosts | None = None  # the cost rule's settings' costs (a step may record the ones it used)

    @classmethod
    def of(cls, trace: RunTrace) -> "Shape | None":
        if trace.method == "plain":
            return None
        settings = parse_settings(trace.method, trace.settings)
        if trace.method == "eagle":
            tree = settings.tree
            return cls(max(len(p) for p in tree), None, len(tree), len(tree) + 1, False, False)
        calls = settings.draft_calls if trace.method == "eagle2" else settings.max_draft_calls
        weighs = trace.method == "cost"
        return cls(calls, settings.beam_width, 0, settings.total_tokens, trace.method in ("ddd", "cost"), weighs,
                   StepCosts.of(settings) if weighs else None)

    def pool(self, calls: int) -> int:
        """The most nodes `calls` draft calls put in the pool, the root included."""
        if self.width is None:
            return self.nodes + 1
        return pool_size(self.width, calls)


def check_run(trace: RunTrace, where: str, fail: Fail) -> RunTrace:
    """`trace` if its numbers agree with each other and its settings; its summary and text recomputed."""
    if not 1 <= trace.prompt_tokens <= MAX_PROMPT_TOKENS:
        raise fail(f"{where}.prompt_tokens", f"is {trace.prompt_tokens}; a race here reads 1 to "
                                             f"{MAX_PROMPT_TOKENS:,} prompt tokens")
    tokens = sum(len(s.token_ids) for s in trace.steps)
    if tokens > MAX_TOKENS:
        raise fail(f"{where}.steps", f"emit {tokens:,} tokens; a race here writes at most {MAX_TOKENS} "
                                     f"(max new tokens)")
    shape = Shape.of(trace)
    for position, step in enumerate(trace.steps):
        if step.costs is not None:  # first: the checks' weighings are priced at these
            _costs(step.costs, trace, f"{where}.steps[{position}].costs", fail)
        _step(step, shape, f"{where}.steps[{position}]", fail)
    _ops(trace, where, fail)
    text = "".join(s.text for s in trace.steps)
    if trace.text and trace.text != text:
        raise fail(f"{where}.text", "differs from the text its steps emitted")
    trace.text = text
    if trace.summary:  # never trusted: the figures come from the steps (a stopped run's file has none)
        trace.summary = summarize(trace.steps)
    return trace


def _ops(trace: RunTrace, where: str, fail: Fail) -> None:
    """A run counts the operations of all its steps or of none; each count fits its step: the target's forward in
    every step, drafting exactly where the step made draft calls."""
    counted = [s.ops is not None for s in trace.steps]
    if any(counted) and not all(counted):
        raise fail(f"{where}.steps[{counted.index(False)}].ops", "is missing, but the run's other steps count their "
                                                                "operations: a run counts all its steps or none")
    for position, step in enumerate(trace.steps):
        ops, at = step.ops, f"{where}.steps[{position}].ops"
        if ops is None:
            continue
        if ops.verify == 0:
            raise fail(f"{at}.verify", "is 0, but every step runs the target model, which dispatches operations")
        if ops.draft and not step.draft_calls:
            what = "the prefill, which drafts nothing" if step.prefill else "a step that made no draft calls"
            raise fail(f"{at}.draft", f"is {ops.draft:,} on {what}")
        if step.draft_calls and not ops.draft:
            raise fail(f"{at}.draft", f"is 0, but the step made {step.draft_calls} draft calls, which dispatch "
                                      "operations")


def _step(step: Step, shape: Shape | None, where: str, fail: Fail) -> None:
    if not step.ms > 0:
        raise fail(where, "took no time (draft_ms + verify_ms + other_ms is 0); a recorded step always takes some")
    if step.ms < MIN_STEP_MS:
        raise fail(where, f"took {step.ms:.6g} ms (draft_ms + verify_ms + other_ms); a step runs the target model at "
                          f"least once, which takes at least {MIN_STEP_MS} ms on any machine")
    if step.draft_calls and not step.draft_ms > 0:
        raise fail(f"{where}.draft_ms", f"is 0, but the step made {step.draft_calls} draft calls, which take time")
    if step.prefill != (step.index == 0):
        raise fail(f"{where}.prefill", "must be true for step 0, the prefill, and for no other step")
    drafting = (step.draft_calls, step.max_draft_calls, step.verified, step.accepted, step.pool, step.checks,
                step.confidence, step.accepted_path, step.bonus_id)
    if step.prefill or shape is None:
        what = "a prefill" if step.prefill else "a plain decoding step"
        if len(step.token_ids) != 1:
            raise fail(f"{where}.token_ids", f"holds {len(step.token_ids)} tokens; {what} emits one")
        if any(value for value in drafting):
            raise fail(where, f"records drafting, but {what} drafts nothing")
        return
    if len(step.token_ids) != step.accepted + 1:
        raise fail(f"{where}.token_ids", f"holds {len(step.token_ids)} tokens, but a step that accepted "
                                         f"{step.accepted} draft tokens emits {step.accepted + 1} (those and the "
                                         f"target's own)")
    if step.max_draft_calls > shape.calls:
        raise fail(f"{where}.max_draft_calls", f"is {step.max_draft_calls}, more than the run's settings allow "
                                               f"({shape.calls})")
    if step.draft_calls > step.max_draft_calls:
        raise fail(f"{where}.draft_calls", f"is {step.draft_calls}, more than its max_draft_calls "
                                           f"({step.max_draft_calls})")
    if step.accepted > step.draft_calls:
        raise fail(f"{where}.accepted", f"is {step.accepted}, more than the {step.draft_calls} levels drafted")
    if step.verified > shape.verified:
        raise fail(f"{where}.verified", f"is {step.verified}, more than the {shape.verified} tokens its settings "
                                        "verify")
    if len(step.confidence) > step.draft_calls:
        raise fail(f"{where}.confidence", f"lists {len(step.confidence)} values for {step.draft_calls} draft calls")
    _checks(step, shape, where, fail)
    if step.pool:
        _pool(step, shape, where, fail)


def _costs(used: CostsUsed, trace: RunTrace, where: str, fail: Fail) -> None:
    """The costs a cost-rule step was priced at: measured (with what a plain step took) only where the run measures
    them; otherwise its settings' own."""
    if trace.method != "cost":
        raise fail(where, "records the cost rule's costs, but only the cost rule prices its steps")
    if used.measured != (used.step_ms is not None):
        raise fail(f"{where}.step_ms", "must be given exactly when measured is true: measured costs are in plain steps "
                                       "of the time it records" if used.measured else
                                       "is given, but the costs say they were not measured")
    settings = parse_settings(trace.method, trace.settings)
    if used.measured:
        if settings.pin_costs:
            raise fail(f"{where}.measured", "is true, but the run's settings pin the costs (pin_costs): it measures "
                                            "nothing")
        if used.step_ms < MIN_STEP_MS:
            raise fail(f"{where}.step_ms", f"is {used.step_ms:.6g} ms; a plain step runs the target model, which takes "
                                           f"at least {MIN_STEP_MS} ms on any machine")
        return
    own = StepCosts.of(settings)
    given = StepCosts(used.draft_cost, used.verify_base, used.verify_cost)
    if any(abs(getattr(given, name) - getattr(own, name)) > FILE_TOLERANCE for name in COST_NAMES):
        raise fail(where, f"say they are not measured, so they are the run's settings', yet they are {_costs_text(given)}"
                          f" where its settings say {_costs_text(own)}")


def _costs_text(costs: StepCosts) -> str:
    return (f"draft_cost {costs.draft_cost:g}, verify_base {costs.verify_base:g} and verify_cost "
            f"{costs.verify_cost:g}")


def _checks(step: Step, shape: Shape, where: str, fail: Fail) -> None:
    if step.checks and not shape.checks:
        raise fail(f"{where}.checks", "lists depth checks, but only DDD and the cost rule check their depth")
    calls = [c.call for c in step.checks]
    if calls != sorted(set(calls)) or any(c > step.draft_calls for c in calls):
        raise fail(f"{where}.checks", f"must be after distinct draft calls in order, each at most the "
                                      f"{step.draft_calls} made")
    if any(c.stop for c in step.checks[:-1]):
        raise fail(f"{where}.checks", "go on after a check that stopped the drafting")
    if step.checks and step.checks[-1].stop and calls[-1] != step.draft_calls:
        raise fail(f"{where}.checks", f"stop the drafting after call {calls[-1]}, yet the step made "
                                      f"{step.draft_calls} draft calls")
    if shape.weighs:
        _weighings(step, shape, where, fail)
    elif any(getattr(c, name) is not None for c in step.checks for name in WEIGHED):
        raise fail(f"{where}.checks", "record the cost rule's expected tokens and times, but this run weighs "
                                      "only its confidence")


def _weighings(step: Step, shape: Shape, where: str, fail: Fail) -> None:
    """The cost rule weighs after every draft call: each check holds the best tree so far (E tokens expected
    of its verified ones, in T plain steps, at least the target's one forward) and the forecast of one more
    level (dE, dT: either may be negative where the deeper tree verifies fewer tokens)."""
    if [c.call for c in step.checks] != list(range(1, len(step.checks) + 1)):
        raise fail(f"{where}.checks", "must follow every draft call from the first: the cost rule weighs each")
    for i, check in enumerate(step.checks):
        at = f"{where}.checks[{i}]"
        missing = [name for name in WEIGHED if getattr(check, name) is None]
        if missing:
            raise fail(at, f"lacks {', '.join(missing)}: the cost rule records what it weighed")
        if not 1 <= check.verified <= shape.verified:
            raise fail(f"{at}.verified", f"is {check.verified}, outside the 1 to {shape.verified} tokens its "
                                         "settings verify")
        if not 0 <= check.expected <= check.verified - 1:
            raise fail(f"{at}.expected", f"is {check.expected:g}, but {check.verified - 1} verified draft tokens "
                                         "are expected to give 0 to as many")
        if check.time < 1:
            raise fail(f"{at}.time", f"is {check.time:g}, less than the target's own forward (1 plain step)")
        _forecast(check, _priced(step, shape), shape.verified, at, fail)


def _priced(step: Step, shape: Shape) -> StepCosts:
    """The costs a cost-rule step was priced at: those its trace records (a rule that measures its own), else its
    run's settings."""
    used = getattr(step, "costs", None)
    return StepCosts(used.draft_cost, used.verify_base, used.verify_cost) if used is not None else shape.costs


def _forecast(check: DepthCheck, costs: StepCosts, most: int, at: str, fail: Fail) -> None:
    """A check's numbers as ddd.costs.decide makes them: T is the time of its tree at the run's costs; one more level
    is a tree of 1 to total_tokens verified tokens (E + dE expected of them, 0 to as many less one) drafted with one
    more call (T + dT, at those costs); and the rule stopped exactly when that tree's rate was not the higher."""
    time = costs.time(check.call, check.verified)
    if abs(check.time - time) > TOLERANCE:
        raise fail(f"{at}.time", f"is {check.time:g}, but {check.call} draft calls and {check.verified} verified "
                                 f"tokens take {time:g} plain steps at the step's costs")
    deeper_time, deeper_expected = check.time + check.time_gain, check.expected + check.gain
    verified = _verified_at(deeper_time, check.call + 1, costs, most)
    if verified is None:
        raise fail(f"{at}.time_gain", f"is {check.time_gain:g}: one more level would take {deeper_time:g} plain steps, "
                                      f"which no tree of {check.call + 1} draft calls and 1 to {most} verified tokens "
                                      "takes at the step's costs")
    if not -TOLERANCE <= deeper_expected <= verified - 1 + TOLERANCE:
        raise fail(f"{at}.gain", f"is {check.gain:g}: one more level would expect {deeper_expected:g} accepted tokens, "
                                 f"but its tree's {verified - 1} verified draft tokens give 0 to as many")
    now, deeper = (check.expected + 1) / check.time, (deeper_expected + 1) / deeper_time
    if abs(deeper - now) > TOLERANCE * now and check.stop != (deeper < now):
        said = "stop" if check.stop else "go on"
        raise fail(f"{at}.stop", f"says {said}, but one more level's rate (E + dE + 1) / (T + dT) = {deeper:.4g} is "
                                 f"{'above' if deeper > now else 'below'} the tree's (E + 1) / T = {now:.4g}")


def _verified_at(time: float, calls: int, costs: StepCosts, most: int) -> int | None:
    """The verified tokens of a tree drafted with `calls` calls that takes `time` plain steps (the most such a tree
    may verify where any count fits, as with no per-token cost); None where none does."""
    verify = time - 1 - calls * costs.draft_cost
    extra = verify - costs.verify_base  # (verified - 1) x verify_cost, for a tree that verifies any draft token
    single = 1 if abs(verify) <= TOLERANCE else None  # the root alone: no verify cost at all
    if costs.verify_cost == 0:
        return most if abs(extra) <= TOLERANCE else single
    count = round(extra / costs.verify_cost)
    if abs(extra - count * costs.verify_cost) <= TOLERANCE and 1 <= count <= most - 1:
        return count + 1
    return single


def _pool(step: Step, shape: Shape, where: str, fail: Fail) -> None:
    pool = step.pool
    most = shape.pool(step.draft_calls)
    if len(pool) > most:
        raise fail(f"{where}.pool", f"holds {len(pool):,} nodes; {step.draft_calls} draft calls of its settings make "
                                    f"at most {most:,}")
    if max(n.depth for n in pool) > step.draft_calls:
        raise fail(f"{where}.pool", f"holds nodes deeper than the {step.draft_calls} levels drafted")
    if shape.width is not None and any(n.rank >= shape.width for n in pool):
        raise fail(f"{where}.pool", f"ranks a node {max(n.rank for n in pool)}, beyond a beam of {shape.width}")
    verified = sum(1 for n in pool if n.status != "pruned")
    if verified != step.verified:
        raise fail(f"{where}.verified", f"is {step.verified} but the pool holds {verified} verified nodes (the "
                                        "root included)")
    path = step.accepted_path
    if {n.index for n in pool if n.status == "accepted"} != set(path[1:]):
        raise fail(f"{where}.accepted_path", "does not list the nodes the pool marks accepted")
    nodes = {n.index: n for n in pool}
    drafted = [nodes[i].token_id for i in path[1:step.accepted + 1]]
    if step.token_ids[:step.accepted] != drafted:
        raise fail(f"{where}.token_ids", "are not the tokens of the accepted path")
    # The last token is the target's own (the bonus), or an accepted draft token that ended the answer.
    last = {step.bonus_id} | ({nodes[path[step.accepted + 1]].token_id} if len(path) > step.accepted + 1 else set())
    if step.bonus_id is not None and step.token_ids[-1] not in last:
        raise fail(f"{where}.token_ids", "end with a token that is neither the bonus token nor drafted")
