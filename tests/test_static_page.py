"""The static Space's page in a real browser: opened from disk (file://) with the network off, it shows every
shipped example as the app shows it, step by step, steps forward and back and plays, and a page the app saves
replays its race alike, all without a console error or a request leaving the page. A screenshot goes to
out/static-page.png.
"""
from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from components import load_race
from components.embed import markdown_html
from components.exports import ExportStore
from components.static_page import column_at, rounds
from components.verdict import headline_html
from components.views import step_view
from explorer.deploy import export_space
from tests.test_browser import CHROMIUM, OUT, Browser, plotly_traces, text_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "assets" / "examples").glob("*.json"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

class RecordingBrowser(Browser):
    """The project's DevTools client, keeping the events it reads past (console, exceptions, requests)."""

    def __init__(self, user_dir: Path):
        super().__init__(user_dir)
        self.events: list[dict] = []

    def _read_message(self, timeout: float) -> dict | None:
        message = super()._read_message(timeout)
        if message and "method" in message:
            self.events.append(message)
        return message

    def problems(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:400])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args", []))[:400])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", "")[:400])
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = export_space("static", tmp_path_factory.mktemp("static") / "space")
    browser = RecordingBrowser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        browser.open("about:blank")
        for domain in ("Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable")
        browser.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                          "uploadThroughput": -1})
        browser.index = (folder / "index.html").as_uri()
        browser.send("Page.navigate", {"url": browser.index})
        browser.wait_for(f"{plotly_traces('tree-ddd')} > 0", 60, "the first example's DDD tree")
        yield browser
    finally:
        browser.close()


def shown_step(browser) -> str:
    return browser.js(text_of("step-label"))


def tree_title(elem_id: str) -> str:
    return f"(document.querySelector('#{elem_id} .gtitle')?.textContent || '')"


def choose(browser, value: str) -> None:
    browser.js(f"(() => {{ const s = document.querySelector('#example'); s.value = {json.dumps(value)};"
               " s.dispatchEvent(new Event('change')); })()")


def test_every_example_shows_with_its_trees_text_and_narration(page):
    titles = page.js("[...document.querySelectorAll('#example option')].map(o => o.textContent)")
    assert titles == [load_race(p).title for p in EXAMPLES]
    for position, title in enumerate(titles):
        choose(page, str(position))
        page.wait_for(f"{text_of('info')}.includes({json.dumps(title)})", 30, f"the example {title!r}")
        page.wait_for(f"{text_of('narration')}.includes('Step 1')", 30, "step 1's narration")
        assert page.js(f"{plotly_traces('tree-ddd')}") > 0 and page.js(f"{plotly_traces('tree-eagle2')}") > 0
        assert page.js(f"{plotly_traces('depth')}") > 0
        for method in ("plain", "eagle2", "ddd"):
            assert page.js(text_of(f"ans-{method}")).strip(), (title, method)
        assert "step 1" in page.js(tree_title("tree-ddd"))
        assert page.js("document.querySelector('#headline .headline') !== null")


def test_step_forward_back_slider_and_play_change_the_step(page):
    choose(page, "0")
    page.wait_for(f"{text_of('narration')}.includes('Step 1')", 30, "step 1")
    text, tree = page.js(text_of("txt-ddd")), page.js(tree_title("tree-ddd"))
    page.js("document.querySelector('#next').click()")
    page.wait_for(f"{tree_title('tree-ddd')}.includes('step 2')", 20, "the DDD tree of step 2")
    assert "Step 2" in page.js(text_of("narration")) and page.js(text_of("txt-ddd")) != text
    assert page.js(tree_title("tree-ddd")) != tree and "step 2" in page.js(tree_title("tree-eagle2"))
    page.js("document.querySelector('#prev').click()")
    page.wait_for(f"{tree_title('tree-ddd')}.includes('step 1 ')", 20, "the DDD tree of step 1 again")
    assert page.js(text_of("txt-ddd")) == text
    last = page.js("Number(document.querySelector('#slider').max)")
    page.js(f"(() => {{ const s = document.querySelector('#slider'); s.value = '{last}';"
            " s.dispatchEvent(new Event('input')); })()")
    page.wait_for(f"{text_of('step-label')}.startsWith('step {last} of')", 20, "the last step")
    assert "done:" in page.js(text_of("cnt-plain"))
    page.js("document.querySelector('#play').click()")  # from the last step, play starts over
    page.wait_for(f"Number(document.querySelector('#slider').value) >= 1 && {text_of('play')}.includes('Pause')", 20,
                  "play to move on")
    page.js("document.querySelector('#play').click()")
    assert "Play" in page.js(text_of("play"))


