"""Races as one static page (a static Space, a page the app saves to share, or a file opened from disk): no server,
no network.

Every view of every step is computed here, by the app's own code (components.views, .tree, .charts, .narration,
.answer, .verdict): the figures as the JSON Gradio sends a browser (`fig.to_json()`), the HTML the app shows, and
every word the page's script shows. A small player (static_player/player.js) swaps them in with Plotly.react and
checks, computes and writes nothing itself, so the app and the page cannot disagree. Per race the views are pooled
(a value repeated across steps is stored once), gzipped and base64-encoded into the page; the page decompresses
them with the browser's DecompressionStream, which also works from file://.
"""
from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from .about import about_markdown
from .answer import LEGEND, answer_html, counters_html
from .charts import SUMMARY_HEADERS, summary_rows, timeline_figure
from .embed import PAGE_HEAD, figure_json, markdown_html, script_json
from .lesson import GpuCosts
from .lesson_page import CSP, LESSON_FILE, LESSON_LINK, static_lesson
from .race import COLUMN_METHODS, TREE_METHODS, Race
from .runfile import load_race
from .tokens import escape
from .verdict import headline_html
from .views import CSS, PAUSE, PLAY, race_info, step_view

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
        "labels": [f"step {i} of {rounds(race) - 1}" + (" (prefill)" if i == 0 else "") for i in range(rounds(race))],
        "pool": pool.values, "steps": steps,
    }


def encode(value: Any) -> str:
    """JSON, gzipped, as base64 text (the page decodes it with DecompressionStream)."""
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


# Every word the player shows besides the views.
WORDS = {
    "play": PLAY, "pause": PAUSE,
    "failed": "Could not show that race: this browser could not unpack it. Reload the page, or try a current browser.",
    "noDecompression": "This browser cannot unpack the recorded races (it lacks DecompressionStream): use a current "
                       "browser.",
    "noPlotly": f"{PLOTLY_JS} did not load: keep it beside index.html. The texts still show; the figures cannot.",
    "noFigures": f"({PLOTLY_JS} is missing beside index.html: figures cannot be drawn)",
}
INTRO = {
    "recorded": ("recorded races",
                 "These races were recorded with the app; this page replays them and needs no server."),
    "saved": ("a race saved from the app", "This page was saved from the app and replays its race; it needs no server "
                                           "and no network, and opens in any current browser."),
}


def page_html(races: list[tuple[str, Race]], lesson: bool = False, plotly_js: str | None = None,
              kind: str = "recorded") -> str:
    """The page, with every race's views (`races`: key, race) embedded; `lesson`: with a link to the lesson beside
    it; plotly from the file PLOTLY_JS beside it, or `plotly_js` inside the page; `kind`: of INTRO."""
    data = {"columns": list(COLUMN_METHODS), "treeMethods": list(TREE_METHODS), "words": WORDS,
            "races": [{"key": key, "title": race.title or key, "data": encode(race_bundle(race))} for key, race in races]}
    plotly = (f'<script src="{PLOTLY_JS}"></script>' if plotly_js is None
              else "<script>" + plotly_js.replace("</script", "<\\/script") + "</script>")
    subtitle, replay = INTRO[kind]
    parts = {"@CSP@": CSP, "@TITLE@": escape(f"DDD Explorer: {subtitle}"), "@SUBTITLE@": escape(subtitle),
             "@REPLAY@": escape(replay), "/*@CSS@*/": CSS + (PLAYER / "player.css").read_text(encoding="utf-8"),
             "<!--@LEGEND@-->": LEGEND, "/*@DATA@*/": script_json(data), "<!--@LESSON@-->": LESSON_LINK if lesson else "",
             "/*@PLAYER@*/": (PLAYER / "player.js").read_text(encoding="utf-8"), "<!--@PLOTLY@-->": plotly,
             "@PLAY@": WORDS["play"]}
    page = PAGE
    for mark, value in parts.items():
        assert page.count(mark) == 1, mark
        page = page.replace(mark, value)
    return page


