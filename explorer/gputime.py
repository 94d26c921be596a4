"""GPU time on a ZeroGPU Space: what a race asks for, sized from what this Space's races took (or, until one was
timed, from the GPU projection), and the words for ZeroGPU's answers. ZeroGPU refuses a call whose duration, as it
counts it, exceeds what is left of the visitor's daily quota, deducts the time a call uses, and ends a call that
outlives what it asked for (docs/deploy.md)."""
from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from components.race import COST_METHOD, METHOD_LABELS, RACE_METHODS
from ddd.bench.projection import BAND, METHODS, ZEROGPU, PairProjection, banded, project
from ddd.catalog import PAIRS
from ddd.numbers import readable
from ddd.settings import MAX_NEW_TOKENS
from ddd.trace import RunTrace

from .models import Key, ModelChoice, Models

# A visitor's daily ZeroGPU time (hub-docs, spaces-zerogpu): not logged in, and with a free account.
VISITOR_QUOTA_S = 120
ACCOUNT_QUOTA_S = 300
# ZeroGPU schedules a call for its requested duration times the GPU's duration factor, and weighs that against the
# visitor's quota: 1.5 on the RTX PRO 6000 Blackwell at the default 'large' size (the `spaces` package 0.51.3,
# zero/client.py get_duration_seconds and zero/configs.json). The time a call uses is counted the same way here
# (used x factor): if ZeroGPU deducts the time itself, a visitor has more races than these figures say, not fewer.
DURATION_FACTOR = 1.5
# That size holds while the weights a Space puts on the GPU stay under this; above it ZeroGPU runs the Space on the
# whole card ('xlarge'), which counts a call's time twice (spaces 0.51.3: zero/configs.json xlarge_threshold).
XLARGE_BYTES = 45_097_156_608
# What ZeroGPU schedules for a call: MARGIN times the predicted time, plus SLACK_S for what no race has shown yet (a
# busier GPU).
MARGIN = 1.5
SLACK_S = 3.0
# Until this Space has timed a race of a pair the projection does not cover: a 7B target's pace on a shared GPU per
# token and method.
UNTIMED_S_PER_TOKEN = 0.08
# A call's start, until timed (assumed): a GPU worker starts and ZeroGPU copies every model the Space holds onto the
# GPU (the `spaces` package, zero/torch/packing.py: from disk through pinned memory). PCIe 5.0 x16 carries 64 GB/s;
# the disk read and the staging are taken to manage COPY_BYTES_PER_S.
WORKER_START_S = 1.0
COPY_BYTES_PER_S = 10e9
WINDOW = 5  # races remembered per pair: the slowest of them sizes the next ask
# The start-up's own calls (warm-up races, the measured preset) are charged to no visitor.
START_UP_ASK_S = 300
WARM_UP_TOKENS = 16
# A Space's default race shows the papers' effect when DDD is at least this much faster than plain decoding, and
# faster than EAGLE-2: the papers measured 3-3.6x on their 7B targets and Spec-Bench 2.1-2.6x (docs/results.md, "GPU
# projection"), while a pair whose draft calls cost nearly what its forward does shows speculative decoding's
# mechanics but not its speed.
PAPERS_SPEEDUP = 2.0
# A visitor who is not logged in races at least this many default races a day.
SPACE_RACES = 8


def call_start_s(held_bytes: float) -> float:
    """A GPU call's start until one was timed, for a Space holding `held_bytes` of weights."""
    return WORKER_START_S + held_bytes / COPY_BYTES_PER_S


@dataclass(frozen=True)
class RaceTime:
    """What one race took: per method, seconds per new token and its prefill; and the call's seconds beside the
    runs' own (starting the GPU process, sending the events)."""

    per_token: dict[str, float]
    prefill: dict[str, float]
    start_s: float
    start_up: bool = False  # a start-up race (short, and its call the process's first): stands in until a visitor's

    @classmethod
    def of(cls, traces: dict[str, RunTrace], call_s: float, start_up: bool = False) -> "RaceTime | None":
        per_token, prefill, decoding = {}, {}, 0.0
        for name, trace in traces.items():
            first = sum(s.ms for s in trace.steps if s.prefill) / 1000
            rest = [s for s in trace.steps if not s.prefill]
            tokens = sum(len(s.token_ids) for s in rest)
            decoding += first + sum(s.ms for s in rest) / 1000
            if tokens:
                per_token[name], prefill[name] = sum(s.ms for s in rest) / 1000 / tokens, first
        return cls(per_token, prefill, max(call_s - decoding, 0.0), start_up) if per_token else None


