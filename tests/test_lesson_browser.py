"""The lesson in headless Chromium, in the app and in the static page opened from disk with the network off: every
chapter's figure draws, its question takes an answer and shows why, chapter links work, no console error.
With DDD_LESSON_SHOTS set to a folder, each chapter is saved there at 1440 and 400 px wide."""
from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from components.lesson import TITLES
from components.lesson_page import PRESENT_TYPE_PX
from components.static_page import write_static_page
from ddd.bench.projection import zerogpu_costs
from tests.test_browser import CHROMIUM, INJECTED, OUT, text_of
from tests.test_static_page import EXAMPLES, RecordingBrowser

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

SHOTS = os.environ.get("DDD_LESSON_SHOTS")
WIDTHS = (1440, 400)


def shoot(browser: RecordingBrowser, name: str) -> None:
    """The page at each width, whole, into SHOTS (when set)."""
    if not SHOTS:
        return
    for width in WIDTHS:
        browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                            "mobile": width < 600})
        time.sleep(1.5)
        height = int(browser.js("Math.ceil(document.documentElement.scrollHeight)") or 1000)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(height, 8000),
                                                            "deviceScaleFactor": 1, "mobile": width < 600})
        time.sleep(1.5)
        data = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        (Path(SHOTS) / f"{name}-{width}.png").write_bytes(base64.b64decode(data))
    browser.send("Emulation.setDeviceMetricsOverride", {"width": 1440, "height": 1000, "deviceScaleFactor": 1,
                                                        "mobile": False})


def recording(path: Path) -> RecordingBrowser:
    browser = RecordingBrowser(path)
    browser.open("about:blank")
    for domain in ("Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable")
    return browser


def test_the_static_pages_lesson_from_disk(tmp_path):
    folder = tmp_path / "static"
    write_static_page(folder, EXAMPLES, zerogpu_costs)
    browser = recording(tmp_path / "profile")
    try:
        browser.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                          "uploadThroughput": -1})
        browser.send("Page.navigate", {"url": (folder / "index.html").as_uri()})
        browser.wait_for("!!document.querySelector('#lesson-link')", 60, "the static page's link to the lesson")
        browser.js("document.querySelector('#lesson-link').click()")
        browser.wait_for(f"{text_of('chapter-title')}.startsWith('1. ')", 60, "the lesson's first chapter")
        for number, title in enumerate(TITLES, 1):
            browser.js(f"document.querySelector('#nav-chapter-{number}').click()")
            browser.wait_for(f"{text_of('chapter-title')} === {json.dumps(f'{number}. {title}')}", 20, f"chapter {number}")
            assert browser.js("location.hash") == f"#chapter-{number}"
            browser.wait_for("document.querySelectorAll('#chapter-figure .trace').length > 0", 20, "the figure")
            assert browser.js("document.querySelector('#question-reply').hidden")
            browser.js("document.querySelector('#question-choices input').click()")
            browser.wait_for("!document.querySelector('#question-reply').hidden", 10, "the reply")
            assert browser.js(text_of("question-reply")).startswith(("Right.", "Not quite"))
            shoot(browser, f"static-{number}")
        assert browser.js("!document.querySelector('#try-it').hidden")
        assert "What if" not in browser.js(text_of("try-it"))  # the app's panel: not on this page
        # A chapter's own link opens it.
        browser.send("Page.navigate", {"url": (folder / "lesson.html").as_uri() + "#chapter-4"})
        browser.wait_for(f"{text_of('chapter-title')}.startsWith('4. ')", 20, "chapter 4 by its link")
        assert browser.js(INJECTED) == []
        assert browser.problems() == []
        assert all(url.startswith(("file://", "data:", "blob:")) for url in browser.requests())
    finally:
        browser.close()


