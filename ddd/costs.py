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
