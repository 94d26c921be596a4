"""GPU time on a ZeroGPU Space: what a race asks for, sized from what this Space's races took, and the words for
ZeroGPU's answers. ZeroGPU refuses a call whose asked duration exceeds what is left of the visitor's daily quota,
deducts the time a call uses, and ends a call that outlives what it asked for (README: Deploy)."""
from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from components.race import COST_METHOD, METHOD_LABELS
from ddd.trace import RunTrace

from .models import Key

# A visitor's daily ZeroGPU time (hub-docs, spaces-zerogpu): not logged in, and with a free account.
VISITOR_QUOTA_S = 120
ACCOUNT_QUOTA_S = 300
# The ask: the predicted time times MARGIN, plus SLACK_S for what no race has shown yet (a busier GPU).
MARGIN = 1.5
SLACK_S = 3.0
# Until this Space has timed a race of a pair: a 7B target's pace on a shared GPU per token and method, and a call's
# start (a GPU process, the weights moved onto the GPU).
UNTIMED_S_PER_TOKEN = 0.08
UNTIMED_START_S = 10.0
WINDOW = 5  # races remembered per pair: the slowest of them sizes the next ask
# The start-up's own calls (warm-up races, the measured preset) are charged to no visitor.
START_UP_ASK_S = 300
WARM_UP_TOKENS = 16


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
    timed: bool  # False: no race of this pair was timed yet (UNTIMED_* values)

    def rate(self, method: str) -> float:
        """A method never timed runs at the slowest timed one's pace."""
        return self.per_token.get(method, max(self.per_token.values(), default=UNTIMED_S_PER_TOKEN))

    def predict(self, methods: Iterable[str], tokens: int) -> float:
        methods = list(methods)
        return self.start_s + sum(self.prefill.get(m, max(self.prefill.values(), default=0.0)) for m in methods) \
            + tokens * sum(self.rate(m) for m in methods)


def ask_for(seconds: float) -> int:
    """The whole seconds a call asks for, to do work predicted to take `seconds`."""
    return max(1, math.ceil(MARGIN * seconds + SLACK_S))


class GpuTime:
    """Each model pair's recent race times (Models.key), kept in the page's process: a GPU process keeps nothing
    between calls."""

    def __init__(self) -> None:
        self._times: dict[Key, deque[RaceTime]] = {}
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
            return Pace({}, {}, UNTIMED_START_S, False)
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
        """The most new tokens a race of `methods` may ask for and still ask for at most `seconds` (0: none)."""
        pace, methods = self.pace(key), list(methods)
        per_token = sum(pace.rate(m) for m in methods)
        spare = (seconds - SLACK_S) / MARGIN - pace.predict(methods, 0)
        tokens = max(int(spare / per_token), 0) if per_token > 0 else 0
        while tokens and ask_for(pace.predict(methods, tokens)) > seconds:  # ask_for rounds up
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


def shorter_race(gpu: GpuTime, key: Key, methods: tuple[str, ...], seconds: float) -> str:
    """What fits in `seconds`: fewer tokens, or as many without the cost rule's column."""
    tokens = gpu.fitting_tokens(key, methods, seconds)
    fits = (f"a race of at most {tokens} new tokens fits (lower max new tokens)" if tokens else
            "no race of these methods fits")
    if COST_METHOD in methods:
        without = gpu.fitting_tokens(key, tuple(m for m in methods if m != COST_METHOD), seconds)
        if without > tokens:
            fits += f", or {without} without the {METHOD_LABELS[COST_METHOD]} column"
    return fits


def refusal_words(answer: GpuAnswer, gpu: GpuTime, key: Key, methods: tuple[str, ...]) -> str:
    """The page's words for a race ZeroGPU refused or ended."""
    if answer.kind == "quota":
        refill = f"in {answer.refill}" if answer.refill else "within a day"
        return (f"ZeroGPU refused this race: it asked for {answer.asked} s of GPU time and your quota has "
                f"{answer.left} s left today (it refills {refill}). Nothing ran. In {answer.left} s "
                f"{shorter_race(gpu, key, methods, answer.left)}. Log in to Hugging Face for more: "
                f"{ACCOUNT_QUOTA_S // 60} minutes a day with a free account, {VISITOR_QUOTA_S // 60} without.")
    if answer.kind == "aborted":
        return ("The race ran out of the GPU time it reserved and ZeroGPU ended it (GPU task aborted). Below is what "
                "it decoded until then, as a stopped race; the next race here asks for more time.")
    return f"ZeroGPU could not run this race: {answer.text}"


def too_long_words(ask: int, limit: float, gpu: GpuTime, key: Key, methods: tuple[str, ...], known: bool) -> str:
    """The words for a race that would ask for more than the visitor can have, said before anything is asked."""
    whose = (f"the {limit:.0f} s your quota has left today" if known else
             f"a visitor's whole day ({VISITOR_QUOTA_S // 60} minutes of GPU time when not logged in, "
             f"{ACCOUNT_QUOTA_S // 60} with a free account)")
    return (f"This race would ask ZeroGPU for about {ask} s of GPU time, more than {whose}, so it was not started. "
            f"At this Space's measured pace, {shorter_race(gpu, key, methods, limit)}.")


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