def test_the_apps_lesson_panel(app_server, tmp_path):
    browser = recording(tmp_path / "profile")
    try:
        # The first screen's button opens the lesson at chapter 1; Next walks the others.
        browser.send("Page.navigate", {"url": app_server.url})
        browser.wait_for("!!document.querySelector('#lesson-open')", 90, "the lesson's button")
        browser.js("document.querySelector('#lesson-open').click()")
        browser.wait_for(f"{text_of('lesson-text')}.includes('1. Why plain decoding is slow')", 60, "chapter 1")
        for number in range(1, len(TITLES) + 1):
            if number > 1:
                browser.js("document.querySelector('#lesson-next').click()")
                browser.wait_for(f"{text_of('lesson-text')}.includes({json.dumps(f'{number}. {TITLES[number - 1]}')})",
                                 30, f"chapter {number}")
            browser.wait_for("document.querySelectorAll('#lesson-figure .trace').length > 0", 30, "the figure")
            browser.wait_for("document.querySelectorAll('#lesson-answer input[type=radio]').length > 1", 30, "choices")
            browser.js("document.querySelector('#lesson-answer input[type=radio]').click()")
            browser.wait_for(f"/^(Right|Not quite)/.test({text_of('lesson-reply')}.trim())", 30, "the reply")
            shoot(browser, f"app-{number}")
        link = browser.js("document.querySelector('#lesson-try a')?.getAttribute('href') || ''")
        assert link.startswith("?example=") and "&threshold=" in link
        # The hand-out: one file that draws its figures from disk with the network off.
        downloads = tmp_path / "downloads"
        browser.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}, session=False)
        browser.js("document.querySelector('#lesson-file').click()")
        handout = downloads / "ddd-explorer-lesson.html"
        deadline = time.monotonic() + 60
        while not handout.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert handout.exists(), sorted(p.name for p in downloads.glob("*"))
        # Leave the app before the network goes: its open connection would otherwise fail while the page still runs.
        browser.send("Page.navigate", {"url": "about:blank"})
        browser.wait_for("document.URL === 'about:blank'", 30, "a blank page")
        browser.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                          "uploadThroughput": -1})
        browser.send("Page.navigate", {"url": handout.as_uri() + "#chapter-6"})
        browser.wait_for(f"{text_of('chapter-title')}.startsWith('6. ')", 30, "the hand-out's chapter 6")
        browser.wait_for("document.querySelectorAll('#chapter-figure .trace').length > 0", 30, "its figure")
        # A malformed link opens chapter 1 and says so (decodeURIComponent would throw on it).
        for broken in ("#%", "#%E0%A4%A", "#chapter-9"):
            browser.send("Page.navigate", {"url": handout.as_uri() + broken})
            browser.wait_for(f"{text_of('chapter-title')}.startsWith('1. ')", 30, f"chapter 1 for {broken}")
            browser.wait_for(f"{text_of('link-note')}.includes('no chapter called')", 30, f"the note for {broken}")
        browser.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1,
                                                          "uploadThroughput": -1})
        # A chapter's link opens the lesson there.
        browser.send("Page.navigate", {"url": app_server.url + "?chapter=4"})
        browser.wait_for(f"{text_of('lesson-text')}.includes('4. EAGLE-2')", 90, "chapter 4 by its link")
        # The last chapter's link: its example shown, its prompt and DDD's threshold filled in.
        browser.send("Page.navigate", {"url": app_server.url + link})
        prompt = "document.querySelector('#prompt textarea')?.value || ''"
        browser.wait_for(f"({prompt}).includes('17 * 24')", 90, "the example's prompt")
        threshold = link.split("threshold=")[1]
        browser.js("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Settings'))"
                   "?.click()")
        field = ("[...document.querySelectorAll('label')].find(l => l.innerText.includes('threshold on H'))"
                 "?.closest('.block')?.querySelector('input[type=number]')")
        browser.wait_for(f"Number(({field})?.value) === {float(threshold)}", 30, "the threshold")
        assert browser.js(INJECTED) == []
        # Leaving a page aborts its pending requests: Gradio's client logs that as an AbortError or "Connection errored
        # out" (its event stream cut by the navigation), which is no fault of the page.
        left = ("favicon", "AbortError", "Connection errored out")
        assert [p for p in browser.problems() if not any(word in p for word in left)] == []
    finally:
        browser.close()


# The size of every piece of text a chapter's figure shows (tick labels, axis titles, legends, subplot titles, notes),
# as the browser computed it.
FIGURE_TYPE = """[...document.querySelectorAll('#chapter-figure svg text')]
  .filter((t) => t.textContent.trim() && t.getBoundingClientRect().width > 0)
  .map((t) => [parseFloat(getComputedStyle(t).fontSize), t.textContent.slice(0, 30)])"""
A4_WIDTH_PX, A4_HEIGHT_PX = 703, 1031  # A4 less 12 mm margins: 186 x 273 mm


