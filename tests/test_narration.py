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


def test_why_a_ddd_tree_stopped_quotes_h_and_the_threshold():
    race = hand_race()
    text = narrate(race.traces["ddd"].steps[1], race.traces["ddd"], race)
    assert "**Why this depth:** DDD stopped after 3 draft calls" in text
    assert "(H = -0.90, below the threshold -0.3)" in text
    fixed = narrate(race.traces["eagle2"].steps[1], race.traces["eagle2"], race)
    assert "**Why this depth:** EAGLE-2 drafts a fixed 3 levels, its setting, so it stopped there." in fixed


def test_why_the_cost_rule_stopped_quotes_what_it_weighed():
    # After call 3: E = 1.16 tokens in T = 1.22 steps, (E + 1) / T = 1.77; one more level: 0.18 / 0.15 = 1.20.
    step = spec_step(calls=3, limit=6, checks=[(1, -0.1, False, 0.8, 1.09, 5, 0.3, 0.05),
                                               (2, -0.2, False, 1.1, 1.17, 7, 0.06, 0.05),
                                               (3, -0.5, True, 1.16, 1.22, 8, 0.18, 0.15)])
    text = narrate(step, make_trace("cost", [prefill(), step]))
    assert ("**Why this depth:** The cost rule stopped after 3 draft calls: its best tree after call 3, 8 verified "
            "tokens, expected E = 1.16 accepted tokens in T = 1.22 plain steps, (E + 1) / T = 1.77 tokens per plain "
            "step; one more level was forecast to add dE = 0.18 tokens for dT = 0.15 steps, dE / dT = 1.20 per "
            "step, not above 1.77, so drafting deeper would have slowed the step.") in text
    assert "highest calibrated path probability" in text


def test_why_the_cost_rule_ran_to_its_limit_quotes_the_last_weighing():
    # After call 2 one more level still paid: 0.6 / 0.1 = 6.00 per step against (1.5 + 1) / 1.2 = 2.08.
    step = spec_step(calls=3, limit=3, checks=[(1, -0.1, False, 0.8, 1.09, 5, 0.7, 0.09),
                                               (2, -0.3, False, 1.5, 1.2, 8, 0.6, 0.1)])
    text = narrate(step, make_trace("cost", [prefill(), step]))
    assert ("The cost rule drafted all 3 levels, its maximum: at its last weighing, its best tree after call 2, 8 "
            "verified tokens, expected E = 1.50 accepted tokens in T = 1.20 plain steps, (E + 1) / T = 2.08") in text
    assert "dE = 0.60 tokens for dT = 0.10 steps, dE / dT = 6.00 per step, above 2.08, so only the 3-call limit" in text
