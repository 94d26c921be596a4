"""The lesson (components/lesson.py) reads its numbers and answers from the shipped race it is built from: change
the race's recorded numbers and the sentences and answers change with them."""
from __future__ import annotations

import copy
import re
import statistics
from pathlib import Path

import pytest

from components import load_race
from components.lesson import LESSON_METHODS, TITLES, build_lesson, lesson_race
from components.lesson_page import lesson_html, static_lesson
from ddd.bench.projection import BAND
from ddd.costs import StepCosts
from tests.bad_inputs import PAYLOADS

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "assets" / "examples").glob("*.json"))
# A pair's costs on a GPU as the app passes them in (ddd.bench.projection.zerogpu_costs).
GPU = StepCosts(draft_cost=0.08, verify_base=0.14, verify_cost=0.0)


@pytest.fixture(scope="module")
def shipped():
    found = lesson_race((p.stem, load_race(p)) for p in EXAMPLES)
    assert found is not None, f"no shipped example races {', '.join(LESSON_METHODS)}"
    return found


def timed(race, method, factor):
    """`race` with every step of `method` taking `factor` times as long."""
    race = copy.deepcopy(race)
    for step in race.traces[method].steps:
        step.draft_ms, step.verify_ms, step.other_ms = (t * factor for t in (step.draft_ms, step.verify_ms,
                                                                               step.other_ms))
    return race


def test_seven_chapters_in_order_each_with_a_figure_and_a_question(shipped):
    lesson = build_lesson(shipped[1], shipped[0], GPU)
    assert [c.title for c in lesson.chapters] == list(TITLES)
    for chapter in lesson.chapters:
        assert chapter.figure.data, chapter.title
        assert 0 <= chapter.question.answer < len(chapter.question.choices) and chapter.question.why
    assert lesson.chapters[-1].try_it.query().startswith(f"?example={shipped[0]}&threshold=")


def test_plain_decodings_numbers_come_from_its_steps(shipped):
    key, race = shipped
    slower = timed(race, "plain", 3.0)
    for run in (race, slower):
        median = statistics.median(s.ms for s in run.traces["plain"].steps if not s.prefill)
        chapter = build_lesson(run, key, GPU).chapters[0]
        assert f"a median of {median:.0f} ms each" in chapter.text and f"a median of {median:.0f} ms each" in chapter.question.why


@pytest.mark.parametrize("factor, answer", [(0.2, "EAGLE's static tree"), (5.0, "EAGLE-2's smaller tree")])
def test_which_tree_was_faster_is_read_from_the_race(shipped, factor, answer):
    key, race = shipped
    question = build_lesson(timed(race, "eagle", factor), key, GPU).chapters[2].question
    assert question.choices[question.answer] == answer


@pytest.mark.parametrize("factor, answer", [(0.1, "DDD was faster than EAGLE-2"), (10.0, "EAGLE-2 was faster than DDD")])
def test_the_verdict_question_follows_the_measured_times(shipped, factor, answer):
    key, race = shipped
    question = build_lesson(timed(race, "ddd", factor), key, GPU).chapters[6].question
    assert question.choices[question.answer] == answer


@pytest.mark.parametrize("stop", [True, False])
def test_ddds_question_asks_about_a_recorded_check_and_answers_with_it(shipped, stop):
    key, race = shipped
    race = copy.deepcopy(race)
    question = build_lesson(race, key, GPU).chapters[4].question
    step_index = int(re.search(r"In step (\d+)", question.ask).group(1))
    step = next(s for s in race.traces["ddd"].steps if s.index == step_index)
    threshold = float(race.traces["ddd"].settings["threshold"])
    check = step.checks[0]
    check.confidence, check.stop = (threshold - 0.37, True) if stop else (threshold + 0.01, False)
    changed = build_lesson(race, key, GPU).chapters[4].question
    assert f"H = {check.confidence:.2f}" in changed.ask
    assert changed.choices[changed.answer].startswith("No" if stop else "Yes")


def test_every_text_from_the_race_is_escaped_on_the_page(shipped):
    key, race = shipped
    race = copy.deepcopy(race)
    for trace in race.traces.values():
        trace.prompt = PAYLOADS[0]
        for step in trace.steps:
            step.bonus_text = PAYLOADS[1]
            for node in step.pool:
                node.text = PAYLOADS[3]
    race.title = PAYLOADS[2]
    page = lesson_html(build_lesson(race, key, GPU), plotly_src="plotly.min.js")
    for payload in PAYLOADS:
        assert payload not in page
    assert not re.search(r"<(img|svg|iframe)\b|href=.?javascript", page)


def test_a_reply_says_whether_the_choice_was_right_then_why(shipped):
    question = build_lesson(shipped[1], shipped[0], GPU).chapters[1].question
    wrong = next(i for i in range(len(question.choices)) if i != question.answer)
    assert question.reply(question.answer).startswith("**Right.**")
    assert question.reply(wrong).startswith("**Not quite") and question.why in question.reply(wrong)


def test_the_cost_rule_chapter_prices_its_tree_on_a_gpu_at_the_costs_it_is_given(shipped):
    text = build_lesson(shipped[1], shipped[0], GPU).chapters[5].text
    assert "on ZeroGPU's GPU as the project's GPU projection prices this pair (a draft call 0.08, a tree forward " \
           f"0.14 more than a one-token one, each verified token 0: projected, each ±{BAND:.0%}, not measured)" in text
    assert "ZeroGPU" not in build_lesson(shipped[1], shipped[0], None).chapters[5].text


def test_only_the_apps_lesson_points_to_its_what_if_panel(shipped):
    try_it = {whatif: build_lesson(shipped[1], shipped[0], GPU, whatif).chapters[-1].try_it.text
              for whatif in (True, False)}
    assert "(the app's What if panel, under its race)" in try_it[True]
    assert "What if" not in try_it[False] and "What if" not in static_lesson([shipped], "plotly.min.js", lambda _: GPU)


class _Link:
    def __init__(self, **query):
        self.query_params = query


@pytest.mark.parametrize("asked", ["0", "8", "-1", "abc", "[x](javascript:alert(1))"])
def test_a_link_to_a_chapter_the_lesson_lacks_says_so_and_opens_the_first(page, asked):
    out = page.ui.named(page.lesson.from_link(_Link(chapter=asked)))
    assert out["lesson_chapter"] == 1
    assert "This lesson has no chapter" in out["lesson_title"] and "here is chapter 1" in out["lesson_title"]
    assert "](" not in out["lesson_title"].split("## ")[0].replace("\\]\\(", "")  # the asked text is no link


def test_a_link_to_a_chapter_opens_it_without_a_note(page):
    out = page.ui.named(page.lesson.from_link(_Link(chapter="4")))
    assert out["lesson_chapter"] == 4 and "no chapter" not in out["lesson_title"]


def test_every_start_of_the_app_serves_the_same_hand_out_file(llama, llama_head):
    """The hand-out lies in a folder named by its content: a restart adds no 5 MB folder to the disk."""
    from tests.conftest import make_page

    files = [page.ui.named(page.lesson.open(2))["lesson_file"] for page in (make_page(llama, llama_head),
                                                                             make_page(llama, llama_head))]
    assert files[0] == files[1] and Path(files[0]).read_text(encoding="utf-8").startswith("<!")