def test_presenting_on_a_projector_and_printing_the_hand_out(tmp_path):
    """Present: one chapter a 1920x1080 screen, large type, its figure first with type of at least
    PRESENT_TYPE_PX, the answer only on Space and then beside the chapter's first lines, arrows between chapters,
    Esc back. Print: every chapter on a page of its own with its figure, then the answers on one more page (a PDF,
    saved to out/lesson-handout.pdf with a screenshot of the presenter view beside it)."""
    folder = tmp_path / "static"
    write_static_page(folder, EXAMPLES, zerogpu_costs)
    browser = recording(tmp_path / "profile")
    try:
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 1920, "height": 1080, "deviceScaleFactor": 1,
                                                            "mobile": False})
        browser.send("Page.navigate", {"url": (folder / "lesson.html").as_uri()})
        browser.wait_for("document.querySelectorAll('#chapter-figure .trace').length > 0", 60, "chapter 1's figure")
        browser.js("document.querySelector('#present').click()")
        browser.wait_for("document.body.classList.contains('presenting')", 10, "the presenter view")
        box = lambda i: f"document.querySelector('#{i}').getBoundingClientRect()"
        title, figure, question, text, side, answer = map(box, ("chapter-title", "chapter-figure", "question",
                                                                 "chapter-text", "side", "presenter-answer"))
        assert browser.js(f"{title}.top < {figure}.top && {figure}.top < {question}.top")  # the figure first
        assert browser.js("parseFloat(getComputedStyle(document.querySelector('#chapter-text')).fontSize)") >= 22
        assert browser.js("!document.querySelector('nav').offsetParent")
        key = lambda name, code: browser.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": name, "code": code})
        for number in range(1, len(TITLES) + 1):
            browser.wait_for(f"{text_of('chapter-title')}.startsWith('{number}. ')", 10, f"chapter {number}")
            browser.wait_for("document.querySelectorAll('#chapter-figure .trace').length > 0", 20, "its figure")
            assert browser.js(f"{figure}.bottom") <= 1080
            sizes = browser.js(FIGURE_TYPE)
            assert len(sizes) > 10 and min(sizes)[0] >= PRESENT_TYPE_PX, (number, min(sizes))
            assert browser.js("document.querySelector('#presenter-answer').hidden")  # each chapter's answer waits
            key(" ", "Space")
            browser.wait_for("!document.querySelector('#presenter-answer').hidden", 10, "the answer on Space")
            assert browser.js(text_of("presenter-answer")).startswith("Answer: ")
            # The answer shows whole, and the chapter's first lines stay where they were.
            assert 0 <= browser.js(f"{answer}.top") and browser.js(f"{answer}.bottom") <= 1080, number
            assert browser.js(f"{side}.top <= {text}.top && scrollY === 0"
                              " && document.querySelector('#side').scrollTop === 0"), number
            if number == 1:
                (OUT / "lesson-present-1920.png").parent.mkdir(parents=True, exist_ok=True)
                (OUT / "lesson-present-1920.png").write_bytes(base64.b64decode(
                    browser.send("Page.captureScreenshot", {"format": "png"})["data"]))
            key("ArrowRight", "ArrowRight")
        key("ArrowLeft", "ArrowLeft")
        browser.wait_for(f"{text_of('chapter-title')}.startsWith('{len(TITLES) - 1}. ')", 10, "the left arrow")
        key("Escape", "Escape")
        browser.wait_for("!document.body.classList.contains('presenting')", 10, "Esc to leave")
        assert browser.js("preparePrint()") == len(TITLES) + 1
        browser.send("Emulation.setEmulatedMedia", {"media": "print"})
        browser.send("Emulation.setDeviceMetricsOverride", {"width": A4_WIDTH_PX, "height": A4_HEIGHT_PX,
                                                            "deviceScaleFactor": 1, "mobile": False})
        # Laid out as wide as the paper, every chapter and the answers fit a page each.
        heights = browser.js("[...document.querySelectorAll('.print-chapter')].map((s) => s.scrollHeight)")
        assert len(heights) == len(TITLES) + 1 and max(heights) <= A4_HEIGHT_PX, heights
        pdf = base64.b64decode(browser.send("Page.printToPDF", {"printBackground": True, "preferCSSPageSize": True},
                                            timeout=120)["data"])
        (OUT / "lesson-handout.pdf").write_bytes(pdf)
        pages = pdf.count(b"/Type /Page") - pdf.count(b"/Type /Pages")
        assert pages == len(TITLES) + 1, pages  # a page a chapter, then the answers
        assert browser.js("document.querySelectorAll('#print-view .print-figure .main-svg').length") >= len(TITLES)
        assert browser.problems() == []
    finally:
        browser.close()
