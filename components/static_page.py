"""The recorded races as one static page (a static Space, or a file opened from disk): no server, no network.

Every view of every step is computed here, when the page is exported, by the app's own code (components.views,
.tree, .charts, .narration, .answer, .verdict): the figures as the JSON Gradio sends a browser (`fig.to_json()`)
and the HTML the app shows. A small player (static_player/player.js) swaps them in with Plotly.react. Per race
the views are pooled (a value repeated across steps is stored once), gzipped and base64-encoded into
index.html; the page decompresses them with the browser's DecompressionStream, which also works from file://.

A race file loaded in the page has no Python to draw it: the player checks it and draws simpler views of its
own (docs/deploy.md, static page).
"""
from __future__ import annotations

import base64
import gzip
import json
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from ddd.settings import COST_SETTINGS, METHOD_DECLARATIONS, PRECISIONS, SAMPLING_SETTINGS, Setting
from ddd.trace import CHAIN_ENDS, SCHEMA_VERSION, STATUSES, RunTrace

from .about import about_markdown
from .answer import LEGEND, answer_html, counters_html
from .charts import METHOD_COLORS, SUMMARY_HEADERS, summary_rows, timeline_figure
from .embed import figure_json, markdown_html, script_json
from .lesson import GpuCosts
from .lesson_page import LESSON_FILE, LESSON_LINK, static_lesson
from .race import (COLUMN_METHODS, COST_METHOD, DROPPED_SHOWN, METHOD_LABELS, RACE_FORMAT, RACE_METHODS, RACE_VERSION,
                   TREE_METHODS, Race)
from .runcheck import MAX_PROMPT_TOKENS, MAX_TOKENS, MIN_STEP_MS, MIN_STEP_RATIO, SHARED, TOLERANCE, WEIGHED, Shape
from .runfile import (CHECK_FIELDS, CHECK_REQUIRED, COSTS_FIELDS, LIMITS, MAX_MS, NODE_FIELDS, RACE_FIELDS, STEP_FIELDS,
                      SUMMARY_KEYS, TRACE_FIELDS, TRACE_REQUIRED, load_race)
from .tokens import escape
from .tree import BAND_COLORS, COLORS, GHOST_COLOR, GHOST_LINE, LABEL_POSITIONS, MAX_LEVELS, MAX_NODES, STATUS_NAMES
from .verdict import BLOCK_ROUNDS, CONFIDENCE, MIN_STEPS, RESAMPLES, SMALLEST_CALLED, headline_html
from .views import CSS, race_info, step_view

PLAYER = Path(__file__).with_name("static_player")
PLOTLY_JS = "plotly.min.js"


def step_keys(columns: tuple[str, ...]) -> tuple[str, ...]:
    """What the player shows per step of a race with these columns, by the names of the page's elements
    (explorer.layout's, with - for _)."""
    trees = tree_columns(columns)
    return (*(f"ans_{m}" for m in columns), *(f"cnt_{m}" for m in columns), *(f"txt_{m}" for m in trees),
            *(f"tree_{m}" for m in trees), "narration", "depth")


