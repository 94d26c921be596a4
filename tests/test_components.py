"""Whole races on screen, built from traces alone: the replay clock, the About tab, a race recorded on the
tiny model and every shipped example, each at every step."""
from __future__ import annotations

from pathlib import Path

import pytest

from components import load_race
from components.about import about_markdown, cost_model_rows
from components.replay import duration, frame_times, steps_done
from explorer.examples import EXAMPLE_RUNS
from tests.races import hand_race
from tests.tiny import record_tiny_race, render_everything

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "assets" / "examples").glob("*.json"))


def test_replay_clock():
    race = hand_race()
    total = duration(race)
    assert total == pytest.approx(max(sum(s.ms for s in t.steps) for t in race.traces.values()) / 1000)
    times = frame_times(race, fps=10, speed=1)
    assert times[0] == 0 and times[-1] == pytest.approx(total) and times == sorted(times)
    assert steps_done(race, "plain", 0) == 0 and steps_done(race, "plain", total) == 7
    assert steps_done(race, "ddd", 0.121) == 1  # the 120 ms prefill is done


def test_about_fills_in_the_cost_model():
    race = hand_race()
    rows = {r["method"]: r for r in cost_model_rows(race)}
    ddd = race.summary("ddd")
    assert rows["DDD"]["ms_per_token"] == pytest.approx(
        (ddd["draft_ms_per_step"] + ddd["verify_ms_per_step"]) / ddd["tau"])
    text = about_markdown(race)
    assert "2409.00142" in text and "2406.16858" in text and "(draft time + verify time) / tau" in text
    assert f"{rows['DDD']['ms_per_token']:.1f}" in text
    assert "Run or load" in about_markdown(None)


@pytest.fixture(scope="module")
def tiny_race(llama, llama_head):
    return record_tiny_race(llama, llama_head, "the cat sat")


def test_recorded_tiny_race_renders_every_step(tiny_race, tmp_path):
    back = load_race(tiny_race.save(tmp_path / "tiny.json", compact=True))
    assert render_everything(back) == back.decode_steps() > 1
    for method in ("eagle2", "ddd"):
        for a, b in zip(tiny_race.traces[method].steps, back.traces[method].steps):
            assert a.accepted_path == b.accepted_path and a.draft_calls == b.draft_calls
            kept = {n.index for n in a.pool if n.status != "pruned"}
            assert kept <= {n.index for n in b.pool}


@pytest.mark.skipif(not EXAMPLES, reason="no recorded examples in assets/examples yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_shipped_example_replays_without_a_model(path):
    race = load_race(path)
    raced = next(e.methods for e in EXAMPLE_RUNS if e.stem == path.stem)
    assert sorted(race.methods) == sorted(raced) and race.title
    assert render_everything(race) > 1
    assert race.traces["plain"].text == race.traces["ddd"].text or race.traces["ddd"].sampling.get("temperature")


@pytest.mark.skipif(not EXAMPLES, reason="no recorded examples in assets/examples yet")
def test_a_shipped_example_shows_ddd_drafting_deeper_than_eagle2():
    deeper = 0
    for path in EXAMPLES:
        race = load_race(path)
        fixed = race.traces["eagle2"].settings["draft_calls"]
        deeper += sum(s.draft_calls > fixed for s in race.traces["ddd"].steps if not s.prefill)
    assert deeper > 0
