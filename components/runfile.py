"""Reading and writing race files, with every field checked before any view sees it.

A run file comes from anywhere (an upload, an API call), and the views trust what they are given: a node that
is its own parent makes the tree layout loop forever, a string where a number belongs raises deep inside a
figure, and a huge file fills memory. So a file is read within size limits, plain or gzipped, and checked
field by field (types, ranges, lengths, tree shape) before a Race is built from it (the reading itself:
components/jsonfile.py). Each kind of problem has
its own message, naming the field where it was found.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from ddd.costs import Calibration, CalibrationError
from ddd.settings import (COST_SETTINGS, METHOD_DECLARATIONS, PRECISIONS, SAMPLING_SETTINGS, Sampling, Setting,
                          SettingsError, current_names, parse_settings)
from ddd.metrics import summarize
from ddd.trace import (CHAIN_ENDS, SCHEMA_VERSION, STATUSES, DraftNode, RunTrace, Spec, Step,
                       spec_of)

from .jsonfile import LIMITS, FileLimits, read_json
from .race import METHOD_LABELS, RACE_FORMAT, RACE_VERSION, Race, RaceFileError
from .racecheck import check_race, check_tokens
from .runcheck import check_run
from .tokens import excerpt

TRACE_FIELDS = {f.name for f in fields(RunTrace)}
TRACE_REQUIRED = {"method", "settings", "sampling", "model", "head", "prompt", "prompt_tokens", "schema_version"}
RACE_FIELDS = {"format", "version", "title", "note", "traces"}
SUMMARY_KEYS = set(summarize([]))


def load_race(path: str | Path, limits: FileLimits = LIMITS) -> Race:
    """The race in a run file, checked completely; RaceFileError says what is wrong with it otherwise."""
    path = Path(path)
    return race_from_data(read_json(path, limits), path.name, limits)


def race_from_data(data: Any, source: str = "the file", limits: FileLimits = LIMITS) -> Race:
    """A Race from parsed JSON: a race file, or a single run (RunTrace) file that becomes a one-method race."""
    checker = _Checker(source, limits)
    if not isinstance(data, dict):
        raise RaceFileError(f"{source} is not a recorded run: it holds {_kind(data)}, not an object.")
    if "format" not in data and "method" in data and "steps" in data:
        trace = checker.trace(data, "the run", None)
        check_tokens({trace.method: trace}, checker.fail, lambda _: "the run")
        return Race(traces={trace.method: trace}, title=trace.prompt[:60])
    if data.get("format") != RACE_FORMAT:
        raise RaceFileError(f"{source} is not a DDD Explorer recorded run (its format is "
                            f"{excerpt(data.get('format'))}, expected {RACE_FORMAT!r}).")
    if data.get("version") != RACE_VERSION or isinstance(data.get("version"), bool):
        raise RaceFileError(f"{source} is a recorded run of version {excerpt(data.get('version'))}; this app reads "
                            f"version {RACE_VERSION}.")
    checker.keys(data, RACE_FIELDS, {"format", "version", "traces"}, "the race")
    title = checker.text(data.get("title", ""), "title", limits.label)
    note = checker.text(data.get("note", ""), "note", limits.label)
    raw = data["traces"]
    if not isinstance(raw, dict) or not raw:
        raise RaceFileError(f"{source} holds no runs (its 'traces' object is missing or empty).")
    traces = {}
    for method, trace_data in raw.items():
        if method not in METHOD_LABELS:
            raise RaceFileError(f"{source} has a run of unknown method {excerpt(method)}; known: "
                                f"{', '.join(METHOD_LABELS)}.")
        traces[method] = checker.trace(trace_data, f"traces.{method}", method)
    check_race(traces, checker.fail)
    return Race(traces=traces, title=title, note=note)


def _kind(value: Any) -> str:
    """What a JSON value is, as a message says it ("must be a number, not text")."""
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "text", int: "a number", float: "a number"}.get(type(value), "null")


class _Checker:
    """Walks one file's data; every problem becomes a RaceFileError naming the file and the field."""

    def __init__(self, source: str, limits: FileLimits):
        self.source = source
        self.limits = limits
        self.nodes = 0

    def fail(self, where: str, problem: str) -> RaceFileError:
        return RaceFileError(f"{self.source}: {where} {problem}.")

    # -- values --------------------------------------------------------------------------------

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be an object, not {_kind(value)}")
        return value

    def items(self, value: Any, where: str, limit: int) -> list:
        if not isinstance(value, list):
            raise self.fail(where, f"must be a list, not {_kind(value)}")
        if len(value) > limit:
            raise self.fail(where, f"has {len(value)} entries; at most {limit} are allowed")
        return value

    def keys(self, data: dict, allowed: set[str], required: set[str], where: str) -> None:
        missing = sorted(required - set(data))
        if missing:
            raise self.fail(where, f"lacks the field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        unknown = sorted(set(data) - allowed, key=str)
        if unknown:
            raise self.fail(where, f"has unexpected field{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(excerpt(k) for k in unknown[:5])}")

    def integer(self, value: Any, where: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"must be a whole number, not {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(where, f"is {excerpt(value)}, outside {low}..{high}")
        return value

    def number(self, value: Any, where: str, low: float, high: float, log: bool = False) -> float:
        """A finite number in [low, high]; `log` values (log-probabilities) may also be -Infinity."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"must be a number, not {_kind(value)}")
        if math.isnan(value) or (math.isinf(value) and not (log and value < 0)):
            raise self.fail(where, f"is {value}, not a finite number")
        if not low <= value <= high:
            raise self.fail(where, f"is {excerpt(value)}, outside {low:g}..{high:g}")
        return float(value)

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"must be true or false, not {_kind(value)}")
        return value

    def text(self, value: Any, where: str, limit: int, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(where, f"must be text, not {_kind(value)}")
        if len(value) > limit:
            raise self.fail(where, f"is {len(value)} characters long; at most {limit} are allowed")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:  # a lone surrogate ("\ud800") parses as JSON but is not text
            raise self.fail(where, f"holds an invalid character (a lone surrogate at position {err.start})") from err
        return value

    # -- records, by their declarations (ddd/trace.py Spec) -------------------------------------

    def bound(self, value: float | str) -> float:
        """A Spec bound: a number, or the name of a FileLimits field (with '-': its negative)."""
        if isinstance(value, str):
            return -getattr(self.limits, value[1:]) if value.startswith("-") else getattr(self.limits, value)
        return value

    def field(self, value: Any, spec: Spec, where: str) -> None:
        if value is None and spec.optional:
            return
        low, high, kind = self.bound(spec.low), self.bound(spec.high), spec.kind
        if kind == "int":
            self.integer(value, where, int(low), int(high))
        elif kind in ("number", "logprob"):
            self.number(value, where, low, high, log=kind == "logprob")
        elif kind == "flag":
            self.flag(value, where)
        elif kind == "text":
            self.text(value, where, getattr(self.limits, spec.limit))
        elif kind in ("ints", "logprobs", "records"):
            item = Spec(kind[:-1], spec.low, spec.high, record=spec.record)
            for i, value_i in enumerate(self.items(value, where, getattr(self.limits, spec.limit))):
                self.field(value_i, item, f"{where}[{i}]")
        elif kind == "record":
            self.record(value, spec.record, where)
        # "data": checked by the caller's own rules

    def record(self, data: Any, cls: type, where: str) -> dict:
        """`data` as a record of `cls`: its declared fields only, the required ones present, each as declared."""
        data = self.obj(data, where)
        declared = {f.name: f for f in fields(cls)}
        required = {n for n, f in declared.items() if f.default is MISSING and f.default_factory is MISSING}
        self.keys(data, set(declared), required, where)
        for name, f in declared.items():
            if name in data:
                self.field(data[name], spec_of(f), f"{where}.{name}")
        return data

    # -- records -------------------------------------------------------------------------------

    def trace(self, data: Any, where: str, method: str | None) -> RunTrace:
        data = self.obj(data, where)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):
            raise self.fail(where, f"has trace schema version {excerpt(version)}; this app reads version "
                                   f"{SCHEMA_VERSION}")
        self.keys(data, TRACE_FIELDS, TRACE_REQUIRED, where)
        if data["method"] not in METHOD_LABELS:
            raise self.fail(f"{where}.method", f"is {excerpt(data['method'])}, not one of {', '.join(METHOD_LABELS)}")
        if method is not None and data["method"] != method:
            raise self.fail(f"{where}.method", f"is {excerpt(data['method'])} but the run is filed under {method!r}")
        lim = self.limits
        data = {**data, "settings": current_names(data["method"], data["settings"])}
        self.settings(data["settings"], f"{where}.settings", data["method"])
        self.sampling(data["sampling"], f"{where}.sampling")
        for name in ("model", "stop_reason", "device"):
            self.text(data.get(name, ""), f"{where}.{name}", lim.label)
        self.text(data["head"], f"{where}.head", lim.label, optional=True)
        for name in ("prompt", "text"):
            self.text(data.get(name, ""), f"{where}.{name}", lim.long_text)
        self.integer(data["prompt_tokens"], f"{where}.prompt_tokens", 0, 10**7)
        if data.get("precision", "float32") not in PRECISIONS:
            raise self.fail(f"{where}.precision", f"is {excerpt(data.get('precision'))}, not one of "
                                                  f"{', '.join(PRECISIONS)}")
        if data.get("calibration") is not None:
            try:
                Calibration.from_json(data["calibration"])
            except CalibrationError as err:
                raise self.fail(f"{where}.calibration", str(err)) from None
        self.summary(data.get("summary", {}), f"{where}.summary")
        steps = self.items(data.get("steps"), f"{where}.steps", lim.steps)
        if not steps:
            raise self.fail(f"{where}.steps", "is empty: a recorded run has at least its prefill step")
        for position, step in enumerate(steps):
            self.step(step, f"{where}.steps[{position}]", position)
        return check_run(RunTrace.from_dict(data), where, self.fail)

    def declared(self, data: dict, declared: tuple[Setting, ...], where: str) -> None:
        """Each stored value of the JSON type its declaration says, within the range the app races with (the
        declaration's ui range where it has one: a run made beyond it, on the command line, is not shown here)."""
        self.keys(data, {s.name for s in declared}, set(), where)
        for setting in declared:
            if setting.name not in data:
                continue
            value, at = data[setting.name], f"{where}.{setting.name}"
            low, high = setting.bounds(ui=True)
            if setting.kind == "calls":
                if value != "all":
                    for i, call in enumerate(self.items(value, at, int(high))):
                        self.integer(call, f"{at}[{i}]", int(low), int(high))
            elif setting.kind == "tree":
                for i, path in enumerate(self.items(value, at, self.limits.list_items)):
                    for j, rank in enumerate(self.items(path, f"{at}[{i}]", self.limits.list_items)):
                        self.integer(rank, f"{at}[{i}][{j}]", int(low), int(high))
            elif setting.kind == "float":
                self.number(value, at, low, high)
            elif setting.kind == "bool":
                self.flag(value, at)
            else:
                self.integer(value, at, int(low), int(high))

    def settings(self, data: Any, where: str, method: str) -> None:
        data = self.obj(data, where)
        self.declared(data, METHOD_DECLARATIONS[method], where)
        try:
            parse_settings(method, data).validate()
        except SettingsError as err:
            raise self.fail(where, f"are impossible: {err}") from err

    def sampling(self, data: Any, where: str) -> None:
        data = self.obj(data, where)
        self.declared(data, SAMPLING_SETTINGS, where)
        try:
            Sampling(**data).validate()
        except SettingsError as err:
            raise self.fail(where, f"is impossible: {err}") from err

    def summary(self, data: Any, where: str) -> None:
        data = self.obj(data, where)
        if not data:  # a run stopped midway has none: the views recompute it from the steps
            return
        self.keys(data, SUMMARY_KEYS, SUMMARY_KEYS, where)
        for name, value in data.items():
            self.number(value, f"{where}.{name}", 0, 1e12)

    def step(self, data: Any, where: str, position: int) -> None:
        data = self.record(data, Step, where)
        if data["index"] != position:
            raise self.fail(f"{where}.index", f"is {excerpt(data['index'])}, but the step is number {position}")
        lim = self.limits
        chain_end = data.get("chain_end", "")
        if chain_end != "" and chain_end not in CHAIN_ENDS:  # files made before it was recorded have none
            raise self.fail(f"{where}.chain_end", f"is {excerpt(chain_end)}, not one of {', '.join(CHAIN_ENDS)}")
        pool = self.items(data.get("pool", []), f"{where}.pool", lim.nodes_per_step)
        self.nodes += len(pool)
        if self.nodes > lim.nodes:
            raise self.fail(where, f"brings the file past {lim.nodes} draft nodes in all")
        parents = self.tree(pool, f"{where}.pool")
        accepted = self.integer(data["accepted"], f"{where}.accepted", 0, len(data["token_ids"]))
        path = data.get("accepted_path", [])
        if not pool:
            if path:
                raise self.fail(f"{where}.accepted_path", "lists nodes but the step has no draft pool")
            return
        for i, index in enumerate(path):
            if index not in parents:
                raise self.fail(f"{where}.accepted_path[{i}]", f"is {index}, not a node of the pool")
            expected = path[i - 1] if i else -1
            if parents[index] != expected:
                raise self.fail(f"{where}.accepted_path", "is not a path from the root down the tree")
        if accepted > max(len(path) - 1, 0):
            raise self.fail(f"{where}.accepted", f"is {accepted} but the accepted path holds only "
                                                 f"{max(len(path) - 1, 0)} draft tokens")

    def tree(self, pool: list, where: str) -> dict[int, int]:
        """Checks that the pool is a tree listed parents first (so no node is its own ancestor: the layout
        walks parent links and would never end on a cycle); returns each node's parent."""
        parents: dict[int, int] = {}
        depths: dict[int, int] = {}
        for position, node in enumerate(pool):
            at = f"{where}[{position}]"
            node = self.record(node, DraftNode, at)
            index, parent, depth = node["index"], node["parent"], node["depth"]
            if index in parents:
                raise self.fail(f"{at}.index", f"repeats node {index}: every node of a pool needs its own index")
            if position == 0:
                if parent != -1 or node["status"] != "root" or depth != 0:
                    raise self.fail(at, "must be the root (status 'root', parent -1, depth 0)")
            elif parent not in parents:
                problem = "is the node itself" if parent == index else (
                    "comes later in the pool" if any(n.get("index") == parent for n in pool if isinstance(n, dict))
                    else "is not in the pool")
                raise self.fail(f"{at}.parent", f"{parent} {problem}: the pool must be a tree with every parent "
                                                f"listed before its children")
            elif depth != depths[parent] + 1:
                raise self.fail(f"{at}.depth", f"is {depth} but its parent's is {depths[parent]}")
            if position and node["status"] == "root":
                raise self.fail(f"{at}.status", "is 'root' but only the first node is the root")
            if node["status"] not in STATUSES:
                raise self.fail(f"{at}.status", f"is {excerpt(node['status'])}, not one of {', '.join(STATUSES)}")
            parents[index] = parent
            depths[index] = depth
        return parents