def tree_columns(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(m for m in TREE_METHODS if m in columns)


class _Pool:
    """Values by position, each distinct value stored once."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._at: dict[str, int] = {}

    def add(self, value: str) -> int:
        if value not in self._at:
            self._at[value] = len(self.values)
            self.values.append(value)
        return self._at[value]


def rounds(race: Race) -> int:
    """The race's rounds: the decoders took turns, so round r holds step r of each; the longest run sets the count."""
    return max((len(t.steps) for t in race.traces.values()), default=0)


def column_at(race: Race, method: str, index: int) -> tuple[str, str]:
    """A race column (answer, counters) after round `index`: the text so far with its last step outlined."""
    trace = race.get(method)
    if trace is None or not trace.steps:
        return (answer_html(None, placeholder="(not run)"), counters_html(method, [], "not run"))
    last = len(trace.steps) - 1
    status = f"done: {trace.stop_reason}" if index >= last and trace.stop_reason else ""
    answer = answer_html(trace, upto=min(index, last), current=index if index <= last else None,
                         cursor=index < last)
    return answer, counters_html(method, trace.steps[: index + 1], status)


def summary_html(race: Race) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in SUMMARY_HEADERS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>" for row in summary_rows(race))
    return f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def race_bundle(race: Race) -> dict[str, Any]:
    """Every view the page shows of `race`, per round, with repeated values pooled."""
    pool = _Pool()
    columns = race.columns()
    keys = step_keys(columns)
    steps: dict[str, list[int]] = {key: [] for key in keys}
    for index in range(rounds(race)):
        view = step_view(race, index)
        values = {"narration": markdown_html(view.narration), "depth": figure_json(view.depth)}
        for method in tree_columns(columns):
            values[f"txt_{method}"], values[f"tree_{method}"] = view.texts[method], figure_json(view.trees[method])
        for method in columns:
            values[f"ans_{method}"], values[f"cnt_{method}"] = column_at(race, method, index)
        for key in keys:
            steps[key].append(pool.add(values[key]))
    return {
        "title": race.title, "rounds": rounds(race), "columns": list(columns), "trees": list(tree_columns(columns)),
        "lengths": {m: len(t.steps) for m, t in race.traces.items()},
        "info": race_info(race), "headline": headline_html(race.traces), "summary": summary_html(race),
        "timeline": figure_json(timeline_figure(race)), "about": markdown_html(about_markdown(race)),
        "pool": pool.values, "steps": steps,
    }


def encode(value: Any) -> str:
    """JSON, gzipped, as base64 text (the page decodes it with DecompressionStream)."""
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _declared(settings: tuple[Setting, ...]) -> list[dict[str, Any]]:
    """Each setting within the app's own range (runfile checks a file's settings against the ui range: a run made
    beyond it on the command line is not shown), with the default a file that omits it runs with."""
    return [{"name": s.name, "kind": s.kind, "low": s.bounds(ui=True)[0], "high": s.bounds(ui=True)[1],
             "default": s.default, "old": list(s.old_names)} for s in settings]


def _shapes() -> dict[str, dict[str, bool]]:
    """Which methods check their depth and which weigh it, as runcheck.Shape tells them apart."""
    shapes = {}
    for method in METHOD_DECLARATIONS:
        shape = Shape.of(RunTrace(method=method, settings={}, sampling={}, model="", head=None, prompt="",
                                  prompt_tokens=1))
        if shape is not None:
            shapes[method] = {"checks": shape.checks, "weighs": shape.weighs}
    return shapes


_TRACE_DEFAULTS = {f.name: f.default for f in fields(RunTrace) if f.name in SHARED and f.default is not MISSING}


def constants() -> dict[str, Any]:
    """What the player needs to read and draw a loaded race file, taken from the app's own definitions."""
    return {
        "format": RACE_FORMAT, "version": RACE_VERSION, "schema": SCHEMA_VERSION, "statuses": list(STATUSES),
        "fields": {"race": sorted(RACE_FIELDS), "trace": sorted(TRACE_FIELDS), "traceRequired": sorted(TRACE_REQUIRED),
                   "step": sorted(STEP_FIELDS), "node": sorted(NODE_FIELDS), "check": sorted(CHECK_FIELDS),
                   "checkRequired": sorted(CHECK_REQUIRED), "summary": sorted(SUMMARY_KEYS),
                   "costs": sorted(COSTS_FIELDS)},
        "settings": {method: _declared(declared) for method, declared in METHOD_DECLARATIONS.items()},
        "sampling": _declared(SAMPLING_SETTINGS), "precisions": list(PRECISIONS), "chainEnds": list(CHAIN_ENDS),
        "labels": METHOD_LABELS, "methods": list(RACE_METHODS), "columns": list(COLUMN_METHODS),
        "costMethod": COST_METHOD, "treeMethods": list(TREE_METHODS), "shapes": _shapes(), "weighed": list(WEIGHED),
        "shared": list(SHARED), "traceDefaults": _TRACE_DEFAULTS, "colors": COLORS, "statusNames": STATUS_NAMES,
        "methodColors": METHOD_COLORS, "bandColors": list(BAND_COLORS), "ghostColor": GHOST_COLOR,
        "ghostLine": GHOST_LINE, "labelPositions": LABEL_POSITIONS, "droppedShown": DROPPED_SHOWN,
        "minStepMs": MIN_STEP_MS, "minStepRatio": MIN_STEP_RATIO, "tolerance": TOLERANCE,
        "costs": [s.name for s in COST_SETTINGS], "costBounds": {s.name: s.bounds() for s in COST_SETTINGS},
        "verdict": {"reference": "plain", "confidence": CONFIDENCE, "resamples": RESAMPLES, "blockRounds": BLOCK_ROUNDS,
                    "minSteps": MIN_STEPS, "smallestCalled": SMALLEST_CALLED},
        "limits": {"fileBytes": LIMITS.file_bytes, "jsonBytes": LIMITS.json_bytes, "steps": LIMITS.steps,
                   "nodesPerStep": LIMITS.nodes_per_step, "nodes": LIMITS.nodes, "text": LIMITS.long_text,
                   "listItems": LIMITS.list_items, "treeLevels": MAX_LEVELS, "treeNodes": MAX_NODES,
                   "tokens": MAX_TOKENS, "promptTokens": MAX_PROMPT_TOKENS, "ms": MAX_MS},
    }


def page_html(races: list[tuple[str, Race]], lesson: bool = False) -> str:
    """index.html: the player, with every race's views (`races`: key, race) embedded; `lesson`: with a link to the
    lesson beside it."""
    data = {"constants": constants(),
            "races": [{"key": key, "title": race.title or key, "data": encode(race_bundle(race))} for key, race in races]}
    template = (PLAYER / "page.html").read_text(encoding="utf-8")
    parts = {"/*@CSS@*/": CSS + (PLAYER / "player.css").read_text(encoding="utf-8"),
             "<!--@LEGEND@-->": LEGEND, "/*@DATA@*/": script_json(data),
             "<!--@LESSON@-->": LESSON_LINK if lesson else "",
             "/*@PLAYER@*/": (PLAYER / "player.js").read_text(encoding="utf-8"), "@PLOTLY@": PLOTLY_JS}
    for mark, value in parts.items():
        assert template.count(mark) == 1, mark
        template = template.replace(mark, value)
    return template


def write_static_page(folder: Path, paths: list[Path], gpu: GpuCosts) -> list[Path]:
    """index.html replaying the races in `paths`, plotly.js beside it and the lesson (lesson.html, its race's pair
    priced on a GPU by `gpu`) where a race holds what it reads; returns the files written."""
    races = [(path.stem, load_race(path)) for path in paths]  # in the app's order: by file name
    folder.mkdir(parents=True, exist_ok=True)
    lesson = static_lesson(races, PLOTLY_JS, gpu)
    index = folder / "index.html"
    index.write_text(page_html(races, lesson is not None), encoding="utf-8")
    plotly_js = folder / PLOTLY_JS
    plotly_js.write_text(get_plotlyjs(), encoding="utf-8")
    if lesson is None:
        return [index, plotly_js]
    (folder / LESSON_FILE).write_text(lesson, encoding="utf-8")
    return [index, plotly_js, folder / LESSON_FILE]
