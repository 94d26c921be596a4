"""The cost-aware depth rule: how deep to draft and how many tokens to verify, from what a step is expected
to gain and what it costs on this machine (docs/algorithms.md, "Cost-aware depth").

Pure arithmetic on floats: the engine calls it on the live draft pool, and the what-if view (ddd/whatif.py)
on a recorded one, so both take the same decision from the same numbers.

- E, the expected number of accepted draft tokens of a tree, is the sum of its nodes' acceptance
  probabilities. A node's probability is the product along its path of each token's calibrated
  conditional acceptance rate (Calibration: the draft's probability mapped to how often the target
  accepted such a token when its parent was accepted).
- T, a step's expected time in plain decoding steps: 1 (the target's forward) + calls x draft_cost, and where
  any drafted token is verified, + verify_base + (verified - 1) x verify_cost. The base is the step from a
  one-token forward to a tree forward: on a CPU the first drafted token costs several times what each next one
  does, so a step whose draft looks poor verifies the root alone.
- A step yields E + 1 tokens (the target always adds one) in T, so one more level that adds dE and dT pays
  exactly when dE / dT > (E + 1) / T. The level not yet drafted is forecast from the last one: each beam
  node's best child is taken as likely as the beam node times the rate at which the last level carried
  its parents' probability over to their children.
"""
from __future__ import annotations

import bisect
import math
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_POINTS = 64  # calibration points a head may carry


class CalibrationError(ValueError):
    """A calibration table that is not a list of increasing (probability, rate) pairs within [0, 1]."""


@dataclass(frozen=True)
class Calibration:
    """Conditional acceptance rate as a function of the draft's probability of a token: piecewise linear
    through measured points, flat beyond the first and last. Rates never fall as the probability grows, so a
    path's probability never exceeds its parent's and the best trees stay closed under parents."""

    points: tuple[tuple[float, float], ...] = ((0.0, 0.0), (1.0, 1.0))

    def __post_init__(self) -> None:
        check_points(self.points)

    def __call__(self, p: float) -> float:
        xs = [x for x, _ in self.points]
        i = bisect.bisect_right(xs, p)
        if i == 0:
            return self.points[0][1]
        if i == len(xs):
            return self.points[-1][1]
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (p - x0) / (x1 - x0)

    @property
    def measured(self) -> bool:
        return self != IDENTITY

    def to_json(self) -> list[list[float]]:
        return [[round(x, 6), round(y, 6)] for x, y in self.points]

    @classmethod
    def from_json(cls, value: object) -> "Calibration":
        if not isinstance(value, list):
            raise CalibrationError(f"a calibration is a list of [probability, rate] pairs, not {type(value).__name__}")
        pairs = []
        for item in value:
            if not (isinstance(item, list) and len(item) == 2
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in item)):
                raise CalibrationError("each calibration point is a [probability, rate] pair of numbers")
            pairs.append((float(item[0]), float(item[1])))
        return cls(tuple(pairs))


def check_points(points: Sequence[tuple[float, float]]) -> None:
    if not 2 <= len(points) <= MAX_POINTS:
        raise CalibrationError(f"a calibration has 2 to {MAX_POINTS} points, not {len(points)}")
    for x, y in points:
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):  # also refuses NaN
            raise CalibrationError(f"calibration point ({x:g}, {y:g}) lies outside [0, 1] x [0, 1]")
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if not x1 > x0:
            raise CalibrationError("calibration probabilities must increase from point to point")
        if y1 < y0:
            raise CalibrationError("calibration rates must not fall as the draft probability grows")


IDENTITY = Calibration()


