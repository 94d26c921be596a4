"""The line races wait in: first come first served, a place and a wait for everyone in it from the moment they
join, a sentence when it is full."""
from __future__ import annotations

import statistics
import time

import pytest

from explorer.queueing import QueueFull, RaceLine, Work
from explorer.running import waiting_words

SHORT, LONG = Work("pair", 16, 3), Work("pair", 64, 3)


def test_races_take_turns_in_the_order_they_came():
    line = RaceLine(8)
    first, second, third = (line.join(SHORT) for _ in range(3))
    assert [line.ahead(t) for t in (first, second, third)] == [0, 1, 2]
    line.leave(first, finished=True)
    assert [line.ahead(t) for t in (second, third)] == [0, 1]


def test_a_race_that_leaves_while_waiting_moves_those_behind_it_up():
    line = RaceLine(8)
    first, second, third = (line.join(SHORT) for _ in range(3))
    line.leave(second, finished=False)
    assert line.ahead(third) == 1 and line.ahead(first) == 0


def test_before_any_race_is_timed_there_is_no_estimate():
    line = RaceLine(8)
    line.join(SHORT)
    assert line.wait_s(line.join(SHORT)) is None


def test_the_estimate_comes_from_races_of_the_same_pair_and_length():
    line = RaceLine(8)
    for seconds in (2.0, 2.0, 8.0):  # a race that ran to its last token counts as often as it comes
        line.record(SHORT, seconds)
    line.record(LONG, 4.0)
    line.record(Work("another pair", 16, 3), 50.0)
    assert line.estimate_s(SHORT) == pytest.approx(4.0)


def test_until_a_few_races_of_its_length_ran_the_pairs_pace_stands_in():
    line = RaceLine(8)
    line.record(SHORT, 2.0)
    line.record(LONG, 6.0)
    assert line.estimate_s(LONG) == pytest.approx(64 * 3 * statistics.fmean([2.0 / 48, 6.0 / 192]))


def test_another_length_scales_the_pairs_time_per_token_and_run():
    line = RaceLine(8)
    line.record(SHORT, 3.0)
    assert line.estimate_s(Work("pair", 32, 3)) == pytest.approx(6.0)
    assert line.estimate_s(Work("pair", 16, 4)) == pytest.approx(4.0)
    assert line.estimate_s(Work("unseen pair", 16, 3)) == pytest.approx(3.0)  # any pair's, until its own is timed


def test_the_wait_adds_up_the_races_ahead_less_what_the_running_one_has_done():
    line = RaceLine(8)
    for seconds in (2.0, 2.0, 2.0, 8.0, 8.0, 8.0):
        line.record(SHORT if seconds == 2.0 else LONG, seconds)
    running = line.join(LONG)
    line.join(SHORT)
    last = line.join(SHORT)
    time.sleep(0.3)
    assert line.wait_s(last) == pytest.approx(8.0 - 0.3 + 2.0, abs=0.1)
    assert line.wait_s(running) == 0.0


def test_a_race_past_its_estimate_still_counts_a_little():
    line = RaceLine(8)
    line.record(SHORT, 0.1)
    line.join(SHORT)
    waiting = line.join(SHORT)
    time.sleep(0.2)
    assert line.wait_s(waiting) == pytest.approx(0.01)


def test_only_races_that_ran_to_their_end_teach_the_estimate():
    line = RaceLine(8)
    for _ in range(3):
        line.record(SHORT, 2.0)
    stopped, waiting = line.join(SHORT), line.join(SHORT)
    line.leave(waiting, finished=True)  # it left before its turn: nothing ran
    line.leave(stopped, finished=False)
    assert line.estimate_s(SHORT) == 2.0
    for _ in range(3):
        line.leave(line.join(SHORT), finished=True)
    assert line.estimate_s(SHORT) < 1.1


def test_the_race_with_the_turn_foretells_its_own_end_and_its_lengths_waits_from_its_pace():
    """A class's first waits come while its first long race runs: its pace says more than short races scaled up."""
    line = RaceLine(8)
    line.record(SHORT, 1.0)  # 1/48 s a token and run: a 64-token race would be 4 s
    running = line.join(LONG)
    waiting = line.join(LONG)
    time.sleep(0.3)
    line.progress(running, 0.25)  # a quarter done in 0.3 s: 1.2 s in all
    assert line.estimate_s(LONG) == pytest.approx(1.2, abs=0.05)
    assert line.estimate_s(SHORT) == pytest.approx(1.0)  # other work: the pair's own races
    assert line.wait_s(waiting) == pytest.approx(1.2 - 0.3, abs=0.05)


def test_the_pace_waits_for_a_little_of_the_race_to_be_done():
    line = RaceLine(8)
    line.record(LONG, 4.0)
    running = line.join(LONG)
    waiting = line.join(LONG)
    line.progress(running, 0.01)  # the prefill, little else: the races of its length still speak
    assert line.wait_s(waiting) == pytest.approx(4.0, abs=0.05)


def test_the_share_done_counts_each_runs_tokens_and_an_ended_run_whole():
    from ddd.trace import RunTrace, Step
    from explorer.racing import LiveRace, RaceEvent

    def step(tokens: int) -> Step:
        return Step(index=1, token_ids=[5] * tokens, text="x" * tokens, accepted=0)

    live = LiveRace()
    live.apply(RaceEvent("start", traces={m: RunTrace(m, {}, {}, "tiny", None, "the cat sat", 3)
                                          for m in ("plain", "eagle2")}))
    live.apply(RaceEvent("turn", name="plain", step=step(4)))
    live.apply(RaceEvent("turn", name="eagle2", step=step(2), stop_reason="eos"))
    assert live.done_share(16, 2) == pytest.approx((4 / 16 + 1) / 2)


def test_a_full_line_refuses_in_a_sentence_that_says_when_to_try_again():
    line = RaceLine(2)
    line.record(SHORT, 5.0)
    line.join(SHORT)
    line.join(SHORT)
    full = r"The queue is full: 2 races .* Try again when one has finished \(about \d+ s\)"
    with pytest.raises(QueueFull, match=full) as refused:
        line.join(SHORT)
    assert "(about 5 s)" in str(refused.value)  # when the race with the turn ends, not the whole line


def test_the_waiting_line_names_the_place_and_the_wait():
    assert waiting_words(3, 12.4) == ("Waiting for its turn: 3 races ahead of this one, about 12 s to wait "
                                      "(Stop cancels it).")
    assert waiting_words(1, None) == "Waiting for its turn: 1 race ahead of this one (Stop cancels it)."
