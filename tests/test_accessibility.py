"""The race, the lesson and the static page scanned by axe-core (the established accessibility scanner, run in
the headless browser): no serious or critical violation (contrast at WCAG AA, names for every control, keyboard
reachable, landmarks). axe-core comes from npm (scripts/setup.sh --test puts it in .venv/axe)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from explorer.deploy import export_space
from tests.test_browser import CHROMIUM, Browser, open_on_example, text_of

ROOT = Path(__file__).resolve().parents[1]
AXE = ROOT / ".venv" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")
FIGURES = ("tree-eagle2", "tree-ddd", "depth")  # the race's figures, by elem_id
DRAWN = ", ".join(f"#{f} .js-plotly-plot" for f in FIGURES)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
              pytest.mark.skipif(not AXE.exists(), reason="needs axe-core: bash scripts/setup.sh --test")]

# Each violation: its rule, impact, how many elements, and the first three of them with why.
SCAN = """axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations.map((v) => ({
  id: v.id, impact: v.impact, count: v.nodes.length,
  where: v.nodes.slice(0, 3).map((n) => n.target.join(' ') + ': ' + (n.failureSummary || '').slice(0, 160))})))"""


def blocking(browser: Browser) -> list[dict]:
    browser.js(AXE.read_text(encoding="utf-8") + ";0")
    return [v for v in browser.js(SCAN) if v["impact"] in BLOCKING]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("axe-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def static_space(tmp_path_factory):
    return export_space("static", tmp_path_factory.mktemp("axe-static") / "space")


@pytest.mark.parametrize("name", ["index.html", "lesson.html"])
def test_the_static_page_and_its_lesson_have_no_serious_violation(browser, static_space, name):
    browser.open((static_space / name).as_uri())
    browser.wait_for("document.querySelector('.js-plotly-plot') !== null", 60, f"{name}'s first figure")
    assert blocking(browser) == [], json.dumps(blocking(browser), indent=1)


def test_the_race_has_no_serious_violation(browser, app_server):
    open_on_example(browser, app_server.url)
    # Every figure drawn: an empty plot's placeholder is Gradio's own markup, not the race's.
    browser.wait_for(f"document.querySelectorAll('{DRAWN}').length === {len(FIGURES)}", 60, "the race's figures")
    time.sleep(1.0)  # the figures settle
    found = blocking(browser)
    assert found == [], json.dumps(found, indent=1)


def test_the_apps_lesson_has_no_serious_violation(browser, app_server):
    browser.open(app_server.url + "?chapter=2")
    browser.wait_for(f"{text_of('lesson-text')}.includes('2. ')", 90, "the lesson's chapter 2")
    browser.wait_for("document.querySelectorAll('#lesson-figure .trace').length > 0", 30, "its figure")
    time.sleep(1.0)
    found = blocking(browser)
    assert found == [], json.dumps(found, indent=1)
