"""Every number a race file brings is checked against what it can be: step times no model runs at, and a cost
rule's weighing that its own costs and tree cannot produce, are refused with a message naming the field (the
static page refuses them with the same words: tests/test_static_page.py). A file the engine really wrote passes."""
from __future__ import annotations

import copy
import json
import re

import pytest

from components import RaceFileError
from components.runfile import race_from_data
from ddd import generate
from tests.races import cost_race


def cost_data() -> dict:
    return json.loads(json.dumps(cost_race().to_dict()))


def _fast(ms: float, methods: tuple[str, ...]):
    def change(data: dict) -> None:
        for method in methods:
            for step in data["traces"][method]["steps"][1:]:
                step.update(draft_ms=0.0, verify_ms=ms, other_ms=0.0)
    return change


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
     "traces.cost.steps take 5 ms each (the median decode step), under half of plain decoding's 50 ms: a Cost rule "
     "step runs the target on at least the token a plain step does"),
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