def fit_calibration(samples: Sequence[tuple[float, bool]], bins: int = 20) -> Calibration:
    """Rates by draft-probability bin (equal widths; empty bins skipped), made non-decreasing by pooling
    adjacent bins that violate the order (weighted by their counts), each at its samples' mean probability."""
    groups: list[list[float]] = []  # [sum of p, hits, count]
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(p, hit) for p, hit in samples if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if inside:
            groups.append([sum(p for p, _ in inside), sum(hit for _, hit in inside), len(inside)])
    if len(groups) < 2:
        raise CalibrationError(f"{len(samples)} samples fill fewer than two probability bins; draft more steps")
    pooled: list[list[float]] = []
    for g in groups:
        pooled.append(list(g))
        while len(pooled) > 1 and pooled[-2][1] / pooled[-2][2] > pooled[-1][1] / pooled[-1][2]:
            last = pooled.pop()
            pooled[-1] = [a + b for a, b in zip(pooled[-1], last)]
    points = [(g[0] / g[2], g[1] / g[2]) for g in pooled]
    if len(points) == 1:  # every bin pooled into one: a constant rate
        points = [(0.0, points[0][1]), (1.0, points[0][1])]
    return Calibration(tuple(points))


def child_probabilities(path: Sequence[float], parents: Sequence[int], drafted: Sequence[float],
                        calibration: Calibration) -> list[float]:
    """Path probabilities of newly drafted nodes: the parent's times the token's calibrated rate. Rates are
    measured one token at a time, so siblings' can add up to more than 1, yet at most one of them is the
    target's token: where they do, they are scaled down to sum to 1."""
    rates = [calibration(p) for p in drafted]
    total: dict[int, float] = {}
    for parent, rate in zip(parents, rates):
        total[parent] = total.get(parent, 0.0) + rate
    return [path[parent] * rate / max(1.0, total[parent]) for parent, rate in zip(parents, rates)]


@dataclass(frozen=True)
class StepCosts:
    """What a step costs, in plain decoding steps (measured: `python -m ddd.bench.budget` prints them)."""

    draft_cost: float  # one draft call
    verify_base: float  # verifying any drafted token at all
    verify_cost: float  # each verified token beyond the first

    @classmethod
    def of(cls, settings: Any) -> "StepCosts":
        """From a cost-rule settings object (ddd.settings.CostSettings)."""
        return cls(settings.draft_cost, settings.verify_base, settings.verify_cost)

    def time(self, calls: int, verified: int) -> float:
        verify = self.verify_base + (verified - 1) * self.verify_cost if verified > 1 else 0.0
        return 1.0 + calls * self.draft_cost + verify


@dataclass(frozen=True)
class TreeValue:
    verified: int  # tokens the target verifies, the root included
    expected: float  # E: expected accepted draft tokens
    time: float  # T: expected step time in plain steps

    @property
    def rate(self) -> float:
        return (self.expected + 1.0) / self.time


def best_tree(probs: Sequence[float], calls: int, costs: StepCosts, max_verified: int) -> TreeValue:
    """The number of verified tokens with the best expected rate (E + 1) / T, taking nodes by their path
    probability, best first (a prefix of that order is a tree: parents come before children)."""
    ordered = sorted(probs, reverse=True)
    best = TreeValue(1, 0.0, costs.time(calls, 1))
    expected = 0.0
    for n, p in enumerate(ordered[: max_verified - 1], start=2):
        expected += p
        value = TreeValue(n, expected, costs.time(calls, n))
        if value.rate > best.rate:
            best = value
    return best


@dataclass(frozen=True)
class LevelDecision:
    call: int
    now: TreeValue  # the best tree of the levels drafted so far
    gain: float  # dE: forecast gain of one more level
    time_gain: float  # dT
    stop: bool


