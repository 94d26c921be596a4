"""Who won a race, by how much, and whether the difference is larger than the race's own noise.

Speed is decode time per token (the prefill is timed apart: it is the same forward for every method), with
every step counted at the median time of the steps of the same shape (draft calls and tree size): on a
shared machine single steps now and then take ten times their usual time, and such a spike says nothing
about the method. The noise comes from the race itself: the decoders took turns, so round r holds step r of
each, and a block bootstrap over rounds (blocks of consecutive rounds, since a busy spell lasts a while;
rounds that two runs share are drawn together) resamples the race many times. A difference whose 95% interval
includes "equal" is a tie, and so is one under SMALLEST_CALLED: on a shared machine a few percent come and go
between identical decoders, more than one race's own resampling shows, and no one chooses a method for them.

The resampling draws from a counter hashed to 32 bits (`Draws`), not numpy's generator: the static page's player
(static_player/player.js) repeats it step for step, so a file gets one verdict in the app and on the page.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ddd.numbers import ms_text
from ddd.trace import RunTrace, Step

from .race import METHOD_LABELS
from .tokens import escape

CONFIDENCE = 0.95
RESAMPLES = 1000
BLOCK_ROUNDS = 4
MIN_STEPS = 4  # fewer decode steps than this cannot show a difference
SMALLEST_CALLED = 1.05  # a speed ratio nearer 1 than this is called a tie, whatever its interval


def too_close(ratio: float, low: float, high: float) -> bool:
    """Whether a speed ratio with its interval is a tie: the interval includes 1, or the ratio is under 5% off."""
    return low <= 1.0 <= high or 1 / SMALLEST_CALLED < ratio < SMALLEST_CALLED


@dataclass
class Standing:
    """One decoder's result, against the reference decoder."""

    name: str
    label: str
    steps: int  # decode steps (target forwards after the prefill)
    tau: float  # tokens per decode step
    ms_per_token: float  # typical decode time per token, all phases (see Rounds.typical_ms)
    draft_ms_per_token: float
    verify_ms_per_token: float
    prefill_ms: float
    speedup: float  # the reference's time per token over this one's
    low: float  # the speedup's 95% interval
    high: float

    @property
    def tie(self) -> bool:
        """Not told apart from the reference by this race."""
        return too_close(self.speedup, self.low, self.high)


@dataclass
class Verdict:
    reference: str
    standings: list[Standing]  # the reference first, then the others in race order
    leaders: list[str]  # the fastest, and every decoder this race cannot tell apart from it
    decided: bool  # False when the race was too short to tell anything apart
    headline: str
    why: str


def label_of(name: str) -> str:
    return METHOD_LABELS.get(name, name)


@dataclass
class Rounds:
    """A run's decode steps by round (step r of every decoder ran in round r); zeros after it finished."""

    ms: np.ndarray
    tokens: np.ndarray
    shape: np.ndarray  # which kind of step: same draft calls and tree size cost the same; -1 after the end

    @classmethod
    def of(cls, trace: RunTrace, rounds: int = 0) -> "Rounds":
        return cls.of_steps(trace.steps, rounds)

    @classmethod
    def of_steps(cls, steps: Sequence[Step], rounds: int = 0) -> "Rounds":
        decode = [s for s in steps if not s.prefill]
        rounds = max(rounds, max((s.index for s in decode), default=0))
        ms, tokens, shape = np.zeros(rounds), np.zeros(rounds), np.full(rounds, -1)
        kinds: dict[tuple[int, int], int] = {}
        for s in decode:
            ms[s.index - 1] = s.ms
            tokens[s.index - 1] = len(s.token_ids)
            shape[s.index - 1] = kinds.setdefault((s.draft_calls, s.verified), len(kinds))
        return cls(ms, tokens, shape)

    def typical_ms(self, picks: np.ndarray) -> np.ndarray:
        """Decode time of each resample (a row of round indices), every step counted at the median time of
        the steps of its shape in that resample: a step that another program slowed down counts as usual."""
        total = np.zeros(len(picks))
        shapes, times = self.shape[picks], self.ms[picks]
        for kind in np.unique(self.shape[self.shape >= 0]):
            chosen = shapes == kind
            total += np.where(chosen.any(1), row_medians(times, chosen) * chosen.sum(1), 0.0)
        return total


