"""A real browser against the running app: headless Chromium driven over the DevTools protocol.

The protocol runs over a pipe (--remote-debugging-pipe: commands on fd 3, replies on fd 4, each message
NUL-terminated JSON), so no driver package is needed. The test loads a recorded example, steps through
it, runs a short race on the tiny model and saves a screenshot to out/screenshot.png.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_inputs import PAYLOADS, changed, evil_race

CHROMIUM = Path("/usr/bin/chromium")
OUT = Path(__file__).resolve().parents[1] / "out"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--window-size=1440,1000"]

TRAMPOLINE = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
              "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at "
                                                   "/usr/bin/chromium (apt-get install -y chromium)")]


class Browser:
    """A minimal DevTools client over the browser's pipe."""

    def __init__(self, user_dir: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on its fd 3 and writes replies on its fd 4: a small trampoline puts our
        # pipe ends there (moved above 10 first, so the two dup2 calls cannot overwrite each other).
        read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
        write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)
        command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={user_dir}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAMPOLINE, str(read_end), str(write_end), *command],
            pass_fds=(read_end, write_end), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(read_end)
        os.close(write_end)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None

    def _read_message(self, timeout: float) -> dict | None:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self._read_message(max(deadline - time.monotonic(), 0.01))
            if reply and reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(f"no reply to {method} within {timeout} s")

    def open(self, url: str) -> None:
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", {"width": 1440, "height": 1000, "deviceScaleFactor": 1,
                                                         "mobile": False})
        self.send("Page.navigate", {"url": url})

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60, what: str = "") -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout} s waiting for {what or expression}")

    def screenshot(self, path: Path, width: int = 1440, element: str | None = None) -> Path:
        """The whole page `width` px wide, or only the element matching the selector `element`."""
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                         "mobile": width < 600})
        time.sleep(0.8)  # let the page re-flow to the new width before measuring its height
        height = int(self.js("Math.ceil(document.documentElement.scrollHeight)") or 1000)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(height, 6000),
                                                         "deviceScaleFactor": 1, "mobile": width < 600})
        time.sleep(0.8)  # let plotly re-lay out to the new viewport
        options: dict = {"format": "png", "captureBeyondViewport": True}
        if element is not None:
            box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(element)}).getBoundingClientRect();"
                          " return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()")
            options["clip"] = dict(zip(("x", "y", "width", "height"), box), scale=1)
        data = self.send("Page.captureScreenshot", options)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


def text_of(elem_id: str) -> str:
    return f"(document.querySelector('#{elem_id}')?.innerText || '')"


def plotly_traces(elem_id: str) -> str:
    return f"document.querySelectorAll('#{elem_id} .js-plotly-plot .scatterlayer .trace').length"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def test_example_step_through_and_race(app_server, browser):
    browser.open(app_server.url)
    # A recorded example is shown at page load, before any model runs.
    browser.wait_for(f"{text_of('ans-ddd')}.trim().length > 0 && !{text_of('ans-ddd')}.includes('no run yet')",
                     90, "the example's DDD answer")
    browser.wait_for(f"{plotly_traces('tree-ddd')} > 0", 60, "the DDD draft tree")
    before = browser.js(text_of("narration"))
    browser.js("document.querySelector('#next').click()")
    browser.wait_for(f"{text_of('narration')} !== {json.dumps(before)} && {text_of('narration')}.includes('Step 2')",
                     30, "the narration of step 2")
    assert browser.js(f"{plotly_traces('tree-eagle2')}") > 0
    assert browser.js(f"{plotly_traces('depth')}") > 0
    browser.screenshot(OUT / "example.png")
    browser.send("Emulation.setDeviceMetricsOverride", {"width": 1440, "height": 1000, "deviceScaleFactor": 1,
                                                        "mobile": False})
    # A short race on the tiny model.
    browser.js("""(() => { const t = document.querySelector('#prompt textarea');
        t.value = 'the cat sat'; t.dispatchEvent(new Event('input', {bubbles: true})); })()""")
    time.sleep(0.5)
    browser.js("document.querySelector('#run').click()")
    info = "(document.querySelector('.race-info')?.innerText || '')"
    browser.wait_for(f"{info}.includes('the cat sat')", 180, "the race to finish")
    # Then the race replays by itself, all three together, and ends on the full answers.
    browser.wait_for(" && ".join(f"{text_of('cnt-' + m)}.includes('finished')" for m in ("plain", "eagle2", "ddd")),
                     120, "the replay to finish")
    browser.wait_for(f"{plotly_traces('tree-ddd')} > 0", 60, "the DDD tree after the run")
    for method in ("plain", "eagle2", "ddd"):
        text = browser.js(text_of(f"ans-{method}")).strip()
        assert text and "waiting" not in text and "no run yet" not in text, (method, text)
    assert "max_new_tokens" in browser.js(text_of("cnt-ddd"))
    shot = browser.screenshot(OUT / "screenshot.png")
    assert shot.stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------------