@dataclass(frozen=True)
class Pace:
    """The slowest of a pair's recent races, per part: what the next race is predicted from."""

    per_token: dict[str, float]
    prefill: dict[str, float]
    start_s: float
    timed: bool  # False: no race of this pair was timed yet (the projection's pace, or UNTIMED_S_PER_TOKEN)

    def rate(self, method: str) -> float:
        """A method never timed runs at the slowest timed one's pace."""
        return self.per_token.get(method, max(self.per_token.values(), default=UNTIMED_S_PER_TOKEN))

    def predict(self, methods: Iterable[str], tokens: int) -> float:
        methods = list(methods)
        return self.start_s + sum(self.prefill.get(m, max(self.prefill.values(), default=0.0)) for m in methods) \
            + tokens * sum(self.rate(m) for m in methods)


def projected_pace(projection: PairProjection, start_s: float) -> Pace:
    """A pair's pace as the GPU projection has it, for a Space whose calls start in `start_s`."""
    return Pace({m: projection.seconds_per_token(m) for m in METHODS},
                {m: projection.prefill_s(m) for m in METHODS}, start_s, False)


def ask_for(seconds: float) -> int:
    """The whole seconds a call asks for, to do work predicted to take `seconds`: ZeroGPU schedules that times
    DURATION_FACTOR, which must cover MARGIN x `seconds` + SLACK_S."""
    return max(1, math.ceil((MARGIN * seconds + SLACK_S) / DURATION_FACTOR))


def counted(asked: int) -> int:
    """What ZeroGPU schedules for a call that asks for `asked` seconds, and weighs against the quota left."""
    return round(asked * DURATION_FACTOR)


def races_a_day(pace: Pace, methods: Iterable[str], tokens: int, quota: float = VISITOR_QUOTA_S) -> int:
    """How many races of `tokens` new tokens a visitor with `quota` seconds a day starts before ZeroGPU refuses one,
    each taking its predicted time: each asks for ask_for(predicted), and is counted as predicted x factor."""
    seconds = pace.predict(methods, tokens)
    left, races = float(quota), 0
    while counted(ask_for(seconds)) <= left:
        left -= seconds * DURATION_FACTOR
        races += 1
    return races


def space_tokens(pace: Pace, step: int, most: int, methods: Iterable[str] = RACE_METHODS) -> int:
    """The most new tokens (a multiple of `step`, at most `most`) for which a visitor who is not logged in starts
    SPACE_RACES default races a day at `pace` (0: not even `step`)."""
    methods = tuple(methods)
    tokens = most - most % step
    while tokens and races_a_day(pace, methods, tokens) < SPACE_RACES:
        tokens -= step
    return tokens


def shows_effect(projection: PairProjection) -> bool:
    """Whether a pair's projection shows the papers' effect: DDD well ahead of plain decoding, and of EAGLE-2."""
    return projection.speedup("ddd") >= PAPERS_SPEEDUP and projection.speedup("ddd") > projection.speedup("eagle2")


@dataclass(frozen=True)
class SpaceRace:
    """A ZeroGPU Space's default race on a pair: the pair's GPU projection on ZeroGPU's card, the pace it predicts
    for the Space's calls, and the most new tokens with which a visitor who is not logged in starts SPACE_RACES
    default races a day (0: not even one slider step)."""

    projection: PairProjection
    pace: Pace
    tokens: int

    @classmethod
    def of(cls, projection: PairProjection, start_s: float) -> "SpaceRace":
        pace = projected_pace(projection, start_s)
        return cls(projection, pace, space_tokens(pace, MAX_NEW_TOKENS.step, MAX_NEW_TOKENS.bounds(ui=True)[1]))

    @property
    def seconds(self) -> float:
        """The default race's projected GPU time."""
        return self.pace.predict(RACE_METHODS, self.tokens)

    @property
    def asked(self) -> int:
        """The seconds the default race asks ZeroGPU for (ask_for: the projected time with its margin)."""
        return ask_for(self.seconds)

    def figures(self) -> str:
        """The default race's GPU time in words, as the page and docs/results.md state it."""
        return (f"a race of {self.tokens} new tokens is projected at {banded(self.seconds, ' s')} of GPU time; it asks "
                f"ZeroGPU for {self.asked} s, {counted(self.asked)} s {AS_COUNTED}, which covers "
                f"{readable(MARGIN)} times the projection and {readable(SLACK_S)} s more")

    def words(self, quick: "SpaceRace | None" = None) -> str:
        """The page's words for the Space's default race, and why its pair (`quick`: the small pair beside it)."""
        p, label = self.projection, self.projection.pair.label
        text = (f"**On this Space** the race opens on {label}, the pair the project's GPU projection picks: on "
                f"this GPU the projection (docs/results.md, fitted on published GPU measurements) puts EAGLE-2 at "
                f"{banded(p.speedup('eagle2'))} and DDD at {banded(p.speedup('ddd'))} plain decoding. "
                f"{_capital(self.figures())}: a visitor who is not logged in has {VISITOR_QUOTA_S // 60} "
                f"minutes a day, {races_a_day(self.pace, RACE_METHODS, self.tokens)} such races.")
        if quick is not None:
            text += (f" {quick.projection.pair.label} is the quick pair (Settings, model menu): a race of "
                     f"{quick.tokens} new tokens asks for {quick.asked} s, {counted(quick.asked)} s as ZeroGPU "
                     "counts it; on a GPU its small model is bound by launching its operations rather than by "
                     f"reading its weights, so speculation gains less there (EAGLE-2 "
                     f"{banded(quick.projection.speedup('eagle2'))}, DDD {banded(quick.projection.speedup('ddd'))} "
                     "projected).")
        return text


