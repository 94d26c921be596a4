"""Text from a file or a visitor cannot move the page's own words: a bidirectional override shows as its code point
inside an isolate of its own, and combining marks stay a few to a character (components/tokens.py)."""
from __future__ import annotations

import json

import pytest

from components.answer import answer_html
from components.tokens import MAX_MARKS, isolated, tamed
from components.views import race_info
from tests.races import hand_race

OVERRIDE = "\u202eCount to 20 txt.exe"  # reads "exe.txt 02 ot tnuoC" right to left


def test_an_override_shows_as_its_code_point_inside_an_isolate():
    assert isolated(OVERRIDE) == "\u2068⟨U+202E⟩Count to 20 txt.exe\u2069"


def test_a_character_keeps_at_most_a_few_combining_marks():
    assert tamed("a" + "\u0301" * 400 + "b") == "a" + "\u0301" * MAX_MARKS + "b"
    assert tamed("Tiếng Việt") == "Tiếng Việt"  # precomposed and stacked accents as a script writes them


def test_the_race_line_isolates_the_title_and_prompt():
    race = hand_race()
    race.title = OVERRIDE
    for trace in race.traces.values():
        trace.prompt = OVERRIDE
    line = race_info(race)
    assert "\u202e" not in line
    assert f"<b>{isolated(OVERRIDE)}</b> · Prompt: “{isolated(OVERRIDE)}”" in line


def test_an_answer_shows_an_override_as_its_code_point():
    trace = hand_race().traces["plain"]
    trace.steps[1].text = "\u202e the"
    assert "⟨U+202E⟩" in answer_html(trace) and "\u202e" not in answer_html(trace)


# Where each letter of the first "Prompt:" in the race line is drawn, left to right as written or not.
PROMPT_LETTERS = """(() => {
  const walker = document.createTreeWalker(document.querySelector('.race-info'), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf('Prompt:');
    if (at < 0) continue;
    const range = document.createRange();
    return [...'Prompt:'].map((_, k) => { range.setStart(node, at + k); range.setEnd(node, at + k + 1);
                                          return range.getBoundingClientRect().left; });
  }
  return null;
})()"""


@pytest.mark.slow
def test_an_override_in_a_loaded_title_leaves_the_page_labels_in_order(app_server, tmp_path):
    from tests.test_browser import CHROMIUM, Browser, open_on_example, text_of, upload

    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    data = hand_race().to_dict()
    data["title"] = OVERRIDE
    for trace in data["traces"].values():
        trace["prompt"] = OVERRIDE
    path = tmp_path / "override.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    browser = Browser(tmp_path / "profile")
    try:
        open_on_example(browser, app_server.url)
        upload(browser, path)
        browser.wait_for("(document.querySelector('.race-info')?.innerText || '').includes('txt.exe')", 90,
                         "the loaded race")
        lefts = browser.js(PROMPT_LETTERS)
        assert lefts == sorted(lefts) and len(set(lefts)) == len(lefts), lefts
        assert "Could not load" not in browser.js(text_of("message"))
    finally:
        browser.close()
