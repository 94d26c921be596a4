"""Race files mutated at random (Hypothesis), from valid recorded races: each is refused with one sentence naming the
field, or loads and shows numbers consistent with its steps; nothing else escapes, in the loader or in the app.

What is generated (docs/app.md, "The race-file contract"): one of the shipped races, or the hand race with a cost
run that measured its costs; then one to three mutations, each at a field picked evenly among the file's kinds of
field (a step's draft_ms, a node's score, a cost record's step_ms, ...; not evenly among the values, which pool
nodes would swamp): the field removed, replaced by another JSON value (null, true, a number tiny, huge, negative,
NaN or infinite, text, a list, an object), or scaled; or one run's timings scaled as a whole (a faster machine,
a made-up one). The examples budget is fixed (BUDGET, APP_BUDGET) and the draw is derandomized, so the default
test run always tries the same files.
"""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from components import RaceFileError
from components.race import METHOD_LABELS
from components.racecheck import MIN_STEP_RATIO
from components.runfile import race_from_data
from components.verdict import headline_html
from components.views import column_views, race_views, step_view
from tests.races import HAND_COSTS, cost_race
from tests.test_file_checks import counter_rate, headline_ratios
from tests.tiny import TREE_MODE

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 300  # files through the loader and every view
APP_BUDGET = 25  # files through the app's own "Load a run file"
SOURCE = "fuzzed.json"
VALUES = [None, True, False, 0, -1, 1, 0.5, 1e-9, 1e300, -1e300, math.nan, math.inf, -math.inf, 2**63, "", "x",
          "<img src=x onerror=alert(1)>", [], {}, [1], {"a": 1}]
FACTORS = [0.0, 1e-6, 0.01, 0.51, 0.9, 2.0, 1e6, -1.0]
NOT_SHOWN = re.compile(r"\b(nan|NaN|inf|Infinity|None)\b")


def _seeds() -> list[dict]:
    seeds = [json.loads(p.read_text()) for p in sorted((ROOT / "assets" / "examples").glob("*.json"))]
    measured = json.loads(json.dumps(cost_race().to_dict()))
    measured["traces"]["cost"]["steps"][1]["costs"] = {
        "draft_cost": HAND_COSTS.draft_cost, "verify_base": HAND_COSTS.verify_base,
        "verify_cost": HAND_COSTS.verify_cost, "measured": True, "step_ms": 50.0, "retimed": False}
    return [*seeds, measured]


SEEDS = _seeds()


def _paths(value, at=()) -> list[tuple]:
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*at, i))
    return found


def _kinds(seed: dict) -> dict[tuple, list[tuple]]:
    """The file's paths by kind of field: a path with its list positions left out."""
    kinds: dict[tuple, list[tuple]] = {}
    for path in _paths(seed)[1:]:
        kinds.setdefault(tuple("[]" if isinstance(p, int) else p for p in path), []).append(path)
    return kinds


KINDS = [_kinds(seed) for seed in SEEDS]


class Mutated(dict):
    """A mutated race file, shown by what was done to which seed (its data would fill a screen)."""

    def __init__(self, data: dict, done: list[str]):
        super().__init__(data)
        self.done = done

    def __repr__(self) -> str:
        return "Mutated(" + "; ".join(self.done) + ")"


def _parent(data, path):
    for key in path[:-1]:
        data = data[key]
    return data


@st.composite
def mutated(draw) -> Mutated:
    which = draw(st.integers(0, len(SEEDS) - 1))
    data = copy.deepcopy(SEEDS[which])
    done = [f"seed {which}"]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 5)) == 0:  # one run's timings as a whole
            method = draw(st.sampled_from(sorted(data["traces"])))
            factor = draw(st.sampled_from(FACTORS))
            for step in data["traces"][method]["steps"][1:]:
                for name in ("draft_ms", "verify_ms", "other_ms"):
                    step[name] = step.get(name, 0.0) * factor
            done.append(f"{method}'s timings x {factor}")
            continue
        kinds = KINDS[which]
        paths = kinds[draw(st.sampled_from(sorted(kinds, key=str)))]
        path = draw(st.sampled_from(paths))
        try:
            parent = _parent(data, path)
            key = path[-1]
            current = parent[key]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped what held it
        action = draw(st.sampled_from(["remove", "replace", "scale"]))
        if action == "remove":
            del parent[key]
            done.append(f"{path} removed")
        elif action == "scale" and isinstance(current, (int, float)) and not isinstance(current, bool):
            factor = draw(st.sampled_from(FACTORS))
            parent[key] = current * factor
            done.append(f"{path} x {factor}")
        else:
            parent[key] = draw(st.sampled_from(VALUES))
            done.append(f"{path} = {parent[key]!r}")
    return Mutated(data, done)


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def shown_consistently(race) -> None:
    """Every view of the race computes, shows no non-number, and its headline agrees with its counters and with
    what its steps allow."""
    views = race_views(race)
    last = views["steps"] - 1
    for index in sorted({0, min(1, last), last}):
        step = step_view(race, index)
        assert not NOT_SHOWN.search(_text(step.narration)), step.narration[:300]
    headline = headline_html(race.traces)
    shown = _text(headline) + " ".join(_text(c) for c in column_views(race) if isinstance(c, str))
    assert not NOT_SHOWN.search(shown), shown[:300]
    ratios = headline_ratios(headline)
    if "plain" not in race.traces or not race.traces["plain"].steps[1:]:
        return
    columns = [c for c in column_views(race) if isinstance(c, str)]
    counters = {m: c for m in race.traces for c in columns
                if c.startswith(f'<div class="counters"><b>{METHOD_LABELS[m]}</b>')}
    for method, label in (("eagle2", "EAGLE-2"), ("ddd", "DDD")):
        if label in ratios and method in counters:
            counted = counter_rate(counters[method]) / counter_rate(counters["plain"])
            assert counted == pytest.approx(ratios[label], rel=0.05, abs=0.01), (method, counted, ratios[label])  # shown rounded
            steps = race.traces[method].steps[1:]
            most = max(len(s.token_ids) for s in steps)  # a step of it at best, at the slowest pace allowed
            assert ratios[label] <= 2 * most / MIN_STEP_RATIO, (method, ratios[label], most)


@settings(max_examples=BUDGET, deadline=None, derandomize=True, database=None)
@given(mutated())
@pytest.mark.slow
def test_a_mutated_file_is_refused_in_one_sentence_or_shown_consistently(data):
    try:
        race = race_from_data(data, SOURCE)
    except RaceFileError as err:
        message = str(err)
        assert message.startswith(SOURCE) and message.endswith((".", ")")) and len(message) < 2_000, message
        event("refused")
        return
    event("loaded")
    shown_consistently(race)


@settings(max_examples=APP_BUDGET, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
@pytest.mark.slow
def test_a_mutated_file_through_the_apps_load_button_gets_a_race_or_a_message(page, tmp_path, data):
    path = tmp_path / "fuzzed.json"
    path.write_text(json.dumps(data))
    out = page.ui.named(page.viewer.load_file(str(path), True, TREE_MODE, None))
    message = str(out["message"].get("value", "") if isinstance(out["message"], dict) else out["message"])
    try:
        race_from_data(json.loads(path.read_text()), SOURCE)
    except RaceFileError as err:
        assert message.startswith("<div class='error-box'>Could not load that file") and "fuzzed.json" in message
        assert str(err)[len(SOURCE):][:40].replace("'", "&#x27;") in message
        return
    assert not message and out["session"].race is not None
