"""The what-if panel in headless Chromium: on the example race the page opens with, moving DDD's threshold
redraws the replay (tests/test_browser.py's DevTools client; no model runs)."""
from __future__ import annotations

import json

import pytest

from tests.test_browser import CHROMIUM, Browser, open_on_example, text_of

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

CHART = "document.querySelector('#whatif-chart .js-plotly-plot')"
# The replay's depth markers, as the browser holds them: (legend name, step depths) per trace.
DEPTHS = f"JSON.stringify(({CHART}?.data || []).filter(t => /-depth/.test(t.meta)).map(t => [t.name, t.y]))"
SLIDER = "document.querySelector('#whatif-threshold input[type=range]')"


def test_moving_the_threshold_redraws_the_replay(app_server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        browser.js("document.querySelector('#whatif button, #whatif .label-wrap').click()")
        browser.wait_for(f"{DEPTHS}.includes('DDD at threshold')", 60, "the what-if chart")
        before = json.loads(browser.js(DEPTHS))
        assert "decode tokens/s measured" in browser.js(text_of("whatif-note"))
        # Threshold 0 stops DDD at its first check in every step: H, a log probability, is below 0.
        browser.js(f"""(() => {{ const s = {SLIDER}; s.value = '0';
            s.dispatchEvent(new Event('input', {{bubbles: true}}));
            s.dispatchEvent(new Event('change', {{bubbles: true}})); }})()""")
        browser.wait_for(f"{DEPTHS}.includes('DDD at threshold 0,')", 30, "the replay at threshold 0")
        assert json.loads(browser.js(DEPTHS)) != before
    finally:
        browser.close()
