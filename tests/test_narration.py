"""The step narration: what it says of each kind of step, on hand-built races."""
from __future__ import annotations

import math

from components.narration import candidates_drafted, narrate
from tests.races import hand_race, make_trace, prefill, small_pool, spec_step


def test_narration_early_stop():
    race = hand_race()
    step = race.traces["ddd"].steps[1]
    text = narrate(step, race.traces["ddd"], race)
    assert "DDD stopped after 3 draft calls" in text and "H = -0.90" in text and "threshold -0.3" in text
    assert "saved 3 draft calls" in text and "about 30 ms" in text  # 10 ms per call x 3
    assert f"{math.exp(-0.9):.0%}" in text
    assert "accepted 2 draft tokens ('␣the', '␣cat')" in text and "'␣on' itself" in text
    assert "candidates in 3 levels" in text and f"{candidates_drafted(step, race.traces['ddd'])}" in text


def test_narration_tiny_beam_share_is_readable():
    race = hand_race()
    step = spec_step(1, calls=3, limit=6, checks=[(3, -6.13, True)])
    assert "held only 0.2% of the draft probability" in narrate(step, race.traces["ddd"], race)


def test_narration_deeper_than_eagle2():
    race = hand_race()
    text = narrate(race.traces["ddd"].steps[2], race.traces["ddd"], race)
    assert "drafted all 6 levels" in text and "3 deeper than EAGLE-2's fixed 3" in text
    assert "-0.10, -0.20" in text


def test_narration_stopped_but_still_deeper_than_eagle2():
    race = hand_race()
    step = spec_step(3, calls=5, limit=6, checks=[(3, -0.2, False), (5, -0.8, True)])
    text = narrate(step, race.traces["ddd"], race)
    assert "DDD stopped after 5 draft calls" in text and "2 more levels than EAGLE-2's fixed 3" in text
    assert "went deeper than EAGLE-2" in text and "H = -0.20" in text


def test_narration_nothing_accepted():
    race = hand_race()
    step = race.traces["eagle2"].steps[2]
    text = narrate(step, race.traces["eagle2"], race)
    assert "Nothing was accepted" in text and "'␣hey'" in text
    assert "'␣the', '␣a'" in text and "did not match" in text
    sampled = make_trace("eagle2", [prefill(), step], temperature=0.8)
    assert "sampling test" in narrate(step, sampled, None)


def test_narration_all_accepted():
    pool = small_pool({7: "accepted"})
    step = spec_step(accepted=3, path=(0, 1, 4, 7))
    step.pool = pool
    trace = make_trace("eagle2", [prefill(), step])
    text = narrate(step, trace, None)
    assert "accepted 3 draft tokens ('␣the', '␣cat', '␣sat')" in text
    assert "every level the draft built" in text


def test_narration_states_the_depth_decision_once():
    race = hand_race()
    pool = small_pool({7: "accepted"})
    stopped = spec_step(accepted=3, path=(0, 1, 4, 7), calls=3, limit=6, checks=[(3, -0.9, True)], pool=pool)
    text = narrate(stopped, race.traces["ddd"], race)
    assert "every level the draft built" in text and "judged deeper levels unlikely" in text
    assert "cautious" in text and "could have given even more" not in text
    assert text.count("deeper") == 2  # the decision, and what it cost this time: once each
    fixed = narrate(spec_step(accepted=3, path=(0, 1, 4, 7), pool=small_pool({7: "accepted"})),
                    race.traces["eagle2"], race)
    assert "EAGLE-2 drafts a fixed 3 levels" in fixed


def test_narration_prefill_plain_and_timing():
    race = hand_race()
    assert "prefill" in narrate(race.traces["ddd"].steps[0], race.traces["ddd"], race)
    assert "One target forward" in narrate(race.traces["plain"].steps[1], race.traces["plain"], race)
    text = narrate(race.traces["ddd"].steps[1], race.traces["ddd"], race)
    assert "30 ms drafting + 60 ms verifying + 5 ms other = 95 ms for 3 tokens" in text
    assert "plain decoding: 50 ms per token" in text


def test_a_token_cannot_format_or_link_the_narration():
    from components.tokens import quoted

    shown = quoted("**[x](javascript:alert(1))**")
    assert shown == r"'\*\*\[x\]\(javascript:alert\(1\)\)\*\*'"  # every Markdown mark made literal
    assert quoted("<b>&") == "'&lt;b&gt;&amp;'"  # the HTML entities stay whole
