"""Every number a race file brings is checked against what it can be: step times no model runs at, and a cost
rule's weighing that its own costs and tree cannot produce, costs that contradict the run's settings or its plain
forwards, and steps faster than the race's own plain forwards allow, are refused with a message naming the field.
A file the engine really wrote passes."""
from __future__ import annotations

import copy
import json
import re

import pytest

from components import RaceFileError
from components.runfile import race_from_data
from ddd import generate
from tests.races import HAND_COSTS, cost_race


def cost_data() -> dict:
    return json.loads(json.dumps(cost_race().to_dict()))


def _fast(ms: float, methods: tuple[str, ...]):
    def change(data: dict) -> None:
        for method in methods:
            for step in data["traces"][method]["steps"][1:]:
                drafting = ms / 2 if step.get("draft_calls") else 0.0
                step.update(draft_ms=drafting, verify_ms=ms - drafting, other_ms=0.0)
    return change


def _costs(**values):
    """The cost run's step 1 priced with these costs (its settings' where not given)."""
    def change(data: dict) -> None:
        costs = {"draft_cost": HAND_COSTS.draft_cost, "verify_base": HAND_COSTS.verify_base,
                 "verify_cost": HAND_COSTS.verify_cost, "measured": False}
        data["traces"]["cost"]["steps"][1]["costs"] = {**costs, **values}
    return change


def _step(method: str, position: int, **values):
    def change(data: dict) -> None:
        data["traces"][method]["steps"][position].update(values)
    return change


def _pinned_yet_measured(data: dict) -> None:
    data["traces"]["cost"]["settings"]["pin_costs"] = True
    _costs(measured=True, step_ms=50.0)(data)


def _check(position: int, **values):
    def change(data: dict) -> None:
        data["traces"]["cost"]["steps"][1]["checks"][position].update(values)
    return change


# (name, change to the hand race with a cost run, words of the message)
IMPOSSIBLE = [
    ("steps-0.001-ms", _fast(0.001, ("plain", "eagle2", "ddd", "cost")),
     "traces.plain.steps[1] took 0.001 ms (draft_ms + verify_ms + other_ms); a step runs the target model at least "
     "once, which takes at least 0.05 ms on any machine"),
    ("cost-ten-times-plain-pace", _fast(5.0, ("cost",)),
     "traces.cost.steps take 5 ms each (the median decode step), under plain decoding's 50 ms: a Cost rule "
     "step runs the target on at least the token a plain step does"),
    ("eagle2-at-0.51-plain-pace", _fast(25.5, ("eagle2",)),
     "traces.eagle2.steps take 25.5 ms each (the median decode step), under plain decoding's 50 ms"),
    ("one-step-at-0.06-ms", _step("ddd", 1, draft_ms=0.03, verify_ms=0.03, other_ms=0.0),
     "traces.ddd.steps[1] took 0.06 ms, well under plain decoding's fastest step (50 ms)"),
    ("drafting-in-0-ms", _step("ddd", 1, draft_ms=0.0),
     "traces.ddd.steps[1].draft_ms is 0, but the step made 3 draft calls, which take time"),
    ("measured-without-its-step-time", _costs(measured=True),
     "traces.cost.steps[1].costs.step_ms must be given exactly when measured is true"),
    ("measured-plain-step-0-ms", _costs(measured=True, step_ms=0.0),
     "traces.cost.steps[1].costs.step_ms is 0 ms; a plain step runs the target model"),
    ("measured-plain-step-0.001-ms", _costs(measured=True, step_ms=0.001),
     "traces.cost.steps[1].costs.step_ms is 0.001 ms; a plain step runs the target model"),
    ("measured-plain-step-a-billion-ms", _costs(measured=True, step_ms=1e9),
     "traces.cost.steps[1].costs.step_ms says a plain step took 1e+09 ms, but this race's steps took 50 (plain "
     "decoding's fastest) to 95 ms"),
    ("pinned-yet-measured", _pinned_yet_measured,
     "traces.cost.steps[1].costs.measured is true, but the run's settings pin the costs"),
    ("unmeasured-costs-not-the-settings", _costs(draft_cost=0.3),
     "traces.cost.steps[1].costs say they are not measured, so they are the run's settings', yet they are "
     "draft_cost 0.3"),
    ("costs-on-a-ddd-step", lambda d: d["traces"]["ddd"]["steps"][1].update(
        costs={"draft_cost": 0.05, "verify_base": 0.1, "verify_cost": 0.04, "measured": False}),
     "traces.ddd.steps[1].costs records the cost rule's costs, but only the cost rule prices its steps"),
    ("gain-99", _check(0, gain=99.0),
     "checks[0].gain is 99: one more level would expect 99.8 accepted tokens, but its tree's 6 verified draft tokens "
     "give 0 to as many"),
    ("time-gain-minus-5", _check(0, time_gain=-5.0),
     "checks[0].time_gain is -5: one more level would take -3.69 plain steps, which no tree of 2 draft calls and 1 "
     "to 8 verified tokens takes at the step's costs"),
    ("time-off-the-costs", _check(1, time=1.2),
     "checks[1].time is 1.2, but 2 draft calls and 7 verified tokens take 1.44 plain steps at the step's costs"),
    ("stop-against-the-rates", _check(2, stop=False),
     "checks[2].stop says go on, but one more level's rate (E + dE + 1) / (T + dT) = 1.677 is below the tree's "
     "(E + 1) / T = 1.699"),
]


@pytest.mark.parametrize("change, words", [(c, w) for _, c, w in IMPOSSIBLE], ids=[n for n, _, _ in IMPOSSIBLE])
def test_a_number_the_file_cannot_hold_is_refused(change, words):
    data = cost_data()
    change(data)
    with pytest.raises(RaceFileError, match=re.escape(words)):
        race_from_data(copy.deepcopy(data), "crafted.json")


def test_the_hand_race_with_its_weighings_loads():
    assert race_from_data(cost_data()).methods == ["plain", "eagle2", "ddd", "cost"]


@pytest.mark.parametrize("settings", [{}, {"draft_cost": 0.001, "verify_base": 0, "verify_cost": 0},
                                      {"draft_cost": 0.9, "verify_base": 1, "verify_cost": 0.5}],
                         ids=["declared", "cheap", "dear"])
def test_a_cost_run_the_engine_wrote_passes_every_check(llama, llama_head, settings):
    run = generate(llama, llama_head, "the cat sat", method="cost", max_new_tokens=12, **settings)
    for _ in run:
        pass
    assert any(s.checks for s in run.trace.steps)
    assert race_from_data(json.loads(json.dumps(run.trace.to_dict()))).methods == ["cost"]
