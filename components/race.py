"""A race: the runs of one prompt (plain, EAGLE-2, DDD, and the cost rule when asked) kept together in one JSON file.

Each run inside keeps the engine's RunTrace schema (with its own schema_version); the race wrapper
adds its own format name and version so that a file of another kind or version is refused clearly.
A single RunTrace file is accepted too: it loads as a race with one method.
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddd.metrics import summarize
from ddd.settings import BEAM_WIDTH
from ddd.trace import FILE_DECIMALS, RunTrace

RACE_FORMAT = "ddd-explorer-race"
RACE_VERSION = 1
RACE_METHODS = ("plain", "eagle2", "ddd")  # the columns every race has
COST_METHOD = "cost"  # the fourth column, raced when the visitor switches it on
COLUMN_METHODS = (*RACE_METHODS, COST_METHOD)
TREE_METHODS = ("eagle2", "ddd", COST_METHOD)  # the columns whose draft trees the step view shows
DROPPED_SHOWN = 5  # the tree view shows at most this many of each level's best candidates the rerank dropped
METHOD_LABELS = {"plain": "Plain", "eagle": "EAGLE", "eagle2": "EAGLE-2", "ddd": "DDD", "cost": "Cost rule"}


class RaceFileError(ValueError):
    """A race file is missing, unreadable, or of another format or version; the message says which."""


@dataclass
class Race:
    traces: dict[str, RunTrace] = field(default_factory=dict)
    title: str = ""
    note: str = ""

    @property
    def prompt(self) -> str:
        for trace in self.traces.values():
            return trace.prompt
        return ""

    @property
    def methods(self) -> list[str]:
        return [m for m in (*COLUMN_METHODS, "eagle") if m in self.traces]

    def columns(self) -> tuple[str, ...]:
        """The race columns it fills: the three of every race, and the cost rule's where it has that run."""
        return COLUMN_METHODS if COST_METHOD in self.traces else RACE_METHODS

    def get(self, method: str) -> RunTrace | None:
        return self.traces.get(method)

    def summary(self, method: str) -> dict[str, Any]:
        """The run's summary; recomputed from its steps when the run did not finish (stopped mid-way)."""
        trace = self.traces.get(method)
        if trace is None:
            return {}
        return trace.summary or summarize(trace.steps)

    def decode_steps(self) -> int:
        """How many steps the step slider needs: the longest speculative run (prefill = step 0)."""
        lengths = [len(self.traces[m].steps) for m in (*TREE_METHODS, "eagle") if m in self.traces]
        if not lengths:
            lengths = [len(t.steps) for t in self.traces.values()]
        return max(lengths, default=0)

    # -- files ------------------------------------------------------------------------------------

    def to_dict(self, compact: bool = False) -> dict[str, Any]:
        traces = {}
        for method, trace in self.traces.items():
            data = trace.to_dict()
            if compact:
                data = _compact_trace(data)
            traces[method] = data
        return {"format": RACE_FORMAT, "version": RACE_VERSION, "title": self.title, "note": self.note,
                "traces": traces}

    def save(self, path: str | Path, compact: bool = False) -> Path:
        """Write the race as one JSON file, gzipped when `path` ends in .gz. `compact` rounds numbers and keeps
        only the draft nodes the tree view shows (verified nodes and the best dropped candidates of each level)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(compact), ensure_ascii=False, separators=(",", ":") if compact else None)
        if path.suffix == ".gz":  # a race's JSON is mostly repeated keys and numbers: it shrinks several times
            with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
                f.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path


def shown_nodes(pool: list[Any], dropped: int) -> set[int]:
    """Pool indices the tree view shows: the verified nodes and the `dropped` best candidates of each level that
    the rerank dropped, closed under parents so every shown node hangs from the root.
    Works on DraftNode objects and on their JSON dicts."""
    nodes = list(pool)
    keep: set[int] = set()
    by_depth: dict[int, list[Any]] = {}
    for n in nodes:
        status, index = _get(n, "status"), _get(n, "index")
        if status != "pruned":
            keep.add(index)
        else:
            by_depth.setdefault(_get(n, "depth"), []).append(n)
    for group in by_depth.values():
        group.sort(key=lambda n: -_get(n, "score"))
        keep.update(_get(n, "index") for n in group[:dropped])
    parents = {_get(n, "index"): _get(n, "parent") for n in nodes}
    for index in list(keep):
        parent = parents.get(index, -1)
        while parent >= 0 and parent not in keep:
            keep.add(parent)
            parent = parents.get(parent, -1)
    return keep


def _get(node: Any, name: str) -> Any:
    return node[name] if isinstance(node, dict) else getattr(node, name)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, FILE_DECIMALS) if math.isfinite(value) else value
    if isinstance(value, list):
        return [_round(v) for v in value]
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def _compact_trace(data: dict[str, Any]) -> dict[str, Any]:
    width = int(data.get("settings", {}).get("beam_width") or BEAM_WIDTH.default)
    for step in data.get("steps", []):
        pool = step.get("pool") or []
        if not pool:
            continue
        keep = shown_nodes(pool, min(width, DROPPED_SHOWN))
        # Indices stay the pool's own: parent links and accepted_path keep pointing at the same nodes.
        step["pool"] = [n for n in pool if n["index"] in keep]
    return _round(data)
