"""The fair race (ddd.turns) on the tiny model, and the verdict drawn from its traces (components.verdict)."""
from __future__ import annotations

import subprocess
import sys

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from components.verdict import row_medians, verdict
from ddd import resolve_head
from ddd.turns import Entry, race_to_end, start_race, warm_up
from ddd.metrics import summarize
from ddd.trace import RunTrace, Step

SMALL_TREE = dict(beam_width=4, draft_calls=3, total_tokens=12)
HOG = "import sys; print('spinning', flush=True)\nwhile True: pass"


def test_round_robin_takes_turns_and_rotates_the_order(llama, llama_head):
    entries = {"plain": Entry("plain"), "eagle2": Entry("eagle2", SMALL_TREE),
               "ddd": Entry("ddd", dict(beam_width=4, max_draft_calls=6, check_steps="all", total_tokens=12))}
    race = start_race(llama, llama_head, "one two three", entries, max_new_tokens=24)
    turns = list(race)
    rounds: dict[int, list[str]] = {}
    for turn in turns:
        assert turn.step.index == turn.round  # step r of every decoder runs in round r
        rounds.setdefault(turn.round, []).append(turn.name)
    assert rounds[0] == ["plain", "eagle2", "ddd"] and rounds[1] == ["eagle2", "ddd", "plain"]
    assert rounds[2] == ["ddd", "plain", "eagle2"]
    traces = race.traces
    assert list(traces) == ["plain", "eagle2", "ddd"]
    assert len({t.text for t in traces.values()}) == 1  # greedy: every method writes plain decoding's text
    assert all(t.summary for t in traces.values())


def test_stop_ends_every_run_after_its_current_step(llama, llama_head):
    race = start_race(llama, llama_head, "one two three", {"a": Entry("plain"), "b": Entry("eagle2", SMALL_TREE)},
                      max_new_tokens=200)
    for turn in race:
        if turn.round == 2:
            race.stop()
    assert race.stopped
    assert {t.stop_reason for t in race.traces.values()} == {"stopped"}
    assert all(len(t.steps) <= 4 for t in race.traces.values())


def test_warm_up_and_race_to_end(llama, llama_head):
    warm_up(llama, llama_head)
    warm_up(llama, None)
    traces = race_to_end(llama, llama_head, "the cat sat", {"plain": Entry("plain")}, max_new_tokens=8)
    assert list(traces) == ["plain"] and traces["plain"].summary["new_tokens"] == 8


def test_identical_decoders_tie_even_with_a_cpu_hog_during_part_of_the_race(llama, llama_head):
    entries = {name: Entry("eagle2", SMALL_TREE) for name in ("a", "b", "c")}
    race = start_race(llama, llama_head, "one two three", entries, max_new_tokens=72)
    hog = None
    try:
        for turn in race:
            if turn.round == 4 and hog is None:
                hog = subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE, text=True)
                hog.stdout.readline()  # spinning: from here on the machine is busier
            elif turn.round == 14 and hog is not None and hog.poll() is None:
                hog.kill()
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    result = verdict(race.traces, reference="a")
    # No identical decoder is named the winner: all three lead, tied (ties chain, so a pair may be told apart by a
    # busy spell's noise while each is too close to call against another; one full run of 3 met such a pair).
    assert result.decided and sorted(result.leaders) == ["a", "b", "c"], result.headline
    assert result.headline.startswith("A tie") and sum(s.tie for s in result.standings) >= 1, result.headline


def test_a_really_slower_decoder_loses(llama):
    head, _ = resolve_head("random", llama)  # accepts almost nothing: a big tree is pure cost
    entries = {"plain": Entry("plain"), "eagle2": Entry("eagle2", dict(beam_width=10, draft_calls=6, total_tokens=60))}
    result = verdict(race_to_end(llama, head, "one two three", entries, max_new_tokens=32))
    assert result.leaders == ["plain"] and result.headline.startswith("Plain wins"), result.headline
    slow = result.standings[1]
    assert slow.speedup < 1 and slow.high < 1 and not slow.tie
    assert "EAGLE-2 0." in result.headline and "tau" in result.why


# Hand-made traces: known times, no model.