def saved_page(race: Race, key: str = "race") -> str:
    """A race as a page of its own, plotly inside: what the app's "Save as a page" offers."""
    return page_html([(key, race)], plotly_js=get_plotlyjs(), kind="saved")


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


PAGE = PAGE_HEAD + """<style>/*@CSS@*/</style>
</head>
<body>
<main>
<header id="intro">
  <h1>DDD Explorer <span class="sub">@SUBTITLE@</span></h1>
  <p>One model answered each prompt three ways. Plain decoding makes one token per forward pass.
  <b>EAGLE-2</b> drafts a tree of guesses with a small head and lets the model check them all in one pass;
  <b>DDD</b> does the same but chooses how deep to draft from the draft's own confidence. The decoders took
  turns, one target forward each, so step <i>n</i> below is the <i>n</i>-th forward of every decoder.
  A race with the <b>cost rule</b> (one more draft level only while it pays for its time) shows it as a fourth
  column. @REPLAY@ The app saves any race it shows as a page like this one (<b>Save as a page</b>).</p>
<!--@LESSON@-->
</header>
<section class="bar">
  <label>Race <select id="example"></select></label>
  <label class="check"><input type="checkbox" id="shade" checked> shade tokens by how they were made</label>
</section>
<div id="message" class="error-box" role="alert" hidden></div>
<div id="info" class="race-info"></div>
<div id="headline"></div>
<section class="columns">
  <div class="col"><div id="cnt-plain"></div><div id="ans-plain"></div></div>
  <div class="col"><div id="cnt-eagle2"></div><div id="ans-eagle2"></div></div>
  <div class="col"><div id="cnt-ddd"></div><div id="ans-ddd"></div></div>
  <div class="col" hidden><div id="cnt-cost"></div><div id="ans-cost"></div></div>
</section>
<div class="legend-line">Shading: <!--@LEGEND@-->. Plain decoding makes every token with the target.</div>
<section class="stepper" aria-label="step through the race">
  <button type="button" id="first">\u00ab First</button>
  <button type="button" id="prev">\u2039 Prev</button>
  <button type="button" id="play">@PLAY@</button>
  <button type="button" id="next">Next \u203a</button>
  <button type="button" id="last">Last \u00bb</button>
  <input type="range" id="slider" min="0" max="0" value="0" step="1" aria-label="step (0 = prefill)">
  <span id="step-label"></span>
</section>
<section class="pair">
  <div class="col">
    <p class="caption"><b>EAGLE-2</b> \u2014 text so far (current step outlined)</p>
    <div id="txt-eagle2" class="small"></div>
    <div id="tree-eagle2" class="plot"><div class="figure"></div></div>
  </div>
  <div class="col">
    <p class="caption"><b>DDD</b> \u2014 text so far (current step outlined)</p>
    <div id="txt-ddd" class="small"></div>
    <div id="tree-ddd" class="plot"><div class="figure"></div></div>
  </div>
  <div class="col" hidden>
    <p class="caption"><b>Cost rule</b> \u2014 text so far (current step outlined)</p>
    <div id="txt-cost" class="small"></div>
    <div id="tree-cost" class="plot"><div class="figure"></div></div>
  </div>
</section>
<div id="narration" class="narration"></div>
<div id="depth" class="plot"><div class="figure"></div></div>
<details id="summary-box">
  <summary>Summary and timeline</summary>
  <div id="summary"></div>
  <div id="timeline" class="plot"><div class="figure"></div></div>
</details>
<details id="about-box">
  <summary>About: what you are looking at</summary>
  <div id="about" class="about"></div>
</details>
<footer>DDD Explorer, a static replay of races recorded with the app. The app itself races your own prompts
on a real model (a Gradio Space, or <code>python app.py</code>).</footer>
</main>
<!--@PLOTLY@-->
<script type="application/json" id="races">/*@DATA@*/</script>
<script>/*@PLAYER@*/</script>
</body>
</html>
"""
