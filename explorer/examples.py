"""The recorded races shipped in assets/examples: found, read once per file version, and recorded again by
`python app.py --record-examples` with the app's own race loop."""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components import Race, RaceFileError, load_race
from components.lesson import LESSON_METHODS
from components.race import RACE_METHODS
from components.verdict import verdict
from ddd.settings import Sampling

from .models import Models
from .presets import CPU_PRESET, PRESETS, race_entries
from .racing import RaceRequest, collect, race_events

EXAMPLE_PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "What is 17 * 24? Explain step by step.",
    "Count from 1 to 20, separated by commas.",
    "Tell me a short story about a robot who learns to paint.",
    "Translate into French: The weather is lovely today and we are going to the beach.",
    "List three tips for staying focused while studying.",
]
CACHED_FILES = 32
# A recorded race's plain forwards may wander this much (slowest / median, median / fastest) before it is recorded
# again, up to ATTEMPTS times: the lesson reads its numbers off them (docs/app.md, Examples).
STEADY = 1.3
ATTEMPTS = 6


@dataclass
class ExampleRun:
    """A recorded example: its file name, title, prompt, changes to the CPU preset's tree settings (by the
    settings' declared names) and the methods raced."""

    stem: str
    title: str
    prompt: str
    changes: dict[str, Any] = field(default_factory=dict)
    methods: tuple[str, ...] = RACE_METHODS


EXAMPLE_RUNS = [
    ExampleRun("code", "Code: a palindrome check", EXAMPLE_PROMPTS[0]),
    # The lesson's race (components/lesson.py): the static tree and the cost rule raced beside the three columns.
    ExampleRun("maths", "Maths: step by step, five decoders", EXAMPLE_PROMPTS[1], methods=LESSON_METHODS),
    # At the preset's threshold DDD mostly stops short of EAGLE-2's depth; at -2 it shows the other side of
    # its choice, drafting deeper than EAGLE-2 where the counting is predictable.
    ExampleRun("counting", "Counting: DDD drafts deeper than EAGLE-2", EXAMPLE_PROMPTS[2],
               dict(threshold=-2.0)),
    ExampleRun("story", "A short story", EXAMPLE_PROMPTS[3]),
    ExampleRun("translation", "Translation into French", EXAMPLE_PROMPTS[4]),
    ExampleRun("tips", "Advice: a short list", EXAMPLE_PROMPTS[5]),
]


class ExampleShelf:
    """The example races in one folder, each parsed once per file version (views never modify a race, so
    sessions share it)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._cache: dict[tuple[str, float], Race] = {}

    def files(self) -> dict[str, Path]:
        """Example files by display name (their title, else the file name)."""
        out: dict[str, Path] = {}
        for path in sorted(self.directory.glob("*.json")):
            try:
                title = self.read(path).title or path.stem
            except (OSError, RaceFileError):
                title = path.stem
            out[str(title)] = path
        return out

    def read(self, path: Path) -> Race:
        key = (str(path), path.stat().st_mtime)
        if key not in self._cache:
            if len(self._cache) >= CACHED_FILES:
                self._cache.clear()
            self._cache[key] = load_race(path)
        return self._cache[key]


def record_race(models: Models, prompt: str, title: str, max_new_tokens: int = 96,
                changes: dict[str, Any] | None = None, methods: tuple[str, ...] = RACE_METHODS) -> Race:
    """Race `prompt` as the app does at the CPU preset (with `changes`), without the page."""
    request = RaceRequest(prompt, race_entries({**PRESETS[CPU_PRESET], **(changes or {})}, methods), max_new_tokens,
                          Sampling(), models.default_precision())
    live = collect(race_events(models, request))
    return Race(traces=live.finished(), title=title, note=live.note)


def depth_contrast(race: Race) -> tuple[int, int]:
    """(steps where DDD drafted fewer levels than EAGLE-2, steps where it drafted more)."""
    fixed = int(race.traces["eagle2"].settings.get("draft_calls", 0))
    calls = [s.draft_calls for s in race.traces["ddd"].steps if not s.prefill]
    return sum(c < fixed for c in calls), sum(c > fixed for c in calls)


def spread(race: Race) -> float:
    """How unsteady plain decoding's forwards were: the larger of slowest / median and median / fastest (1: all
    alike). Every forward is the same work, so more than noise means the machine was busy."""
    times = [s.ms for s in race.traces["plain"].steps if not s.prefill]
    median = statistics.median(times)
    return max(max(times) / median, median / min(times))


def record_examples(models: Models, directory: Path, max_new_tokens: int = 64, only: Iterable[str] = (),
                    attempts: int = ATTEMPTS) -> list[Path]:
    """Record every example (or those whose stems are in `only`) into `directory`, as a benchmark is run: each up to
    `attempts` times until plain decoding's forwards are steady (spread at most STEADY), keeping the steadiest;
    prints each one's verdict, spread and depth contrast."""
    paths = []
    for example in [e for e in EXAMPLE_RUNS if not only or e.stem in set(only)]:
        tries = []
        for _ in range(max(attempts, 1)):
            tries.append(record_race(models, example.prompt, example.title, max_new_tokens, example.changes,
                                     example.methods))
            if spread(tries[-1]) <= STEADY:
                break
        race = min(tries, key=spread)
        path = race.save(Path(directory) / f"{example.stem}.json", compact=True)
        fewer, more = depth_contrast(race)
        times = sorted(s.ms for s in race.traces["plain"].steps if not s.prefill)
        print(f"{path.name}: {verdict(race.traces).headline} Plain forwards {times[0]:.0f} / "
              f"{statistics.median(times):.0f} / {times[-1]:.0f} ms (min / median / max, spread {spread(race):.2f}"
              f"{'' if spread(race) <= STEADY else f', over {STEADY}: the machine stayed busy'}) after "
              f"{len(tries)} {'try' if len(tries) == 1 else 'tries'}. DDD shallower than EAGLE-2 in {fewer} steps, "
              f"deeper in {more}; {path.stat().st_size / 1e6:.1f} MB", flush=True)
        paths.append(path)
    return paths
