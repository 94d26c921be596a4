"""A fair race between decoders on one model: one target forward of each in turn.

Run one after another, each method met a different machine: a burst of other work, or a cold start after
an idle spell, slowed whichever ran then, and the speedups measured the machine rather than the method.
Taking turns step by step makes a busy spell slow every method alike, and the order of each round rotates
so that no method always follows the same one. Each step is still timed on its own (the engine times its
draft and verify phases), so a method's steps add up to the time it would have taken alone.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .engine import Generation, generate
from .head import DraftHead
from .models import Target
from .settings import Sampling, check_method
from .trace import RunTrace, Step

WARM_UP_PROMPT = "Count to five."


@dataclass
class Entry:
    """One column of a race: a method and its settings."""

    method: str
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_method(self.method)


@dataclass
class Turn:
    """One step of one entrant, as the race hands it out."""

    name: str
    step: Step
    round: int  # 0 = the prefill round


class RoundRobin:
    """An iterator of Turns: every unfinished generation advances by one target forward per round."""

    def __init__(self, runs: Mapping[str, Generation]):
        self.runs = dict(runs)
        self._stopped = False

    def stop(self) -> None:
        """End every run after its current step."""
        self._stopped = True
        for run in self.runs.values():
            run.stop()

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def traces(self) -> dict[str, RunTrace]:
        """The traces of the runs that produced anything, in entry order."""
        return {name: run.trace for name, run in self.runs.items() if run.trace.steps}

    def __iter__(self) -> Iterator[Turn]:
        active = {name: iter(run) for name, run in self.runs.items()}
        round_ = 0
        while active:
            names = list(active)
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                try:
                    step = next(active[name])
                except StopIteration:
                    del active[name]
                    continue
                yield Turn(name, step, round_)
            round_ += 1


def start_race(target: Target, head: DraftHead | None, prompt: str, entries: Mapping[str, Entry], *,
               max_new_tokens: int, sampling: Sampling | None = None) -> RoundRobin:
    """Every entry's generation, created before any runs so that a bad setting or prompt is reported first."""
    sampling = sampling or Sampling()
    runs = {name: generate(target, None if entry.method == "plain" else head, prompt, entry.method,
                           max_new_tokens=max_new_tokens, sampling=replace(sampling), **entry.settings)
            for name, entry in entries.items()}
    return RoundRobin(runs)


def race_to_end(target: Target, head: DraftHead | None, prompt: str, entries: Mapping[str, Entry], *,
             max_new_tokens: int, sampling: Sampling | None = None) -> dict[str, RunTrace]:
    """A whole race without watching it: the traces by entry name."""
    race = start_race(target, head, prompt, entries, max_new_tokens=max_new_tokens, sampling=sampling)
    for _ in race:
        pass
    return race.traces


def warm_up(target: Target, head: DraftHead | None) -> None:
    """A few steps of plain decoding and of a small draft tree, thrown away. The first forwards after a load
    pay for memory allocation and kernel setup (the first prefill once took ten times the others'), and
    that cost belongs to no method."""
    entries = {"plain": Entry("plain")}
    if head is not None:
        entries["ddd"] = Entry("ddd", dict(beam_width=4, max_draft_calls=3, check_steps="all", total_tokens=8))
    race_to_end(target, head, WARM_UP_PROMPT, entries, max_new_tokens=4)
