"""The static Space's page in a real browser: opened from disk (file://) with the network off, it shows every
shipped example, steps forward and back, plays, reads a race file from disk and refuses bad ones with a
message, all without a console error or a request leaving the page. A screenshot goes to out/static-page.png.
"""
from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest

from components import RaceFileError, load_race
from components.answer import counters_html
from components.verdict import headline_html
from explorer.deploy import export_space
from tests.bad_inputs import FILE_CASES, PAYLOADS, evil_race
from tests.races import cost_race as hand_cost_race
from tests.test_browser import CHROMIUM, INJECTED, OUT, Browser, plotly_traces, text_of, upload
from tests.test_file_checks import freezing_files, wide_pool
from tests.test_impossible_numbers import IMPOSSIBLE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "assets" / "examples").glob("*.json"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

# The page checks a loaded file as the app does (components/runfile.py) but for one thing: whether its settings
# are possible together (a DDD check after its maximum of draft calls); such a file shows as it is.
SHOWN_ANYWAY = {"check-steps-too-deep"}


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
        browser.send("Page.navigate", {"url": (folder / "index.html").as_uri()})
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


def test_a_race_file_from_disk_plays_and_bad_files_are_refused(page, tmp_path):
    race = tmp_path / "mine.json.gz"
    race.write_bytes(gzip.compress(EXAMPLES[0].read_bytes()))
    upload(page, race)
    page.wait_for(f"{text_of('info')}.includes('Loaded file mine.json.gz')", 30, "the loaded file")
    page.wait_for(f"{plotly_traces('tree-ddd')} > 0", 30, "the loaded file's DDD tree")
    page.js("document.querySelector('#next').click()")
    page.wait_for(f"{tree_title('tree-ddd')}.includes('step 2')", 20, "the loaded file's step 2")
    assert "Step 2 — DDD" in page.js(text_of("narration"))
    refused = []
    for name, make, _ in FILE_CASES:
        bad = tmp_path / f"{name}.json"
        bad.write_bytes(make())
        page.js("document.querySelector('#message').hidden = true")
        upload(page, bad)
        page.wait_for(f"!document.querySelector('#message').hidden || {text_of('info')}.includes({json.dumps(bad.name)})",
                      30, f"the page to read {name}")
        if not page.js("document.querySelector('#message').hidden"):
            assert "Could not load that file" in page.js(text_of("message")), name
            refused.append(name)
        page.wait_for(f"{plotly_traces('tree-ddd')} > 0", 30, f"a tree still showing after {name}")
    assert sorted({name for name, _, _ in FILE_CASES} - set(refused)) == sorted(SHOWN_ANYWAY)
    # Script payloads in a valid file stay text.
    evil = tmp_path / "evil.json"
    evil.write_bytes(evil_race())
    upload(page, evil)
    page.wait_for(f"{text_of('info')}.includes('evil.json')", 30, "the payload file")
    shown = page.js(text_of("info"))
    assert any(p in shown for p in PAYLOADS)
    time.sleep(0.5)
    assert page.js("window.__xss") is None and page.js(INJECTED) == []


# The DDD tree as the page holds it: [bands and other shapes, nodes drawn].
TREE_SIZE = ("(() => { const g = document.querySelector('#tree-ddd .js-plotly-plot');"
             " return [g.layout.shapes.length, g.data.reduce((a, t) => a + (t.meta ? t.x.length : 0), 0)]; })()")


def loaded(browser, path: Path) -> None:
    browser.js("document.querySelector('#message').hidden = true")
    upload(browser, path)
    shown = f"{text_of('info')}.includes({json.dumps(path.name)})"
    browser.wait_for(f"{shown} || !document.querySelector('#message').hidden", 30, f"the page to read {path.name}")


@pytest.mark.parametrize("name", ["4096-draft-calls", "4096-deep-chain", "40000-nodes"])
def test_a_file_that_froze_the_app_is_refused_at_once(page, tmp_path, name):
    """More draft calls or nodes than the run's settings make: refused, as the app refuses them."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(freezing_files()[name]))
    started = time.monotonic()
    loaded(page, path)
    assert "Could not load that file" in page.js(text_of("message"))
    assert time.monotonic() - started < 30, name


def test_a_tree_as_wide_as_its_settings_allow_is_drawn_bounded(page, tmp_path):
    """Beam width 32 and 3 draft calls make 2,081 nodes, which the checks let through: the page draws at most
    2,000 of them, as the app does, at once."""
    data = freezing_files()["40000-nodes"]
    data["traces"]["ddd"]["settings"]["beam_width"] = 32
    data["traces"]["ddd"]["steps"][1]["pool"] = wide_pool(2081)
    path = tmp_path / "2081-nodes.json"
    path.write_text(json.dumps(data))
    assert len(load_race(path).traces["ddd"].steps[1].pool) == 2081
    started = time.monotonic()
    loaded(page, path)
    page.wait_for(f"{tree_title('tree-ddd')}.includes('step 1')", 30, "the wide step")
    shapes, nodes = page.js(TREE_SIZE)
    assert shapes <= 33 and 0 < nodes <= 2_002, (shapes, nodes)
    assert time.monotonic() - started < 30


def cost_race() -> dict:
    return json.loads(json.dumps(hand_cost_race().to_dict()))


SHOWN_COLUMNS = "[...document.querySelectorAll('.columns .col')].filter((c) => !c.hidden).length"
SHOWN_TREES = "[...document.querySelectorAll('.pair .col')].filter((c) => !c.hidden).length"


def test_a_race_file_with_a_cost_run_shows_it_as_a_fourth_column(page, tmp_path):
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(cost_race()))
    assert load_race(path).methods == ["plain", "eagle2", "ddd", "cost"]
    loaded(page, path)
    page.wait_for(f"{tree_title('tree-cost')}.includes('step 1')", 30, "the cost rule's tree of step 1")
    assert page.js(SHOWN_COLUMNS) == 4 and page.js(SHOWN_TREES) == 3
    assert page.js(text_of("ans-cost")).strip() and "tokens/s" in page.js(text_of("cnt-cost"))
    assert " the cat" in page.js(text_of("txt-cost"))
    accepted = "document.querySelector('#tree-cost .js-plotly-plot').data.find((t) => t.meta === 'accepted').x.length"
    assert page.js(accepted) == 2  # the accepted path: ' the', ' cat'
    assert page.js("document.querySelector('#depth .js-plotly-plot').data.some((t) => t.meta === 'cost-depth')")
    assert "E = 1.60 accepted tokens in T = 1.53 plain steps" in page.js(text_of("narration"))


def test_a_race_without_a_cost_run_shows_three_columns(page, tmp_path):
    path = tmp_path / "three.json"
    path.write_bytes(EXAMPLES[0].read_bytes())
    loaded(page, path)
    page.wait_for(f"{tree_title('tree-ddd')}.includes('step 1')", 30, "the DDD tree of step 1")
    assert page.js(SHOWN_COLUMNS) == 3 and page.js(SHOWN_TREES) == 2
    choose(page, "0")
    page.wait_for(f"{text_of('narration')}.includes('Step 1')", 30, "the first example")
    assert page.js(SHOWN_COLUMNS) == 3 and page.js(SHOWN_TREES) == 2


def _cost_check(data: dict) -> None:
    data["traces"]["cost"]["steps"][1]["checks"][2]["expected"] = 9.5


def _fifty_times(data: dict) -> None:
    step = data["traces"]["ddd"]["steps"][1]
    step["token_ids"] = step["token_ids"] * 50


@pytest.mark.parametrize("change, words", [
    (_fifty_times, "token_ids holds 150 tokens, but a step that accepted 2 draft tokens emits 3"),
    (lambda d: d["traces"]["cost"].update(prompt="another prompt"), "share one prompt, model, device and precision"),
    (_cost_check, "checks[2].expected is 9.5, but 7 verified draft tokens are expected to give 0 to as many"),
], ids=["tokens-fifty-times", "another-prompt", "cost-expected-past-verified"])
def test_a_file_that_contradicts_itself_is_refused_and_the_page_stays_usable(page, tmp_path, change, words):
    data = cost_race()
    change(data)
    path = tmp_path / "contradicts.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RaceFileError, match=re.escape(words)):  # the app refuses it with the same words
        load_race(path)
    loaded(page, path)
    assert "Could not load that file" in page.js(text_of("message")) and words in page.js(text_of("message"))
    shown = page.js("Number(document.querySelector('#slider').value)")
    page.js("document.querySelector('#next').click()")
    page.wait_for(f"Number(document.querySelector('#slider').value) === {shown + 1}", 20, "the next step")


def test_no_console_error_and_no_request_left_the_page(page):
    page.js("1")  # read what the browser sent meanwhile
    assert page.problems() == []
    assert [url for url in page.requests() if not url.startswith(("file:", "data:", "blob:"))] == []
    choose(page, "0")
    page.wait_for(f"{text_of('narration')}.includes('Step 1')", 30, "the first example")
    shot = page.screenshot(OUT / "static-page.png")
    assert shot.stat().st_size > 10_000


def headline_text(html: str) -> str:
    """The headline as a browser shows its text: the bold line, then the why."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace("&#x27;", "'").split())


@pytest.mark.parametrize("source", [*(p.name for p in EXAMPLES), "cost"])
def test_a_loaded_file_gets_the_apps_headline_and_counters(page, tmp_path, source):
    """The decode speed, the prefill apart, resampled alike: the same verdict word for word, and the same counters."""
    path = tmp_path / f"loaded-{source}.json"
    if source == "cost":
        path.write_text(json.dumps(cost_race()))
    else:
        path.write_bytes((ROOT / "assets" / "examples" / source).read_bytes())
    race = load_race(path)
    loaded(page, path)
    page.wait_for(f"{text_of('info')}.includes({json.dumps(path.name)})", 30, "the loaded file")
    shown = " ".join(page.js(text_of("headline")).split())
    assert shown == headline_text(headline_html(race.traces))
    last = page.js("Number(document.querySelector('#slider').max)")
    page.js(f"(() => {{ const s = document.querySelector('#slider'); s.value = '{last}';"
            " s.dispatchEvent(new Event('input')); })()")
    page.wait_for(f"{text_of('step-label')}.startsWith('step {last} of')", 20, "the last step")
    for method in race.columns():
        app = headline_text(counters_html(method, race.traces[method].steps, ""))
        assert " ".join(page.js(text_of(f"cnt-{method}")).split()).startswith(app), method


@pytest.mark.parametrize("change, words", [(c, w) for _, c, w in IMPOSSIBLE], ids=[n for n, _, _ in IMPOSSIBLE])
def test_a_number_the_file_cannot_hold_is_refused_with_the_apps_words(page, tmp_path, change, words):
    data = cost_race()
    change(data)
    path = tmp_path / "impossible.json"
    path.write_text(json.dumps(data))
    loaded(page, path)
    assert "Could not load that file" in page.js(text_of("message")) and words in page.js(text_of("message"))