def space_races(models: Models) -> dict[Key, SpaceRace]:
    """The default race of each pair a ZeroGPU Space holds (Models.pin) that the GPU projection covers, by pair."""
    start = call_start_s(models.loaded_bytes())
    return {models.key(choice): SpaceRace.of(project(pair, ZEROGPU), start)
            for pair in PAIRS if models.pinned_choice(choice := ModelChoice(pair.model, pair.head))}


class GpuTime:
    """Each model pair's recent race times (Models.key), kept in the page's process: a GPU process keeps nothing
    between calls. `projected`: the paces the GPU projection gives the pairs it covers, until one of theirs is timed;
    `start_s`: a call's start until timed."""

    def __init__(self, projected: Mapping[Key, Pace] | None = None, start_s: float = WORKER_START_S) -> None:
        self._times: dict[Key, deque[RaceTime]] = {}
        self._projected = dict(projected or {})
        self._start_s = start_s
        self._lock = threading.Lock()

    def record(self, key: Key, traces: dict[str, RunTrace], call_s: float, start_up: bool = False) -> None:
        """A race's runs (complete or cut short) and the seconds its GPU call took. A visitor's race replaces the
        start-up's timing, which only stands in until one has run: the start-up races are short."""
        timed = RaceTime.of(traces, call_s, start_up)
        if timed is not None:
            with self._lock:
                times = self._times.setdefault(key, deque(maxlen=WINDOW))
                if not start_up:
                    kept = [t for t in times if not t.start_up]
                    times.clear()
                    times.extend(kept)
                times.append(timed)

    def pace(self, key: Key) -> Pace:
        with self._lock:
            times = list(self._times.get(key, ()))
        if not times:
            return self._projected.get(key) or Pace({}, {}, self._start_s, False)
        per_token: dict[str, float] = {}
        prefill: dict[str, float] = {}
        for timed in times:
            for name, rate in timed.per_token.items():
                per_token[name] = max(per_token.get(name, 0.0), rate)
                prefill[name] = max(prefill.get(name, 0.0), timed.prefill[name])
        return Pace(per_token, prefill, max(t.start_s for t in times), True)

    def ask(self, key: Key, methods: Iterable[str], tokens: int) -> int:
        return ask_for(self.pace(key).predict(methods, tokens))

    def fitting_tokens(self, key: Key, methods: Iterable[str], seconds: float) -> int:
        """The most new tokens a race of `methods` may ask for while ZeroGPU counts at most `seconds` for it (0:
        none)."""
        pace, methods = self.pace(key), list(methods)
        per_token = sum(pace.rate(m) for m in methods)
        spare = (seconds - SLACK_S) / MARGIN - pace.predict(methods, 0)
        tokens = max(int(spare / per_token), 0) if per_token > 0 else 0
        while tokens and counted(ask_for(pace.predict(methods, tokens))) > seconds:  # both round
            tokens -= 1
        return tokens


# -- what ZeroGPU answers ----------------------------------------------------------------------------

# The numbers in ZeroGPU's refusal: "You have exceeded your ... quota (67s requested vs. 63s left). Try again in
# 13:44:10." and its abort, "GPU task aborted".
REFUSAL = re.compile(r"\((\d+)s requested vs\. (\d+)s left\)")
REFILL = re.compile(r"Try again in ([0-9][0-9:.]*)")
ABORTED = "GPU task aborted"


@dataclass(frozen=True)
class GpuAnswer:
    """What a failed GPU call says: kind "quota" (refused: nothing ran), "aborted" (ran out of its time) or
    "other" (ZeroGPU's own message, `text`)."""

    kind: str
    text: str
    asked: int | None = None
    left: int | None = None
    refill: str = ""  # ZeroGPU's "Try again in" time, as it wrote it

    @classmethod
    def read(cls, error: Exception) -> "GpuAnswer":
        text = str(error).strip() or type(error).__name__
        numbers = REFUSAL.search(text)
        if numbers:
            refill = REFILL.search(text)
            return cls("quota", text, int(numbers[1]), int(numbers[2]), refill[1].rstrip(".") if refill else "")
        return cls("aborted" if ABORTED in text else "other", text)