def decide(call: int, probs: Sequence[float], level_mass: float, parent_mass: float, beam: Sequence[float],
           costs: StepCosts, max_verified: int) -> LevelDecision:
    """After draft call `call`: whether one more level pays.

    probs: path probabilities of every drafted node so far (root excluded); level_mass: their sum over the
    level just drafted; parent_mass: the same over the nodes that level expanded (1 for the root); beam: the
    path probabilities of the nodes the next call would expand."""
    now = best_tree(probs, call, costs, max_verified)
    carried = min(1.0, level_mass / parent_mass) if parent_mass > 0 else 0.0
    forecast = [carried * p for p in beam]
    deeper = best_tree(list(probs) + forecast, call + 1, costs, max_verified)
    # (E + dE + 1) / (T + dT) > (E + 1) / T is the same as dE / dT > (E + 1) / T for dT > 0.
    return LevelDecision(call, now, deeper.expected - now.expected, deeper.time - now.time,
                         not deeper.rate > now.rate)


# -- measured costs --------------------------------------------------------------------------------------

WINDOW = 9  # the latest timings of a size whose median counts: one slow step in a busy spell moves nothing
STALE_AFTER = 64  # steps after which a size's timings count as old: its weight in the fit falls to a quarter
RETIME_EVERY = 32  # every so many steps the rule verifies a size it has not timed lately (CostMeter.retime)
LADDER = (1, 2, 4, 8, 16, 32, 64, 128)  # the verified counts the warm-up times and re-timing visits


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class VerifyFit:
    """A verify forward's time in seconds over `verified` tokens: `one` for the root alone, and where any drafted
    token is verified, `one + base + (verified - 1) x slope`."""

    one: float
    base: float
    slope: float

    def __call__(self, verified: int) -> float:
        return self.one + (self.base + (verified - 1) * self.slope if verified > 1 else 0.0)


def fit_verify(medians: dict[int, float], weights: dict[int, float]) -> VerifyFit | None:
    """The base-plus-slope line through timed sizes (a size's median timing, weighted): the root alone gives
    `one`; sizes above 1 give the line, whose value at one verified draft token beyond the root, less `one`,
    is the base. None until something is timed; base and slope never below 0 (more tokens never cost less)."""
    if not medians:
        return None
    tree = {v: t for v, t in medians.items() if v > 1}
    if not tree:
        return VerifyFit(medians[1], 0.0, 0.0)
    total = sum(weights[v] for v in tree)
    mean_x = sum(weights[v] * (v - 1) for v in tree) / total
    mean_y = sum(weights[v] * t for v, t in tree.items()) / total
    spread = sum(weights[v] * (v - 1 - mean_x) ** 2 for v in tree)
    slope = max(0.0, sum(weights[v] * (v - 1 - mean_x) * (t - mean_y) for v, t in tree.items()) / spread
                if spread > 0 else 0.0)
    at_one = mean_y - mean_x * slope  # the line where no drafted token is verified
    if 1 not in medians:  # the root alone never timed: no base beyond the line
        return VerifyFit(max(at_one, min(tree.values()) / 2), 0.0, slope)
    return VerifyFit(medians[1], max(0.0, at_one - medians[1]), slope)


MOST_STEPS = 10.0  # a cost in plain steps beyond this is a timing gone wrong (a tiny model's first calls)


def steps_of(fit: VerifyFit, draft: float, step: float) -> StepCosts:
    """The cost rule's costs in plain steps, from a verify fit, a draft call and a plain step in one unit."""
    return StepCosts(*(min(t / step, MOST_STEPS) for t in (draft, fit.base, fit.slope)))


