"""DDD's depth rule on crafted draft scores: stop exactly when H < threshold at a check step."""
import math

import pytest
import torch

from ddd.drafting import ConfidenceDepth, DynamicTreeDrafter, FixedDepth

VOCAB = 8


class CraftedRunner:
    """A stand-in head whose best child always has probability q: with beam_width=1 the beam is one chain and
    H after c draft calls is exactly c * log(q)."""

    def __init__(self, q: float):
        rest = (1 - q) / (VOCAB - 1)
        self.row = torch.log(torch.tensor([q] + [rest] * (VOCAB - 1)))

    def logprobs(self, features):
        return self.row.expand(*features.shape[:-1], VOCAB)

    def to_target_ids(self, ids):
        return ids

    def begin_tree(self, slots):
        pass

    def end_tree(self):
        pass

    def expand(self, tokens, features, depth, parent_rows):
        return features, 1


def draft_calls(q, checks, threshold, max_calls=11):
    drafter = DynamicTreeDrafter(1, 60, ConfidenceDepth(max_calls, checks, threshold))
    return drafter.draft(CraftedRunner(q), torch.tensor(0), torch.zeros(1), depth_limit=100)


@pytest.mark.parametrize("q, checks, threshold, expected", [
    (0.96, {5, 7, 9}, -0.2, 5),   # H5 = -0.204
    (0.97, {5, 7, 9}, -0.2, 7),   # H5 = -0.152, H7 = -0.213
    (0.96, {5, 7, 9}, -0.3, 9),   # H7 = -0.286, H9 = -0.367
    (0.96, set(range(1, 12)), -0.3, 8),  # checking every call stops at the first H below x
    (0.999, {5, 7, 9}, -0.3, 11),  # confident all the way: the maximum, never more
])
def test_ddd_stops_exactly_when_the_rule_says(q, checks, threshold, expected):
    draft = draft_calls(q, checks, threshold)
    assert draft.draft_calls == expected
    assert [float(h) for h in draft.confidence] == pytest.approx([c * math.log(q) for c in range(1, expected + 1)], abs=1e-5)
    assert [c.call for c in draft.checks] == sorted(c for c in checks if c <= expected and c < 11)
    assert [c.stop for c in draft.checks] == [False] * (len(draft.checks) - 1) + [expected < 11]
    assert int(draft.pool["depths"].max()) == expected


def test_ddd_never_exceeds_its_maximum_or_checks_off_its_steps(llama, llama_head):
    from ddd import generate

    run = generate(llama, llama_head, "the cat sat", "ddd", max_new_tokens=30, max_draft_calls=7,
                   check_steps="3,5", threshold=-2.0)
    for step in list(run)[1:]:
        assert 1 <= step.draft_calls <= 7
        assert {c.call for c in step.checks} <= {3, 5}
        assert max(n.depth for n in step.pool) == step.draft_calls
        assert len(step.confidence) == step.draft_calls


def test_eagle2_depth_is_fixed():
    draft = DynamicTreeDrafter(1, 60, FixedDepth(6)).draft(CraftedRunner(0.5), torch.tensor(0), torch.zeros(1), 100)
    assert draft.draft_calls == 6 and not draft.checks


def test_depth_limit_caps_the_tree_near_the_context_end():
    draft = draft_calls(0.999, {5, 7, 9}, -0.3)
    assert draft.draft_calls == 11
    capped = DynamicTreeDrafter(1, 60, ConfidenceDepth(11, {5, 7, 9}, -0.3)).draft(
        CraftedRunner(0.999), torch.tensor(0), torch.zeros(1), depth_limit=3)
    assert capped.draft_calls == 3
