"""The automatic budget: its predictions of what smaller trees accept are exact under greedy decoding."""
import pytest

from ddd.bench.budget import (Costs, accepted_within, auto_budget, ddd_depth, interpolate, kept_nodes, lm_rows,
                              time_target, main as budget_main)
from ddd.engine import generate
from ddd.checkpoint import save_head
from tests.tiny import PROMPTS

BIG = dict(beam_width=4, draft_calls=5, total_tokens=40)


def first_step(target, head, method, **settings):
    return next(s for s in generate(target, head, PROMPTS[0], method, max_new_tokens=12, **settings) if not s.prefill)


@pytest.mark.parametrize("calls,tokens", [(1, 2), (2, 3), (3, 6), (5, 12), (4, 40)])
def test_smaller_eagle2_tree_accepts_what_the_big_pool_predicts(llama, llama_head, calls, tokens):
    big = first_step(llama, llama_head, "eagle2", **BIG)
    small = first_step(llama, llama_head, "eagle2", beam_width=4, draft_calls=calls, total_tokens=tokens)
    keep = kept_nodes(big, calls, tokens)
    assert len(keep) == small.verified
    assert accepted_within(big, keep) == small.accepted


@pytest.mark.parametrize("threshold", [0.0, -0.5, -2.0, -50.0])
def test_ddd_depth_is_read_from_the_recorded_confidence(llama, llama_head, threshold):
    big = first_step(llama, llama_head, "eagle2", **BIG)
    ddd = first_step(llama, llama_head, "ddd", beam_width=4, max_draft_calls=5, check_steps="all",
                     threshold=threshold, total_tokens=12)
    calls = ddd_depth(big.confidence, threshold, 5)
    assert calls == ddd.draft_calls
    assert accepted_within(big, kept_nodes(big, calls, 12)) == ddd.accepted


def test_lm_rows_counts_internal_nodes_and_a_leaf_end():
    class Node:
        def __init__(self, index, parent):
            self.index, self.parent = index, parent

    class FakeStep:
        pool = [Node(0, -1), Node(1, 0), Node(2, 0), Node(3, 1)]
        accepted_path = [0, 1, 3]

    assert lm_rows(FakeStep, {0, 1, 2, 3}, 2) == [2, 1]  # internal 0 and 1; node 3 is a leaf
    assert lm_rows(FakeStep, {0, 1, 2, 3}, 1) == [2, 0]  # node 1 is internal: its row is already there


def test_interpolate_between_and_beyond_measured_sizes():
    table = {1: 10.0, 4: 40.0, 8: 60.0}
    assert interpolate(table, 1) == 10.0
    assert interpolate(table, 2) == 20.0
    assert interpolate(table, 6) == 50.0
    assert interpolate(table, 12) == 80.0


def test_auto_budget_returns_valid_settings_for_both_methods(llama, llama_head):
    report = auto_budget(llama, llama_head, prompts=(PROMPTS[0], PROMPTS[2]), new_tokens=12, beam_width=4,
                         max_calls=4, max_tokens=16, repeats=1)
    assert report.calibration_steps >= 2
    assert all(ms > 0 for ms in report.costs.forward_ms.values())
    for method, settings in (("eagle2", report.eagle2), ("ddd", report.ddd)):
        settings.validate(llama_head.draft_vocab_size)
        best = report.best(method)
        assert best.tau >= 1 and best.speedup > 0
    assert report.ddd.check_steps == "all"


def test_forwards_are_timed_after_the_asked_context_within_the_models_limit(llama, monkeypatch):
    contexts = []
    original = llama.model.model.forward

    def spy(*args, **kwargs):
        contexts.append(kwargs["cache"].get_seq_length())
        return original(*args, **kwargs)

    monkeypatch.setattr(llama.model.model, "forward", spy)
    timings = time_target(llama, PROMPTS[0], sizes=(1, 4), repeats=1, context=100)
    assert set(contexts[1:]) == {100}  # the first forward reads the context itself
    assert set(timings.forward_ms) == {1, 4} and timings.plain_forward_ms > 0
    contexts.clear()
    time_target(llama, PROMPTS[0], sizes=(1, 4), repeats=1, context=10**6)
    assert set(contexts[1:]) == {llama.context_limit - 5}


def test_the_cost_rules_costs_split_a_forward_into_its_tree_base_and_a_slope():
    """A CPU's forward: 50 ms for one token, 58 for two, then 2 ms per token; plain steps of 50 ms."""
    costs = Costs({1: 50.0, 2: 58.0, 4: 62.0, 8: 70.0}, {}, draft_call_ms=5.0, other_ms=0.0, plain_ms=50.0)
    step = costs.step_costs(8)
    assert (step.draft_cost, step.verify_base, step.verify_cost) == pytest.approx((0.1, 0.12, 0.04))
    for n, ms in costs.forward_ms.items():  # the rule's model of a forward meets every measured size
        assert step.time(0, n) == pytest.approx(ms / 50.0)


def test_budget_prints_candidates_and_the_best_settings(tmp_path, tiny_llama_dir, llama_head, capsys):
    head_dir = save_head(llama_head, tmp_path / "head")
    budget_main(["--model", str(tiny_llama_dir), "--head", str(head_dir), "--beam-width", "4", "--max-calls", "3",
          "--max-tokens", "8", "--new-tokens", "8"])
    out = capsys.readouterr().out
    assert "target forward ms by rows" in out and "predicted speedup" in out
    assert "eagle2: --set beam_width=4 --set draft_calls=" in out
    assert "ddd: --set beam_width=4 --set max_draft_calls=3 --set check_steps=all" in out
    assert "cost: --set draft_cost=" in out and "--set verify_base=" in out and "--set verify_cost=" in out
    assert "operations dispatched" in out and "  plain: " in out and "a draft call" in out


@pytest.mark.parametrize("extra, message", [
    (["--max-tokens", "1"], "--max-tokens: total_tokens must be a whole number from 2 to 4,096, not 1"),
    (["--max-calls", "0"], "--max-calls: draft_calls must be a whole number from 1 to 64, not 0"),
    (["--beam-width", "²"], "--beam-width: beam_width must be a whole number from 1 to 1,024, not '²'"),
    (["--new-tokens", "1"], "new_tokens must be at least 2"),
])
def test_budget_bad_values(tiny_llama_dir, extra, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        budget_main(["--model", str(tiny_llama_dir), "--head", "random", *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