def trace_of(name: str, step_ms: list[float], tokens_per_step: int = 1) -> RunTrace:
    steps = [Step(index=0, token_ids=[1], text="a", accepted=0, verify_ms=50.0, prefill=True)]
    steps += [Step(index=i + 1, token_ids=[1] * tokens_per_step, text="b", accepted=tokens_per_step - 1,
                   verify_ms=ms) for i, ms in enumerate(step_ms)]
    return RunTrace(method=name, settings={}, sampling={}, model="m", head=None, prompt="p", prompt_tokens=3,
                    steps=steps, summary=summarize(steps))


def test_verdict_on_known_times():
    noisy = [10, 12, 9, 11, 30, 28, 10, 11, 9, 10, 12, 11]  # a busy spell in the middle
    same = verdict({"plain": trace_of("plain", noisy), "ddd": trace_of("ddd", noisy[::-1])})
    assert same.leaders == ["plain", "ddd"] and same.standings[1].tie and same.headline.startswith("A tie")
    longer = noisy * 3
    faster = verdict({"plain": trace_of("plain", longer), "ddd": trace_of("ddd", [m * 1.2 for m in longer[:18]], 2)})
    ddd = faster.standings[1]
    assert faster.leaders == ["ddd"] and not ddd.tie and ddd.speedup == pytest.approx(2 / 1.2, rel=0.01)
    assert faster.headline.startswith("DDD wins: DDD 1.67× plain") and "tau 2.00" in faster.why
    assert "Prefill, timed apart: Plain 50, DDD 50 ms" in faster.why
    steady = [10.0] * 24
    slightly = verdict({"plain": trace_of("plain", steady), "ddd": trace_of("ddd", [m * 0.97 for m in steady])})
    assert slightly.standings[1].tie and slightly.headline.startswith("A tie")  # 3% is not called, however steady
    short = verdict({"plain": trace_of("plain", [10, 10]), "ddd": trace_of("ddd", [5, 5])})
    assert not short.decided and short.headline.startswith("Too short")
    assert verdict({"plain": trace_of("plain", noisy)}) is None


def test_a_race_leaves_autograd_as_it_found_it(llama, llama_head):
    import torch

    race = start_race(llama, llama_head, "one two three", {"a": Entry("plain"), "b": Entry("eagle2", SMALL_TREE)},
                      max_new_tokens=6)
    for turn in race:
        assert not torch.is_inference_mode_enabled()  # between steps the caller's own mode holds
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()



def test_a_tie_for_the_lead_says_on_its_line_what_makes_it_a_tie():
    plain = trace_of("plain", [30.0] * 24)
    noisy = [10, 12, 9, 11, 30, 28, 10, 11, 9, 10, 12, 11] * 2  # a busy spell, at other rounds for each
    within = verdict({"plain": plain, "eagle2": trace_of("eagle2", noisy, 2), "ddd": trace_of("ddd", noisy[::-1], 2)})
    assert within.headline == ("EAGLE-2 and DDD tie for the lead: EAGLE-2 5.45× plain, DDD 5.45× plain; DDD's speed "
                               "over EAGLE-2's is 1.00, and its 95% interval, 0.91–1.10, includes equal speed.")
    steady = [10.0] * 24
    close = verdict({"plain": plain, "eagle2": trace_of("eagle2", steady, 2),
                     "ddd": trace_of("ddd", [m * 0.97 for m in steady], 2)})
    assert close.headline.startswith("DDD and EAGLE-2 tie for the lead: ")
    assert close.headline.endswith("; DDD's speed over EAGLE-2's is 1.03 (95% interval 1.03–1.03), under the 5% a "
                                   "race calls.")


@given(arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 20)),
              elements=st.floats(0, 1e4, allow_nan=False)),
       st.data())
def test_row_medians_are_numpys_nanmedian_over_the_chosen_values(values, data):
    """The verdict's medians are numpy's to the last bit (the static page's player repeats them)."""
    chosen = data.draw(arrays(np.bool_, values.shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with nothing chosen: numpy warns, both give NaN
        expected = np.nanmedian(np.where(chosen, values, np.nan), axis=1)
    assert np.array_equal(row_medians(values, chosen), expected, equal_nan=True)
