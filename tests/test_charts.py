"""The charts, the answer column and the summary table, on hand-built races with known figures."""
from __future__ import annotations

import pytest

from components.answer import answer_html, counters_html, split_step
from components.charts import PHASE_COLORS, SUMMARY_HEADERS, depth_figure, summary_rows, timeline_figure
from components.tokens import visible
from components.verdict import verdict
from tests.races import by_meta, hand_race, make_trace, plain_trace, prefill, spec_step


def test_depth_figure_depths_checks_threshold_and_cursor():
    race = hand_race()
    fig = depth_figure(race, current=2)
    assert list(by_meta(fig, "ddd-depth")[0].y) == [3, 6]
    assert list(by_meta(fig, "eagle2-depth")[0].y) == [3, 3]
    assert list(by_meta(fig, "stop")[0].y) == [-0.9]
    assert list(by_meta(fig, "go-on")[0].y) == [-0.1, -0.2]
    assert set(by_meta(fig, "threshold")[0].y) == {-0.3}
    assert list(by_meta(fig, "ddd-accepted")[0].y) == [2, 2]
    assert list(by_meta(fig, "eagle2-accepted")[0].y) == [2, 0]
    cursor = [s for s in fig.layout.shapes if s.name == "current"]
    assert len(cursor) == 1 and cursor[0].x0 == 2
    assert "Run or load" in depth_figure(None).layout.annotations[0].text


def test_timeline_adds_up_each_method_and_phase():
    race = hand_race()
    fig = timeline_figure(race)
    total = sum(sum(t.x) for t in fig.data if str(t.meta).endswith("-steps"))
    assert total == pytest.approx(sum(s.ms for tr in race.traces.values() for s in tr.steps) / 1000)
    marks = by_meta(fig, "tokens")[0]
    assert len(marks.x) == sum(len(t.steps) for t in race.traces.values())
    for phase, colour in PHASE_COLORS.items():
        assert by_meta(fig, f"{phase}-total")[0].marker.color == colour
    ddd_end = max(x for x, y in zip(marks.x, marks.y) if y == "DDD")
    assert ddd_end == pytest.approx(sum(s.ms for s in race.traces["ddd"].steps) / 1000)


def test_summary_rows_speedup_and_columns():
    rows = summary_rows(hand_race())
    assert [r[0] for r in rows] == ["Plain", "EAGLE-2", "DDD"]
    assert all(len(r) == len(SUMMARY_HEADERS) for r in rows)
    assert rows[0][4] == "1.00×" and rows[0][7] == "–"
    ddd = verdict(hand_race().traces).standings[2]
    assert rows[2][4].startswith(f"{ddd.speedup:.2f}×")  # the headline's figure, not tokens/s with the prefill


def test_answer_shading_and_current_step():
    step = spec_step()
    assert split_step(step) == [("draft", " the cat"), ("target", " on")]
    trace = make_trace("ddd", [prefill(), step])
    html = answer_html(trace, current=1)
    assert '<span class="tok-draft"> the cat</span><span class="tok-target"> on</span>' in html
    assert 'class="step cur" title="step 1"' in html
    assert "tok-draft" not in answer_html(trace, shade=False)
    assert "tok-draft" not in answer_html(plain_trace())
    assert "&lt;b&gt;" in answer_html(make_trace("plain", [prefill(text="<b>")]))  # escaped
    line = counters_html("ddd", trace.steps, "done")
    for word in ("tokens", "tokens/s", "target forwards", "tau", "elapsed"):
        assert word in line


def test_visible_whitespace():
    assert visible(" a\n\tb") == "␣a↵⇥b"
    assert visible("") == "∅" and visible("\x07") == "\\x07"
