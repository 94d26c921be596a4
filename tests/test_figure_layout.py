"""Every figure keeps plotly's toolbar (the modebar, over the top right corner) off its legend and its title, and
its title whole on a phone, and its notes clear of its tick labels.

The layout checks read the figures the app and the lesson make (the tree, depth and timeline figures of each
recorded race, the lesson's chapters): a legend lies under the plot, a title starts at the left, inside a top
margin tall enough for its lines, each line short enough for a screen 400 px wide. The browser check draws the
lesson page at 1440 and 400 px and compares what plotly drew: the toolbar's box against the legend's, the title's
and the notes', the legend against the title and notes, and the notes (a panel's title among them) against the
tick labels under a panel.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import plotly
import pytest

from components import load_race
from components.lesson import build_lesson, lesson_race
from components.lesson_page import lesson_html
from components.views import race_views, step_view
from ddd.costs import StepCosts
from tests.test_browser import CHROMIUM, Browser

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "assets" / "examples").glob("*.json"))
GPU = StepCosts(draft_cost=0.08, verify_base=0.14, verify_cost=0.0)  # as tests/test_lesson.py prices the GPU
# A title's type: 14 px, a line every 1.3 em; above its baseline a line's letters reach about its size, below it
# about a third of it.
TITLE_PX, LINE_PX = 14, 19
PHONE_CHARS = 46  # what a figure 358 px wide (a 400 px screen less the page's padding) shows of a 14 px line


def app_figures():
    """(name, figure) for every figure the app shows of each recorded race: the timeline, and at the prefill, the
    first and the last step, each tree and the depth chart; and the empty figures before any race."""
    for path in EXAMPLES:
        race = load_race(path)
        yield f"{path.stem} timeline", race_views(race)["timeline"]
        for index in (0, 1, race.decode_steps()):
            view = step_view(race, index)
            yield f"{path.stem} step {index} depth", view.depth
            for method, tree in view.trees.items():
                yield f"{path.stem} step {index} {method} tree", tree
    empty = step_view(None, 0)
    yield "no race: depth", empty.depth
    yield "no race: timeline", race_views(None)["timeline"]
    for method, tree in empty.trees.items():
        yield f"no race: {method} tree", tree


@pytest.fixture(scope="module")
def lesson():
    key, race = lesson_race((p.stem, load_race(p)) for p in EXAMPLES)
    return build_lesson(race, key, GPU)


def every_figure(lesson):
    yield from app_figures()
    for chapter in lesson.chapters:
        yield f"lesson chapter {chapter.number}", chapter.figure


def shows_legend(fig) -> bool:
    return fig.layout.showlegend is not False and any(t.showlegend is not False and t.name for t in fig.data)


def title_lines(fig) -> list[str]:
    text = fig.layout.title.text or ""
    return [re.sub(r"<[^>]+>", "", line) for line in text.split("<br>")] if text else []


def test_every_legend_lies_under_the_plot_clear_of_the_toolbar(lesson):
    checked = 0
    for name, fig in every_figure(lesson):
        if not shows_legend(fig):
            continue
        legend = fig.layout.legend
        # Under the plot area (its top below the plot's bottom edge), spread left to right: never the top right.
        assert legend.orientation == "h" and legend.yanchor == "top", name
        assert legend.y is not None and legend.y < 0, (name, legend.y)
        assert legend.xanchor in (None, "left") and (legend.x or 0) <= 0.05, (name, legend.x)
        checked += 1
    assert checked >= 20


def test_every_title_starts_left_inside_a_top_margin_that_holds_it(lesson):
    checked = 0
    for name, fig in every_figure(lesson):
        lines = title_lines(fig)
        if not lines:
            continue
        title, layout = fig.layout.title, fig.layout
        # The toolbar takes the top right: a title starts at the left.
        assert title.xanchor == "left" and title.x <= 0.05, name
        top = layout.margin.t
        if title.y is None:  # plotly's "auto": the first baseline halfway down the top margin
            baseline = top / 2
        else:
            # plotly sets a title of several lines with its first baseline at y, whatever the anchor; with "bottom"
            # a one-line title does the same, so the check below holds for both.
            assert (title.yref or "container") == "container" and title.yanchor == "bottom", name
            baseline = (1 - title.y) * layout.height
        first, last = baseline - TITLE_PX, baseline + LINE_PX * (len(lines) - 1) + TITLE_PX / 3
        assert first >= 2 and last <= top, (name, lines, first, last, top)
        for line in lines:
            assert len(line) <= PHONE_CHARS, (name, line)
        checked += 1
    assert checked >= 20


# -- in a browser --------------------------------------------------------------------------------------------------

BOXES = """(() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const all = (selector) => [...document.querySelectorAll('#chapter-figure ' + selector)].map(box)
    .filter(([l, t, r, b]) => r > l && b > t);
  return {figure: all('.main-svg').slice(0, 1), modebar: all('.modebar'), legend: all('.legend'),
          title: all('.gtitle'), notes: all('.annotation-text'), ticks: all('.xtick text')};
})()"""


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
@pytest.mark.slow
def test_the_lesson_page_keeps_toolbar_legend_and_title_apart(lesson, tmp_path):
    plotly_js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    page = tmp_path / "lesson.html"
    page.write_text(lesson_html(lesson, plotly_js=plotly_js), encoding="utf-8")
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(page.as_uri())
        browser.wait_for("!!document.querySelector('#chapter-figure .main-svg')", 60, "the first figure")
        for width in (1440, 400):
            browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000,
                                                                "deviceScaleFactor": 1, "mobile": False})
            for chapter in lesson.chapters:
                browser.js(f"location.hash = {json.dumps('#' + chapter.anchor)}")
                browser.wait_for(f"document.querySelector('#chapter').dataset.chapter === '{chapter.number}'"
                                 " && document.querySelectorAll('#chapter-figure .trace').length > 0", 20,
                                 f"chapter {chapter.number} at {width} px")
                time.sleep(0.3)  # plotly lays a responsive figure out again once it has its element's width
                boxes = browser.js(BOXES)
                where = f"chapter {chapter.number} at {width} px: {boxes}"
                (figure,) = boxes["figure"]
                for title in boxes["title"]:
                    assert figure[0] <= title[0] and title[2] <= figure[2] + 1 and figure[1] <= title[1], where
                for modebar in boxes["modebar"]:
                    for other in boxes["legend"] + boxes["title"] + boxes["notes"]:
                        assert not overlap(modebar, other), where
                for legend in boxes["legend"]:
                    for other in boxes["title"] + boxes["notes"]:
                        assert not overlap(legend, other), where
                for note in boxes["notes"]:
                    for tick in boxes["ticks"]:
                        assert not overlap(note, tick), where
                if width == 1440:  # the toolbar shows on a wide screen (the page hides it on a phone)
                    assert boxes["modebar"], where
    finally:
        browser.close()