def row_medians(values: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Each row's median of its `chosen` values (NaN for a row with none): np.nanmedian's numbers over the unchosen
    set to NaN, the middle two of the sorted values averaged, without its masked arrays, which took most of a verdict's
    time (a race's views, and the server's interpreter beside the races, 0.5 s a race)."""
    ordered = np.sort(np.where(chosen, values, np.inf), axis=1)
    count = chosen.sum(1)
    rows = np.arange(len(values))
    low, high = ordered[rows, np.maximum(count - 1, 0) // 2], ordered[rows, count // 2 - (count == 0)]
    return np.where(count > 0, (low + high) / 2, np.nan)


def decode_ms_per_token(steps: Sequence[Step]) -> float | None:
    """Typical decode time per token of these steps (the prefill apart), each step counted at the median time of
    the steps of its shape: the figure the verdict compares, and the one the counters and the summary show.
    None while no decode step has emitted a token or the steps carry no time."""
    decode = [s for s in steps if not s.prefill]
    tokens = sum(len(s.token_ids) for s in decode)
    if not tokens:
        return None
    rounds = Rounds.of_steps(decode)
    ms = float(rounds.typical_ms(np.arange(len(rounds.ms))[None])[0])
    return ms / tokens if math.isfinite(ms) and ms > 0 else None


def decode_tokens_per_s(steps: Sequence[Step]) -> float | None:
    ms = decode_ms_per_token(steps)
    return 1000 / ms if ms else None


class Draws:
    """Whole numbers from a seeded counter, each hashed to 32 bits (a multiply-xorshift finaliser), in an order and
    with arithmetic (uint32, wrapping) that JavaScript repeats exactly."""

    def __init__(self, seed: int = 0):
        self.seed, self.used = np.uint32(seed), 0

    def integers(self, low: int, high: int, shape: tuple[int, int]) -> np.ndarray:
        """Numbers in [low, high), row by row (the modulo's bias is under high / 2**32)."""
        count = shape[0] * shape[1]
        with np.errstate(over="ignore"):
            x = np.arange(self.used, self.used + count, dtype=np.uint32) + self.seed * np.uint32(0x9E3779B9)
            x ^= x >> np.uint32(16)
            x *= np.uint32(0x7FEB352D)
            x ^= x >> np.uint32(15)
            x *= np.uint32(0x846CA68B)
            x ^= x >> np.uint32(16)
        self.used += count
        return (low + (x % np.uint32(high - low)).astype(np.int64)).reshape(shape)


def _block_picks(draws: Draws, low: int, high: int) -> np.ndarray:
    """RESAMPLES rows of round indices from [low, high), drawn in blocks of consecutive rounds."""
    size = high - low
    if size <= 0:
        return np.zeros((RESAMPLES, 0), dtype=int)
    block = min(BLOCK_ROUNDS, size)
    starts = draws.integers(low, high - block + 1, (RESAMPLES, -(-size // block)))
    return (starts[:, :, None] + np.arange(block)).reshape(RESAMPLES, -1)[:, :size]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted values, linear between the two nearest (numpy's default), written out so that
    the player computes the same number."""
    position = q / 100 * (len(ordered) - 1)
    below = math.floor(position)
    if below + 1 >= len(ordered):
        return float(ordered[-1])
    return float(ordered[below] + (ordered[below + 1] - ordered[below]) * (position - below))


def speed_ratio(reference: RunTrace, other: RunTrace, seed: int = 0) -> tuple[float, float, float]:
    """`other`'s speed over `reference`'s (typical time per token), with its bootstrap interval (low, high)."""
    ref, run = Rounds.of(reference), Rounds.of(other)
    shared, rounds = min(len(ref.ms), len(run.ms)), max(len(ref.ms), len(run.ms))
    ref, run = Rounds.of(reference, rounds), Rounds.of(other, rounds)
    if not rounds or not ref.tokens.sum() or not run.tokens.sum():
        return 0.0, 0.0, float("inf")
    # Rounds both ran are resampled together (a busy spell hit both); the longer run's remaining rounds apart,
    # so that every resample keeps each run's own number of steps.
    draws = Draws(seed)
    picks = np.vstack([np.arange(rounds), np.hstack([_block_picks(draws, 0, shared),
                                                     _block_picks(draws, shared, rounds)])])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (ref.typical_ms(picks) / ref.tokens[picks].sum(1)) / (run.typical_ms(picks) / run.tokens[picks].sum(1))
    ratio, samples = float(ratios[0]), ratios[1:][np.isfinite(ratios[1:])]
    if not len(samples):
        return ratio, 0.0, float("inf")
    tail = (1 - CONFIDENCE) / 2 * 100
    ordered = sorted(samples.tolist())
    low, high = percentile(ordered, tail), percentile(ordered, 100 - tail)
    return ratio, min(low, ratio), max(high, ratio)


def _standing(name: str, trace: RunTrace, reference: RunTrace) -> Standing:
    decode = [s for s in trace.steps if not s.prefill]
    tokens = sum(len(s.token_ids) for s in decode)
    typical = decode_ms_per_token(trace.steps) or 0.0
    measured = sum(s.ms for s in decode) or 1.0
    speedup, low, high = speed_ratio(reference, trace)
    # Drafting and verifying keep their measured shares of the typical time.
    return Standing(
        name=name, label=label_of(name), steps=len(decode), tau=tokens / len(decode) if decode else 0.0,
        ms_per_token=typical, draft_ms_per_token=typical * sum(s.draft_ms for s in decode) / measured,
        verify_ms_per_token=typical * sum(s.verify_ms for s in decode) / measured,
        prefill_ms=sum(s.ms for s in trace.steps if s.prefill), speedup=speedup, low=low, high=high)


def no_verdict(traces: Mapping[str, RunTrace], reference: str = "plain") -> str:
    """Why these runs have no verdict; "" when they have one."""
    if not traces:
        return "Run or load a race to see who wins."
    if reference not in traces:
        return (f"No verdict: these runs hold no {label_of(reference).lower()} decoding run, so there is nothing to "
                "compare their speed with.")
    if len(traces) < 2:
        return f"No verdict: this file holds {label_of(reference).lower()} decoding alone."
    untimed = [label_of(n) for n, t in traces.items() if decode_ms_per_token(t.steps) is None]
    if untimed:
        return (f"No verdict: {', '.join(untimed)} {'has' if len(untimed) == 1 else 'have'} no timed decode step, so "
                "no speed can be derived.")
    return ""


def verdict(traces: Mapping[str, RunTrace], reference: str = "plain") -> Verdict | None:
    """The race's result against `reference` (default plain decoding); None without the reference or a rival, or
    where a run has no timed decode step (no speed can be derived from it)."""
    if no_verdict(traces, reference):
        return None
    ref = traces[reference]
    standings = [_standing(reference, ref, ref)] + [_standing(n, t, ref) for n, t in traces.items() if n != reference]
    decided = all(s.steps >= MIN_STEPS for s in standings)
    fastest = max(standings, key=lambda s: s.speedup)
    leaders = [fastest.name]
    ties: list[tuple[str, str, tuple[float, float, float]]] = []  # (a leader, the one it tied with, their ratio)
    # Ties chain: a run too close to call against any leader leads too (identical decoders measured 0.96x and
    # 1.01x of a third are each a tie with it, though the two intervals may just miss each other). The list grows
    # while it is walked, so each pair is compared once.
    for lead in leaders:
        for s in standings:
            if s.name in leaders:
                continue
            ratio = speed_ratio(traces[lead], traces[s.name]) if decided else None
            if ratio is None or too_close(*ratio):
                leaders.append(s.name)
                if ratio is not None:
                    ties.append((lead, s.name, ratio))
    return Verdict(reference, standings, leaders, decided, _headline(standings, leaders, decided, ties),
                   _why(standings))


def _spread(lead: str, other: str, ratio: float, low: float, high: float) -> str:
    """Why two leaders tie, in words: the faster one's speed over the other's, its interval, and what makes that a
    tie. `ratio`, `low`, `high`: `other`'s speed over `lead`'s, as speed_ratio gives it."""
    if not (0 < ratio < math.inf and low > 0 and math.isfinite(high)):  # speed_ratio's answer without a speed
        return f"this race's resampling cannot compare {label_of(lead)}'s speed with {label_of(other)}'s"
    faster, slower = other, lead
    if ratio < 1:  # the faster one is named first
        faster, slower, ratio, low, high = lead, other, 1 / ratio, 1 / high, 1 / low
    words = f"{label_of(faster)}'s speed over {label_of(slower)}'s is {ratio:.2f}"
    if low <= 1.0 <= high:
        return f"{words}, and its 95% interval, {low:.2f}–{high:.2f}, includes equal speed"
    return f"{words} (95% interval {low:.2f}–{high:.2f}), under the {SMALLEST_CALLED - 1:.0%} a race calls"


def _headline(standings: list[Standing], leaders: list[str], decided: bool,
              ties: list[tuple[str, str, tuple[float, float, float]]]) -> str:
    ref, others = standings[0], standings[1:]
    figures = ", ".join(
        f"{s.label} {s.speedup:.2f}× {ref.label.lower()}" + (" (too close to call)" if s.tie else "") for s in others)
    if not decided:
        return f"Too short to call: {figures}. A few more tokens would let the race tell its noise from a difference."
    if len(leaders) == len(standings):
        return f"A tie: {figures}; each is too close to call against another, so this race names no winner."
    names = [label_of(n) for n in leaders]
    if len(names) == 1:
        return f"{names[0]} wins: {figures}."
    spreads = "; ".join(_spread(lead, other, *ratio) for lead, other, ratio in ties)
    return f"{' and '.join(names)} tie for the lead: {figures}; {spreads}."


def shares_lead(result: Verdict, name: str) -> bool:
    """Whether the headline names `name` among several that tie for the lead (or in a race that ties throughout)."""
    return result.decided and len(result.leaders) > 1 and name in result.leaders


def _why(standings: list[Standing]) -> str:
    ref = standings[0]
    parts = [f"{ref.label} {ms_text(ref.ms_per_token)} ms per token"]
    for s in standings[1:]:
        parts.append(f"{s.label} {ms_text(s.ms_per_token)} ms per token (tau {s.tau:.2f}: {ms_text(s.draft_ms_per_token)} ms "
                     f"drafting and {ms_text(s.verify_ms_per_token)} ms verifying per token)")
    prefill = ", ".join(f"{s.label} {s.prefill_ms:.0f}" for s in standings)
    return f"Why: {'; '.join(parts)}. Prefill, timed apart: {prefill} ms, counted in no speed."


def headline_html(traces: Mapping[str, RunTrace]) -> str:
    """The verdict as the page's headline: a bold line and one line of why."""
    result = verdict(traces)
    if result is None:
        return f"<div class='headline empty'>{escape(no_verdict(traces))}</div>"
    kind = "tie" if len(result.leaders) > 1 or not result.decided else "win"
    return (f"<div class='headline {kind}'><b>{escape(result.headline)}</b>"
            f"<div class='why'>{escape(result.why)}</div></div>")