# In a real browser: script payloads in uploaded files and typed settings show as text, never as elements.
# ---------------------------------------------------------------------------------------------------

# Elements that carry a payload as markup: an attribute naming the marker, or a script or frame holding it.
# Escaped text holding the same words is a text node, so it is not counted.
INJECTED = """[...document.querySelectorAll('*')].filter(e =>
    [...e.attributes].some(a => a.value.includes('__xss')) ||
    (['SCRIPT', 'IFRAME'].includes(e.tagName) && (e.textContent + (e.srcdoc || '')).includes('__xss'))
).map(e => e.outerHTML.slice(0, 120))"""


def upload(browser, path: Path) -> None:
    root = browser.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = browser.send("DOM.querySelector", {"nodeId": root, "selector": "input[type=file]"})["nodeId"]
    browser.send("DOM.setFileInputFiles", {"files": [str(path)], "nodeId": node})


def type_into(browser, field: str, value: str, what: str, timeout: float = 60) -> None:
    """Types into a field until the value holds for a second.

    The accordion that holds the settings mounts its fields when it opens; on a loaded machine a value typed
    just before that is lost with the element it went into, so the value is typed again until it stays.
    """
    typed = json.dumps(value)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        browser.js(f"""(() => {{ const t = {field}; if (!t) return;
            t.value = {typed}; t.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")
        time.sleep(1)
        if browser.js(f"({field})?.value === {typed}"):
            return
    raise AssertionError(f"timed out after {timeout} s typing {what}")


def open_on_example(browser: Browser, url: str) -> None:
    """The page, once its example race shows (DDD's column has text)."""
    browser.open(url)
    browser.wait_for(f"{text_of('ans-ddd')}.trim().length > 0 && !{text_of('ans-ddd')}.includes('no run yet')",
                     90, "the example race")


def test_script_payloads_stay_text_in_the_browser(app_server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        info = "(document.querySelector('.race-info')?.innerText || '')"
        # A file refused for its format: the message quotes the payload as text.
        bad = tmp_path / "evil-format.json"
        bad.write_bytes(changed({"format": PAYLOADS[0]}))
        upload(browser, bad)
        browser.wait_for(f"{text_of('message')}.includes('not a DDD Explorer recorded run')", 60, "the refusal")
        assert PAYLOADS[0] in browser.js(text_of("message"))
        # A valid file whose texts are payloads: shown as text in the info line and the answer column.
        good = tmp_path / "evil-race.json"
        good.write_bytes(evil_race())
        upload(browser, good)
        browser.wait_for(f"{info}.includes('onerror')", 60, "the loaded race")
        shown = browser.js(info)
        for payload in (PAYLOADS[2], PAYLOADS[0], PAYLOADS[3], PAYLOADS[1]):
            assert payload in shown, (payload, shown)
        assert PAYLOADS[4] in browser.js(text_of("ans-plain"))
        # A typed setting: the refusal quotes it as text.
        browser.js("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Settings'))"
                   "?.click()")
        field = ("[...document.querySelectorAll('label')].find(l => l.innerText.includes('DDD: check after calls'))"
                 "?.closest('.block')?.querySelector('textarea, input')")
        browser.wait_for(f"!!({field})", 20, "the check-after-calls field")
        type_into(browser, field, PAYLOADS[0], "the typed setting")
        type_into(browser, "document.querySelector('#prompt textarea')", "the cat sat", "the prompt")
        browser.js("document.querySelector('#run').click()")
        # Generous: on a loaded 2-core machine the refusal once took longer than a minute to show.
        try:
            browser.wait_for(f"{text_of('message')}.includes('check after calls must be')", 150, "the settings refusal")
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}; the message reads {browser.js(text_of('message'))!r}") from None
        assert PAYLOADS[0] in browser.js(text_of("message"))
        time.sleep(1)  # let any toast render
        assert browser.js("window.__xss") is None
        assert browser.js(INJECTED) == []
    finally:
        browser.close()