class CostMeter:
    """A machine's step costs, measured from the timings a run records (seconds on the engine's clock), for
    the cost rule (docs/algorithms.md, "Measured costs"). One meter serves every run of one target, head and
    beam width in a process, so a run starts from what the runs before it timed.

    A step's time is modelled as  fixed + calls x draft + (verify(verified) - verify(1)):  `draft` is the median
    of the latest timed draft calls, verify() the base-plus-slope fit over verified counts (each count's median
    of its latest WINDOW timings), `fixed` the median of what the latest steps took beyond those two. In plain
    steps, fixed being 1, that is StepCosts. Before anything is timed the meter answers with `prior`.
    """

    def __init__(self, prior: StepCosts):
        self.prior = prior
        self.steps = 0  # steps observed
        self._verify: dict[int, deque[tuple[int, float]]] = {}  # verified count -> (step, seconds)
        self._draft: deque[float] = deque(maxlen=4 * WINDOW)
        self._fixed: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()

    # -- what comes in ------------------------------------------------------------------------------------

    def time_verify(self, verified: int, seconds: float) -> None:
        with self._lock:
            self._verify.setdefault(verified, deque(maxlen=WINDOW)).append((self.steps, seconds))

    def time_draft_call(self, seconds: float) -> None:
        with self._lock:
            self._draft.append(seconds)

    def time_step(self, calls: int, verified: int, draft_s: float, verify_s: float, other_s: float) -> None:
        """One decode step's timings: its verify joins its size's, and what the step took beyond its draft calls
        and its tree's share of the verify is one more reading of the fixed part."""
        self.time_verify(verified, verify_s)
        with self._lock:
            fit, draft = self._fit(), self._draft_s()
            if fit is not None and draft is not None:
                self._fixed.append(max(draft_s + verify_s + other_s - calls * draft - (fit(verified) - fit(1)),
                                       fit(1)))
            self.steps += 1

    # -- what goes out ------------------------------------------------------------------------------------

    @property
    def timed(self) -> bool:
        return bool(self._verify)

    def _draft_s(self) -> float | None:
        return _median(self._draft) if self._draft else None

    def _fit(self) -> VerifyFit | None:
        medians = {v: _median([t for _, t in series]) for v, series in self._verify.items()}
        weights = {v: math.sqrt(len(series)) * (1.0 if self.steps - series[-1][0] <= STALE_AFTER else 0.25)
                   for v, series in self._verify.items()}
        return fit_verify(medians, weights)

    def costs(self) -> tuple[StepCosts, float | None]:
        """The step costs in plain steps and what a plain step (the fixed part) takes in ms; the prior and
        None while nothing is timed. A part not timed yet is the prior's share of what is."""
        with self._lock:
            fit, draft = self._fit(), self._draft_s()
            if fit is None:
                return self.prior, None
            fixed = _median(self._fixed) if self._fixed else fit(1) + (draft or 0.0)
            draft = draft if draft is not None else self.prior.draft_cost * fixed
            return steps_of(fit, draft, fixed), fixed * 1e3

    def retime(self, most: int) -> int | None:
        """On every RETIME_EVERY-th step, the size of LADDER timed longest ago (or never) if it is older than
        STALE_AFTER steps: verifying it keeps the fit from resting on the sizes the rule happens to choose. Only
        sizes up to `most` and twice the largest the rule verified lately: where its choices lie (a CPU's 32-token
        forward would cost two plain steps to re-time, and the fit extrapolates there). None otherwise."""
        if self.steps % RETIME_EVERY != RETIME_EVERY - 1:
            return None
        with self._lock:
            lately = [v for v, series in self._verify.items() if self.steps - series[-1][0] <= STALE_AFTER]
            most = min(most, 2 * max(lately, default=1))
            ages = {v: self.steps - self._verify[v][-1][0] if v in self._verify else math.inf
                    for v in LADDER if v <= most}
        size = max(ages, key=lambda v: (ages[v], -v), default=None)
        return size if size is not None and ages[size] > STALE_AFTER else None


# Meters live as long as their target model: an unloaded model's go with it, and a new model never inherits
# the timings of one that once had its id.
_METERS: weakref.WeakKeyDictionary[Any, dict[tuple, CostMeter]] = weakref.WeakKeyDictionary()
_METERS_LOCK = threading.Lock()


def meter_for(model: Any, key: tuple, prior: StepCosts) -> CostMeter:
    """The process's meter for `model` and `key` (its head, precision, device and beam width), made on first use."""
    with _METERS_LOCK:
        return _METERS.setdefault(model, {}).setdefault(key, CostMeter(prior))
