"""The optional fourth column, the cost rule: raced, shown, saved and loaded like the other three."""
from __future__ import annotations

import json
import time

import pytest

from components import RaceFileError, load_race
from components.runfile import race_from_data
from explorer.sessions import Session
from tests.races import COST_CHECKS, cost_race, hand_race, make_trace, prefill, spec_step
from tests.test_browser import CHROMIUM, Browser, open_on_example, text_of
from tests.tiny import RACE_SETTINGS, race_frames

FOUR = ["plain", "eagle2", "ddd", "cost"]
WITH_COST = [*RACE_SETTINGS[:-1], True]


def test_the_switch_races_four_methods_to_one_greedy_text_and_the_file_round_trips(page):
    session = Session()
    final = race_frames(page, "the cat sat", session, WITH_COST)[-1]
    race = session.race
    assert race.methods == FOUR
    assert len({race.traces[m].text for m in FOUR}) == 1  # greedy: lossless, the cost rule too
    assert all(c.expected is not None for s in race.traces["cost"].steps for c in s.checks)
    assert 'class="step' in final["ans_cost"] and "tokens/s" in final["cnt_cost"]
    assert list(final["summary"]["method"]) == ["Plain", "EAGLE-2", "DDD", "Cost rule"]
    assert final["tree_cost"].data and any(t.meta == "cost-depth" for t in final["depth"].data)
    assert "The cost rule" in final["narration"] and final["race_cost"] is True
    loaded = load_race(final["download"]["value"])  # saved compact and gzipped, then checked field by field
    assert loaded.methods == FOUR and loaded.traces["cost"].text == race.traces["cost"].text
    assert [len(s.checks) for s in loaded.traces["cost"].steps] == [len(s.checks) for s in race.traces["cost"].steps]


def test_a_cost_check_without_what_it_weighed_is_refused():
    step = spec_step(calls=3, limit=6, checks=COST_CHECKS)
    race = hand_race()
    data = json.loads(json.dumps({"format": "ddd-explorer-race", "version": 1, "traces": {
        "plain": race.traces["plain"].to_dict(), "cost": make_trace("cost", [prefill(), step]).to_dict()}}))
    assert race_from_data(data).methods == ["plain", "cost"]
    del data["traces"]["cost"]["steps"][1]["checks"][2]["expected"]
    with pytest.raises(RaceFileError, match=r"checks\[2\] lacks expected: the cost rule records what it weighed"):
        race_from_data(data)


def test_a_three_method_file_after_a_four_method_one_switches_the_fourth_column_off(page, tmp_path):
    four, three = tmp_path / "four.json", tmp_path / "three.json"
    four.write_text(json.dumps(cost_race().to_dict()))
    three.write_text(json.dumps(hand_race().to_dict()))
    session = Session()
    assert page.ui.named(page.viewer.load_file(str(four), True, "verified only", session))["race_cost"] is True
    after = page.ui.named(page.viewer.load_file(str(three), True, "verified only", session))
    assert after["race_cost"] is False  # and its change hides the column, its settings and its tree
    assert all(not part["visible"] for part in page.ui.named(page.viewer.show_cost(after["race_cost"])).values())


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
@pytest.mark.slow
def test_switching_the_fourth_column_on_races_four_methods_in_the_page(app_server, tmp_path):
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        assert not browser.js("!!document.querySelector('#ans-cost')?.offsetParent")  # off: three columns
        browser.js("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Settings'))"
                   "?.click()")
        switch = "document.querySelector('#race-cost input')"
        browser.wait_for(f"!!({switch})", 20, "the cost column's switch")
        browser.js(f"{switch}.click()")
        browser.wait_for("!!document.querySelector('#ans-cost')?.offsetParent", 20, "the fourth column")
        browser.js("""(() => { const t = document.querySelector('#prompt textarea');
            t.value = 'the cat sat'; t.dispatchEvent(new Event('input', {bubbles: true})); })()""")
        time.sleep(0.5)
        browser.js("document.querySelector('#run').click()")
        browser.wait_for(" && ".join(f"{text_of('cnt-' + m)}.includes('finished')" for m in FOUR), 180,
                         "the four columns' race and replay")
        texts = {m: browser.js(text_of(f"ans-{m}")).strip() for m in FOUR}
        assert texts["cost"] and len(set(texts.values())) == 1, texts
    finally:
        browser.close()
