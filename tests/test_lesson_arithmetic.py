"""The lesson's arithmetic, as a student with a calculator would check it: every number a chapter states agrees with
the race it reads, with the chapter's own other numbers, and with the other chapters (sums, medians, ratios,
counts); and the lesson's race was recorded with steady plain forwards (explorer/examples.py, STEADY)."""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest

from components import load_race
from components.lesson import build_lesson
from components.verdict import verdict
from ddd.bench.projection import zerogpu_costs
from ddd.tree import pool_size
from explorer.examples import STEADY, spread

ROOT = Path(__file__).resolve().parents[1]
RACE = load_race(ROOT / "assets" / "examples" / "maths.json")
LESSON = build_lesson(RACE, "maths", zerogpu_costs(RACE.traces["cost"]))
PLAIN = [s for s in RACE.traces["plain"].steps if not s.prefill]


def chapter(number: int) -> str:
    c = LESSON.chapters[number - 1]
    return "\n".join([c.text, c.question.ask, " ".join(c.question.choices), c.question.why])


def number(pattern: str, text: str, group: int = 1) -> float:
    found = re.search(pattern, text)
    assert found, (pattern, text[:400])
    return float(found.group(group).replace(",", ""))


def test_the_lesson_race_was_recorded_with_steady_plain_forwards():
    assert spread(RACE) <= STEADY, sorted(s.ms for s in PLAIN)


def test_chapter_1_forwards_tokens_time_and_median():
    text = chapter(1)
    times = [s.ms for s in PLAIN]
    forwards = number(r"in (\d+) more forwards", text)
    assert forwards == len(PLAIN) == number(r"wrote (\d+) more tokens", text)
    assert number(r"a median of (\d+) ms each", text) == round(statistics.median(times))
    clock = number(r"\(([\d.]+) s on the clock", text)
    assert clock == round(sum(times) / 1000, 1) == number(r"Together they took ([\d.]+) s", text)
    # Steady forwards: the clock is the count times the median, give or take the accepted spread.
    assert clock == pytest.approx(forwards * statistics.median(times) / 1000, rel=STEADY - 1)
    answer = LESSON.chapters[0].question
    assert answer.choices[answer.answer] == str(len(PLAIN))


def test_chapter_2_the_step_adds_its_accepted_tokens_and_the_bonus():
    text = chapter(2)
    step = int(number(r"In step (\d+)", text))
    shown = RACE.traces["eagle2"].steps[step]
    assert number(r"accepted (\d+) draft tokens", text) == shown.accepted
    question = LESSON.chapters[1].question
    assert question.choices[question.answer] == str(shown.accepted + 1) == str(len(shown.token_ids))
    total = sum(len(s.token_ids) for s in RACE.traces["eagle2"].steps)
    assert number(r"token for token \((\d+) tokens\)", text) == total == sum(len(s.token_ids) for s in
                                                                              RACE.traces["plain"].steps)


def test_chapter_3_tau_and_the_trees_sizes():
    text = chapter(3)
    per_level = [int(n) for n in re.search(r"\(([\d, ]+) per level\)", text).group(1).split(", ")]
    candidates = number(r"(\d+) candidates on", text)
    assert sum(per_level) == candidates and number(r"forward over (\d+) tokens", text) == candidates + 1
    for method, pattern in (("eagle", r"EAGLE made ([\d.]+) tokens per forward"), ("eagle2", r"against EAGLE-2's ([\d.]+)")):
        steps = [s for s in RACE.traces[method].steps if not s.prefill]
        assert number(pattern, text) == round(sum(len(s.token_ids) for s in steps) / len(steps), 2), method
    eagle, eagle2 = number(r"EAGLE decoded ([\d.]+) tokens/s", text), number(r"EAGLE-2 ([\d.]+) \(", text)
    assert number(r"speed over EAGLE's is ([\d.]+)", text) == pytest.approx(eagle2 / eagle, abs=0.02)


def test_chapter_4_the_budget_and_the_pool():
    text = chapter(4)
    step = RACE.traces["eagle2"].steps[int(number(r"In step (\d+) \(the same step", text))]
    width = RACE.traces["eagle2"].settings["beam_width"]  # a saved race keeps the verified and best dropped nodes
    assert number(r"pool held (\d+) candidates", text) == pool_size(width, step.draft_calls) - 1
    budget = number(r"(\d+) tokens with the root", text)
    assert budget == RACE.traces["eagle2"].settings["total_tokens"]
    question = LESSON.chapters[3].question
    assert question.choices[question.answer] == str(int(budget) - 1)
    assert number(r"kept guess had path probability ([\d.]+)", text) >= number(r"dropped one (\d+\.\d+)", text)


def test_chapter_5_depths_add_up_to_ddds_steps_and_the_threshold_reads_as_a_share():
    text = chapter(5)
    counted = [int(n) for _, n in re.findall(r"(\d+) levels? in (\d+) steps?", text)]
    assert sum(counted) == len([s for s in RACE.traces["ddd"].steps if not s.prefill])
    threshold = number(r"threshold\*\* \((-[\d.]+) here", text)
    assert number(r"less than (\d+)% of the draft", text) == round(100 * math.exp(threshold))


def test_chapter_6_the_rates_are_the_ratios_they_say_and_t_is_the_stated_costs():
    text = chapter(6)
    expected, time = number(r"expects E = ([\d.]+)", text), number(r"in T = ([\d.]+) plain steps\. One", text)
    gain, time_gain = number(r"add dE = (-?[\d.]+)", text), number(r"for dT = (-?[\d.]+) steps", text)
    rate = number(r"\(E \+ 1\) / T = ([\d.]+) tokens per plain step now", text)
    assert rate == pytest.approx((expected + 1) / time, abs=0.01)
    if time_gain > 0:
        assert number(r"= (-?[\d.]+) [>≤] ", text) == pytest.approx(gain / time_gain, rel=0.05)
    else:
        deeper = number(r"\(E \+ dE \+ 1\) / \(T \+ dT\) = ([\d.]+)", text)
        assert deeper == pytest.approx((expected + gain + 1) / (time + time_gain), abs=0.01)
    # T from the costs the chapter states: 1 + calls x draft + base + (verified - 1) x per token.
    draft, base, per_token = (number(p, text) for p in (r"1 for the target's forward, ([\d.]+) per draft call",
                                                        r"verified ([\d.]+) for a tree forward",
                                                        r"plus ([\d.]+) per extra verified"))
    calls, verified = number(r"After (\d+) draft calls? of step", text), number(r"best tree verified (\d+) token", text)
    stated = number(r"tree verified \d+ tokens?: T = ([\d.]+) plain steps", text)
    assert stated == pytest.approx(1 + calls * draft + base + (verified - 1) * per_token, abs=0.011)
    assert stated == pytest.approx(time, abs=0.011)  # the text's T is the question's


def test_chapter_7_the_spread_and_the_verdict_are_the_races():
    text = chapter(7)
    times = sorted(s.ms for s in PLAIN)
    low, high = number(r"took from (\d+) to", text), number(r"took from \d+ to (\d+) ms", text)
    assert (low, high) == (round(times[0]), round(times[-1]))
    assert number(r"\(median (\d+)\)", text) == round(statistics.median(times)) == number(
        r"a median of (\d+) ms each", chapter(1))  # the same forwards, the same median, in both chapters
    said = verdict(RACE.traces)
    for label, ratio in re.findall(r"(EAGLE-2|DDD) ([\d.]+)× plain", LESSON.chapters[6].question.ask):
        assert f"{label} {ratio}× plain" in said.headline.replace("\\", "")