def test_no_console_error_and_no_request_left_the_page(page):
    page.js("1")  # read what the browser sent meanwhile
    assert page.problems() == []
    assert [url for url in page.requests() if not url.startswith(("file:", "data:", "blob:"))] == []
    choose(page, "0")
    page.wait_for(f"{text_of('narration')}.includes('Step 1')", 30, "the first example")
    shot = page.screenshot(OUT / "static-page.png")
    assert shot.stat().st_size > 10_000


def page_text(html: str) -> str:
    """What a browser shows of the app's HTML: its text, whitespace collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


# Per shown step, the text of every view the app computes for it, read in one go.
READ_STEP = """((at) => { const s = document.querySelector('#slider'); s.value = String(at);
  s.dispatchEvent(new Event('input'));
  const text = (id) => document.getElementById(id).textContent.split(/\\s+/).filter(Boolean).join(' ');
  return {label: text('step-label'), headline: text('headline'), narration: text('narration'),
          counters: COLUMNS.map((m) => text('cnt-' + m)), answers: COLUMNS.map((m) => text('ans-' + m))}; })"""


@pytest.mark.parametrize("position", range(len(EXAMPLES)), ids=[p.stem for p in EXAMPLES])
def test_every_step_shows_the_apps_headline_counters_narration_and_answers(page, position):
    """The page shows what the app's own Python computed, step by step: no view is the browser's own."""
    race = load_race(EXAMPLES[position])
    choose(page, str(position))
    page.wait_for(f"{text_of('info')}.includes({json.dumps(race.title)})", 30, race.title)
    columns = list(race.columns())
    read = READ_STEP.replace("COLUMNS", json.dumps(columns))
    headline = page_text(headline_html(race.traces))
    for index in range(rounds(race)):
        shown = page.js(f"({read})({index})")
        view = step_view(race, index)
        assert shown["label"].startswith(f"step {index} of {rounds(race) - 1}")
        assert shown["headline"] == headline
        assert shown["narration"] == page_text(markdown_html(view.narration)), index
        for method, counters, answer in zip(columns, shown["counters"], shown["answers"]):
            app_answer, app_counters = column_at(race, method, index)
            assert (counters, answer) == (page_text(app_counters), page_text(app_answer)), (index, method)


def test_a_page_saved_by_the_app_plays_its_race_offline(page, tmp_path):
    """"Save as a page": one file, plotly inside, that replays the race from disk with the network off."""
    race = load_race(EXAMPLES[0])
    saved = Path(ExportStore(folder=tmp_path).save(race, "saved", page=True))
    assert saved.suffix == ".html" and 'src="plotly.min.js"' not in saved.read_text(encoding="utf-8")
    page.send("Page.navigate", {"url": saved.as_uri()})
    try:
        page.wait_for(f"{plotly_traces('tree-ddd')} > 0", 60, "the saved page's DDD tree")
        assert "a race saved from the app" in page.js(text_of("intro"))
        assert page.js("document.querySelectorAll('#example option').length") == 1
        page.js("document.querySelector('#next').click()")
        page.wait_for(f"{tree_title('tree-ddd')}.includes('step 2')", 20, "the saved page's step 2")
        assert page.js(text_of("headline")) and "Step 2" in page.js(text_of("narration"))
    finally:
        page.send("Page.navigate", {"url": page.index})
        page.wait_for(f"{plotly_traces('tree-ddd')} > 0", 60, "the static page again")
