"""Race files whose every field is in range but whose views would lie: text that is not its tokens', runs of one race
that answered differently, operation counts that do not fit their step. Each is refused with one sentence naming the
field (components/runcheck.py, components/racecheck.py); the shipped races and the hand race load."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components import RaceFileError
from components.racecheck import SPECIAL
from components.runfile import race_from_data
from tests.races import hand_race

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [json.loads(p.read_text()) for p in sorted((ROOT / "assets" / "examples").glob("*.json"))]
FIELD = re.compile(r"^crafted\.json: traces\.\w+\.steps(\[\d+\])?(\.[a-z_]+)* [^\n]+\.$")


def hand_data() -> dict:
    return json.loads(json.dumps(hand_race().to_dict()))


def refused(data: dict, words: str) -> str:
    with pytest.raises(RaceFileError, match=re.escape(words)) as caught:
        race_from_data(copy.deepcopy(data), "crafted.json")
    return str(caught.value)


def steps(data: dict, method: str) -> list[dict]:
    return data["traces"][method]["steps"]


def retext(data: dict, method: str, position: int, text: str) -> None:
    """A step's text changed, and its run's whole text with it."""
    steps(data, method)[position]["text"] = text
    data["traces"][method]["text"] = "".join(s["text"] for s in steps(data, method))


def test_the_shipped_races_and_the_hand_race_load():
    for data in [*SHIPPED, hand_data()]:
        race_from_data(copy.deepcopy(data))


# -- tokens and their text -------------------------------------------------------------------------------------------

def test_a_text_that_is_not_its_tokens_is_refused():
    data = hand_data()
    retext(data, "plain", 1, "1LIELIE")
    refused(data, "traces.plain.steps[1].text is '1LIELIE', and the run's text from there on never shows token 101 "
                  "('the', as the file spells it)")


def test_a_token_spelt_two_ways_is_refused():
    data = hand_data()
    steps(data, "ddd")[1]["pool"][1]["text"] = " LIE"
    refused(data, "traces.ddd.steps[1].pool[1].text spells token 101 ' LIE', but traces.eagle2.steps[1].pool[1].text "
                  "spells it ' the': a token has one text")


def test_a_special_token_the_text_leaves_out_is_passed_over():
    data = hand_data()
    for trace in data["traces"].values():  # every run ends on the end-of-turn token, which no text shows
        trace["steps"][0]["token_ids"] = [2]
    steps(data, "eagle2")[1]["pool"][0].update(token_id=2, text="<|im_end|>")
    race_from_data(data)


@st.composite
def untrue_texts(draw) -> tuple[dict, str]:
    """A shipped race with one run's text redrawn from characters that a token it emits does not spell with."""
    data = copy.deepcopy(draw(st.sampled_from(SHIPPED)))
    spelt = {n["token_id"]: n["text"].strip() for t in data["traces"].values() for s in t["steps"]
             for n in s.get("pool", [])}
    method = draw(st.sampled_from(sorted(data["traces"])))
    run = data["traces"][method]
    shown = sorted({spelt[i] for s in run["steps"] for i in s["token_ids"]
                    if spelt.get(i) and "\ufffd" not in spelt[i] and not SPECIAL.fullmatch(spelt[i])})
    spelling = draw(st.sampled_from(shown))
    alphabet = st.characters(codec="utf-8", exclude_characters=spelling, exclude_categories=("Cs",))
    for step in run["steps"]:
        step["text"] = draw(st.text(alphabet, max_size=6))
    run["text"] = "".join(s["text"] for s in run["steps"])
    return data, method


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(untrue_texts())
def test_text_drawn_apart_from_its_tokens_is_refused_in_one_sentence_naming_the_field(case):
    data, method = case
    with pytest.raises(RaceFileError) as caught:
        race_from_data(data, "crafted.json")
    message = str(caught.value)
    assert FIELD.match(message) and ".text " in message, message


# -- the runs of one race --------------------------------------------------------------------------------------------

def test_greedy_runs_that_emit_other_tokens_are_refused():
    """A 512-token plain run beside short runs of another text: the headline would compare two answers."""
    data = hand_data()
    plain = steps(data, "plain")
    for position, step in enumerate(plain[1:], 1):
        step.update(token_ids=[200 + position], text=f" x{position}")
    data["traces"]["plain"]["text"] = "".join(s["text"] for s in plain)
    refused(data, "traces.eagle2.steps emit token 101 as token 2 of the answer, where traces.plain emits 201: greedy "
                  "runs of one race emit the same tokens")


def test_runs_with_the_same_tokens_and_another_text_are_refused():
    data = hand_data()
    retext(data, "ddd", 2, " hey cat on!")
    refused(data, "traces.ddd.text differs from traces.plain.text, yet both runs emitted the same tokens")


@pytest.mark.parametrize("field, value, words", [
    ("prompt", "Say bye", "traces.eagle2.prompt differs from traces.plain.prompt"),
    ("sampling", {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 0},
     "traces.eagle2.sampling differs from traces.plain.sampling"),
], ids=["prompt", "sampling"])
def test_runs_of_one_race_share_its_prompt_and_sampling(field, value, words):
    data = hand_data()
    data["traces"]["eagle2"][field] = value
    refused(data, words)


# -- operations ------------------------------------------------------------------------------------------------------

def counted(data: dict) -> dict:
    """The hand race with operations counted as the engine counts them on the tests' two-layer model."""
    for trace in data["traces"].values():
        for step in trace["steps"]:
            step["ops"] = {"draft": 75 * step.get("draft_calls", 0), "verify": 141, "other": 4}
    return data


def test_counted_operations_that_fit_their_steps_load():
    race_from_data(counted(hand_data()))


@pytest.mark.parametrize("change, words", [
    (lambda d: steps(d, "plain")[1]["ops"].update(draft=50),
     "traces.plain.steps[1].ops.draft is 50 on a step that made no draft calls"),
    (lambda d: steps(d, "ddd")[0]["ops"].update(draft=50),
     "traces.ddd.steps[0].ops.draft is 50 on the prefill, which drafts nothing"),
    (lambda d: steps(d, "ddd")[1]["ops"].update(draft=0),
     "traces.ddd.steps[1].ops.draft is 0, but the step made 3 draft calls"),
    (lambda d: steps(d, "ddd")[1].update(ops={}),
     "traces.ddd.steps[1].ops.verify is 0, but every step runs the target model"),
    (lambda d: steps(d, "ddd")[1].update(ops=None),
     "traces.ddd.steps[1].ops is missing, but the run's other steps count their operations"),
    (lambda d: steps(d, "ddd")[1]["ops"].update(draft=100 * 141 * 3),
     "traces.ddd.steps[1].ops count 14,148 operations a token, more than 2 x (3 draft calls + 1) x plain decoding's "
     "145 a token in this race"),
], ids=["draft-on-plain", "draft-on-prefill", "calls-without-drafting", "empty", "some-steps-only", "100x-plain"])
def test_operations_that_do_not_fit_their_step_are_refused(change, words):
    data = counted(hand_data())
    change(data)
    assert FIELD.match(refused(data, words))
