"""The page as a visitor sees it with all four columns, Settings (the cost switch on) and the what-if open: no label
or help text wraps to more than four lines at 1440 px, and no figure's label covers its title at 1440 or 400 px.
On a phone the race comes first, then the prompt and Run. Screenshots at 1440 and 400 px go to $DDD_SHOTS (default
out/shots): the race, Settings and the what-if."""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, OUT, Browser, open_on_example, plotly_traces, text_of, upload

ROOT = Path(__file__).resolve().parents[1]
FOUR_METHODS = ROOT / "assets" / "examples" / "maths.json"  # the shipped race with a cost-rule run
SHOTS = Path(os.environ.get("DDD_SHOTS", OUT / "shots"))
MAX_LINES = 4

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

# Every label and help text shown, with the lines it takes: its height over its line height.
WRAPPED = """[...document.querySelectorAll('[data-testid="block-info"], .label-text, .info-text')]
  .filter((e) => e.offsetParent && e.textContent.trim())
  .map((e) => { const s = getComputedStyle(e);
    const line = parseFloat(s.lineHeight) || parseFloat(s.fontSize) * 1.2;
    return [e.textContent.trim().slice(0, 60), Math.round(e.getBoundingClientRect().height / line)]; })"""


# Each figure shown whose label (Gradio's, at its top left) meets its title or a note (a panel's title): [label, text].
# Returns the figures looked at too, so that a page that shows none fails.
LABELS_ON_TITLES = """(() => {
  const shown = [...document.querySelectorAll('.block:has(.js-plotly-plot)')].filter((b) => b.offsetParent)
    .map((b) => [b.querySelector(':scope > [data-testid="block-label"]'), b]).filter(([label]) => label);
  const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const covered = shown.flatMap(([label, b]) => [...b.querySelectorAll('.gtitle, .annotation-text')]
    .filter((t) => meet(label.getBoundingClientRect(), t.getBoundingClientRect()))
    .map((t) => [label.innerText.trim(), t.textContent.slice(0, 50)]));
  return {figures: shown.length, covered};
})()"""


def labels_clear_of_titles(browser: Browser, least: int) -> None:
    found = browser.js(LABELS_ON_TITLES)
    assert found["figures"] >= least and found["covered"] == [], found


def open_accordion(browser: Browser, title: str) -> None:
    browser.js(f"[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith({json.dumps(title)}))"
               "?.click()")


def test_four_columns_settings_and_what_if_wrap_little_and_keep_figure_titles_clear(app_server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        upload(browser, FOUR_METHODS)
        browser.wait_for(f"!!document.querySelector('#ans-cost')?.offsetParent && {text_of('ans-cost')}.length > 20",
                         120, "the fourth column")
        open_accordion(browser, "Settings")
        browser.wait_for("!!document.querySelector('#cost-settings')?.offsetParent", 30, "the cost rule's settings")
        open_accordion(browser, "What if")
        browser.wait_for(f"{plotly_traces('whatif-chart')} > 0", 60, "the what-if chart")
        shown = browser.js(WRAPPED)
        for width in (1440, 400):  # first, so that a failure below can be looked at
            browser.screenshot(SHOTS / f"race-{width}.png", width)
            browser.screenshot(SHOTS / f"settings-{width}.png", width, "#settings")
            browser.screenshot(SHOTS / f"whatif-{width}.png", width, "#whatif")
            labels_clear_of_titles(browser, 5)  # three trees, the depth chart, the what-if's chart
        assert len(shown) > 20, shown  # the run settings, the tree settings, the cost rule's, the what-if's
        assert [s for s in shown if s[1] > MAX_LINES] == []
        assert any(text.startswith("Cost rule: draft call cost") for text, _ in shown)
        browser.js("[...document.querySelectorAll('[role=tab]')].find((t) => t.offsetParent"
                   " && t.innerText.trim() === 'Summary').click()")
        browser.wait_for(f"{plotly_traces('timeline')} > 0", 30, "the timeline")
        for width in (1440, 400):
            browser.screenshot(SHOTS / f"timeline-{width}.png", width, "#timeline")
            labels_clear_of_titles(browser, 1)
    finally:
        browser.close()
    assert all((SHOTS / f"{part}-{w}.png").stat().st_size > 10_000 for part in ("race", "settings", "whatif")
               for w in (1440, 400))


def test_a_phones_first_screen_shows_a_race(app_server, tmp_path):
    """At 400 x 800 the title, the verdict and the first column's counters and text are on the first screen; the
    prompt and Run follow the race inside the second screen, the settings after them."""
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 400, "height": 800, "deviceScaleFactor": 1,
                                                            "mobile": True})
        browser.wait_for("document.querySelector('#race-columns').getBoundingClientRect().top < 600", 10,
                         "the race above the fold")
        top = lambda selector: browser.js(f"document.querySelector({json.dumps(selector)}).getBoundingClientRect().top")
        assert top("#headline") < top("#race-columns") < top("#ans-plain") < 800
        assert top("#ans-plain") < top("#prompt") and top("#ans-plain") < top("#settings")
        bottom = lambda selector: browser.js(f"document.querySelector({json.dumps(selector)}).getBoundingClientRect()"
                                             ".bottom + scrollY")
        assert bottom("#prompt") < top("#run") and bottom("#run") <= 2 * 800, (bottom("#prompt"), bottom("#run"))
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "phone-first-screen.png").write_bytes(base64.b64decode(
            browser.send("Page.captureScreenshot", {"format": "png"})["data"]))
    finally:
        browser.close()