def shorter_race(gpu: GpuTime, key: Key, methods: tuple[str, ...], seconds: float, quota: str) -> str:
    """What fits in `seconds` (`quota`: whose seconds they are): fewer tokens, or as many without the cost rule's
    column."""
    tokens = gpu.fitting_tokens(key, methods, seconds)
    fits = (f"a race of at most {tokens} new tokens fits {quota} (lower max new tokens)" if tokens else
            f"no race of these methods fits {quota}")
    if COST_METHOD in methods:
        without = gpu.fitting_tokens(key, tuple(m for m in methods if m != COST_METHOD), seconds)
        if without > tokens:
            fits += f", or {without} without the {METHOD_LABELS[COST_METHOD]} column"
    return fits


def whole_day_fits(gpu: GpuTime, key: Key, methods: tuple[str, ...]) -> str:
    """What fits a visitor's whole day, for each quota: not logged in, and a free account."""
    return (f"{shorter_race(gpu, key, methods, VISITOR_QUOTA_S, VISITOR_DAY)}; "
            f"{shorter_race(gpu, key, methods, ACCOUNT_QUOTA_S, ACCOUNT_DAY)}")


def projected_band(gpu: GpuTime, key: Key) -> str:
    """The band a pace projected for this GPU carries (nothing for one this Space measured)."""
    return "" if gpu.pace(key).timed else f" (±{BAND:.0%}, the projection's error against published measurements)"


# How the page names ZeroGPU's count of a call's time.
AS_COUNTED = (f"as ZeroGPU counts it (the time requested x {readable(DURATION_FACTOR)}, its duration factor on "
              "this GPU)")
# The quotas a "fits" sentence names.
VISITOR_DAY = f"a visitor's {VISITOR_QUOTA_S // 60} minutes (not logged in)"
ACCOUNT_DAY = f"a free account's {ACCOUNT_QUOTA_S // 60} minutes"


def refusal_words(answer: GpuAnswer, gpu: GpuTime, key: Key, methods: tuple[str, ...]) -> str:
    """The page's words for a race ZeroGPU refused or ended."""
    if answer.kind == "quota":
        refill = f"in {answer.refill}" if answer.refill else "within a day"
        return (f"ZeroGPU refused this race: it asked for {answer.asked} s of GPU time {AS_COUNTED}, and your quota "
                f"has {answer.left} s left today (it refills {refill}). Nothing ran: "
                f"{shorter_race(gpu, key, methods, answer.left, f'the {answer.left} s left')}"
                f"{projected_band(gpu, key)}. Log in to Hugging Face for more: "
                f"{ACCOUNT_QUOTA_S // 60} minutes a day with a free account, {VISITOR_QUOTA_S // 60} without.")
    if answer.kind == "aborted":
        return ("The race ran out of the GPU time it reserved and ZeroGPU ended it (GPU task aborted). Below is what "
                "it decoded until then, as a stopped race; the next race here asks for more time.")
    return f"ZeroGPU could not run this race: {answer.text}"


def too_long_words(ask: int, limit: float, gpu: GpuTime, key: Key, methods: tuple[str, ...], known: bool) -> str:
    """The words for a race that would ask for more than the visitor can have, said before anything is asked.
    `ask`: the seconds requested, which ZeroGPU counts times DURATION_FACTOR."""
    whose = (f"the {limit:.0f} s your quota has left today" if known else
             f"a visitor's whole day ({VISITOR_QUOTA_S // 60} minutes of GPU time when not logged in, "
             f"{ACCOUNT_QUOTA_S // 60} with a free account)")
    pace = "this Space's measured pace" if gpu.pace(key).timed else "the pace projected for this GPU"
    fits = (shorter_race(gpu, key, methods, limit, f"the {limit:.0f} s left") if known else
            whole_day_fits(gpu, key, methods))
    return (f"This race would ask ZeroGPU for about {counted(ask)} s of GPU time {AS_COUNTED}, more than {whose}, so "
            f"it was not started. At {pace}{projected_band(gpu, key)}, {fits}.")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass
class Quota:
    """What the page learnt of a visitor's quota from a refusal: seconds left, until it refills."""

    left: float
    until: float  # time.monotonic() when it refills

    @classmethod
    def learnt(cls, answer: GpuAnswer) -> "Quota | None":
        if answer.kind != "quota" or answer.left is None:
            return None
        return cls(float(answer.left), time.monotonic() + refill_seconds(answer.refill))

    def current(self) -> float | None:
        return self.left if time.monotonic() < self.until else None


def refill_seconds(refill: str) -> float:
    """ZeroGPU's "H:MM:SS" in seconds; a day when it wrote none or something else."""
    parts = refill.split(":")
    try:
        return sum(float(p) * 60 ** i for i, p in enumerate(reversed(parts))) if refill else 86400.0
    except ValueError:
        return 86400.0
