"""Replaying a race at its measured pace: what each method had written at a given moment."""
from __future__ import annotations

from itertools import accumulate

from .race import Race


def step_end_times(race: Race, method: str) -> list[float]:
    """Seconds from the method's start at which each of its steps finished."""
    return [ms / 1000 for ms in accumulate(s.ms for s in race.traces[method].steps)]


def duration(race: Race) -> float:
    return max((step_end_times(race, m)[-1] for m in race.methods if race.traces[m].steps), default=0.0)


def steps_done(race: Race, method: str, t: float) -> int:
    """How many of the method's steps had finished `t` seconds after all three started together."""
    return sum(1 for end in step_end_times(race, method) if end <= t)


def frame_times(race: Race, fps: float = 10.0, speed: float = 1.0) -> list[float]:
    """Race-clock instants to show, `fps` frames per wall second at `speed` times the measured pace;
    the last frame is the end of the slowest run."""
    total = duration(race)
    if total <= 0:
        return [0.0]
    step = speed / fps
    times = [i * step for i in range(int(total / step) + 1)]
    if times[-1] < total:
        times.append(total)
    return times
