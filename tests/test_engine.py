"""Greedy losslessness, tree invariants and trace recording on tiny random Llama and Qwen2 models."""
import pytest
import torch

from ddd import generate
from ddd.drafting import DynamicTreeDrafter, HeadRunner
from ddd.settings import Eagle2Settings
from ddd.tree import DraftTree
from tests.tiny import PROMPTS, TREE_SETTINGS, UNSEEN, runs_equal_to_plain


def decode(target, head, prompt, method, **settings):
    run = generate(target, head, prompt, method, max_new_tokens=40, **settings)
    steps = list(run)
    return run, steps


@pytest.mark.parametrize("family", ["llama", pytest.param("qwen", marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ["eagle", "eagle2", "ddd", "cost"])
def test_greedy_equals_plain_greedy(request, family, method):
    target = request.getfixturevalue(family)
    head = request.getfixturevalue(f"{family}_head")
    accepted = 0
    for prompt in PROMPTS[:3] + UNSEEN:
        plain, _ = decode(target, None, prompt, "plain")
        for settings in TREE_SETTINGS[method]:
            run, steps = decode(target, head, prompt, method, **settings)
            assert run.token_ids == plain.token_ids, (prompt, settings)
            assert run.text == plain.text
            accepted += sum(s.accepted for s in steps)
    assert accepted > 50  # the fitted head gets drafts accepted: long accepted paths were exercised


def test_recording_does_not_change_tokens(llama, llama_head):
    recorded, _ = decode(llama, llama_head, PROMPTS[0], "ddd")
    bare = generate(llama, llama_head, PROMPTS[0], "ddd", max_new_tokens=40, record=False)
    list(bare)
    assert bare.token_ids == recorded.token_ids
    assert all(not s.pool for s in bare.trace.steps)


def test_steps_add_up_to_the_text(llama, llama_head):
    run, steps = decode(llama, llama_head, PROMPTS[1], "eagle2")
    assert "".join(s.text for s in steps) == run.text
    assert [t for s in steps for t in s.token_ids] == run.token_ids
    assert run.trace.summary["new_tokens"] == len(run.token_ids) == 40


def test_tree_invariants(llama, llama_head):
    _, steps = decode(llama, llama_head, PROMPTS[2], "eagle2", beam_width=4, total_tokens=20)
    for step in steps[1:]:
        kept = [n for n in step.pool if n.status != "pruned"]
        assert len(kept) == step.verified <= 20
        index = {n.index: n for n in step.pool}
        for node in step.pool[1:]:
            assert node.parent < node.index  # parents before children
            assert node.depth == index[node.parent].depth + 1
            assert node.score == pytest.approx(index[node.parent].score + node.logprob, abs=1e-4)
            if node.status != "pruned":
                assert index[node.parent].status != "pruned"  # rerank keeps every kept node's parent
        path = step.accepted_path
        assert path[0] == 0 and [index[i].depth for i in path] == list(range(len(path)))


def test_every_step_emits_its_accepted_path_and_bonus_until_the_budget_cuts_the_last(llama, llama_head):
    run, steps = decode(llama, llama_head, PROMPTS[2], "eagle2", beam_width=4, total_tokens=20)
    *whole, last = steps[1:]
    for step in whole:
        tokens = {n.index: n.token_id for n in step.pool}
        assert step.token_ids == [tokens[i] for i in step.accepted_path[1:]] + [step.bonus_id]
        assert step.accepted == len(step.accepted_path) - 1
    # The last step emits only what fits in max_new_tokens, and counts only the drafts it emitted as accepted.
    assert run.trace.stop_reason == "max_new_tokens"
    tokens = {n.index: n.token_id for n in last.pool}
    full = [tokens[i] for i in last.accepted_path[1:]] + [last.bonus_id]
    assert last.token_ids == full[: 40 - sum(len(s.token_ids) for s in steps[:-1])]
    assert last.accepted == len(last.token_ids) - 1


def test_each_speculative_step_records_where_its_accepted_chain_ended(llama, llama_head):
    """tree_end: nothing was drafted below the last accepted node; pruned: the target's next token was drafted
    there and dropped by the rerank; not_drafted: the drafts there missed it."""
    seen = set()
    for prompt in PROMPTS[:3] + UNSEEN:
        _, steps = decode(llama, llama_head, prompt, "eagle2", beam_width=4, draft_calls=2, total_tokens=8)
        for step in steps[1:]:
            children = [n for n in step.pool if n.parent == step.accepted_path[-1]]
            match = [n for n in children if n.token_id == step.bonus_id]
            assert step.chain_end == ("tree_end" if not children else "pruned" if match else "not_drafted")
            assert all(n.status == "pruned" for n in match)
            seen.add(step.chain_end)
    assert seen == {"tree_end", "pruned", "not_drafted"}


def test_a_chain_ends_outside_the_vocabulary_where_the_target_picks_a_token_the_head_cannot_draft(llama):
    from ddd.eagle3 import new_eagle3_head

    head = new_eagle3_head(llama, draft_vocab=torch.arange(0, llama.vocab_size, 2), layers=(0, 1, 2))
    _, steps = decode(llama, head, PROMPTS[0], "eagle2", beam_width=4, total_tokens=8)
    ends = {step.chain_end for step in steps[1:]}
    assert "outside_vocab" in ends
    for step in steps[1:]:
        if step.chain_end in ("outside_vocab", "not_drafted"):
            assert (step.chain_end == "outside_vocab") == (step.bonus_id % 2 == 1)


def test_ancestor_mask_and_positions():
    # root -> a, b; a -> c; c -> d
    tree = DraftTree(tokens=torch.tensor([5, 6, 7, 8, 9]), parents=torch.tensor([-1, 0, 0, 1, 3]),
                     depths=torch.tensor([0, 1, 1, 2, 3]), pool_index=torch.arange(5))
    mask = tree.ancestor_mask
    expected = [{0}, {0, 1}, {0, 2}, {0, 1, 3}, {0, 1, 3, 4}]
    assert [set(torch.nonzero(row).flatten().tolist()) for row in mask] == expected


def test_attention_mask_shows_each_node_the_prefix_and_its_ancestors():
    tree = DraftTree(tokens=torch.tensor([5, 6, 7]), parents=torch.tensor([-1, 0, 0]),
                     depths=torch.tensor([0, 1, 1]), pool_index=torch.arange(3))
    visible = tree.attention_mask(past=2, dtype=torch.float32)[0, 0] == 0
    assert visible.tolist() == [[True, True, True, False, False],
                                [True, True, True, True, False],
                                [True, True, True, False, True]]


def test_a_chain_is_one_path():
    chain = DraftTree.chain(torch.tensor([4, 3, 2]))
    assert chain.parents.tolist() == [-1, 0, 1] and chain.depths.tolist() == [0, 1, 2]
    assert chain.ancestor_mask.tolist() == torch.ones(3, 3, dtype=torch.bool).tril().tolist()


def test_verify_positions_are_prefix_plus_depth(llama, llama_head, monkeypatch):
    seen = []
    original = llama.model.model.forward

    def spy(*args, **kwargs):
        if kwargs.get("attention_mask") is not None:
            seen.append((kwargs["position_ids"][0].tolist(), kwargs["cache"].get_seq_length()))
        return original(*args, **kwargs)

    monkeypatch.setattr(llama.model.model, "forward", spy)
    run = generate(llama, llama_head, PROMPTS[0], "eagle2", max_new_tokens=12)
    steps = list(run)
    assert seen
    for (positions, past), step in zip(seen, steps[1:]):
        depths = {n.index: n.depth for n in step.pool}
        kept = [n.index for n in step.pool if n.status != "pruned"]
        assert positions == [past + depths[i] for i in kept]


def test_dynamic_tree_keeps_budget_and_best_scores(llama, llama_head):
    _, steps = decode(llama, llama_head, UNSEEN[0], "eagle2", beam_width=5, draft_calls=5, total_tokens=15)
    for step in steps[1:]:
        kept = [n.score for n in step.pool[1:] if n.status != "pruned"]
        pruned = [n.score for n in step.pool[1:] if n.status == "pruned"]
        assert len(kept) == 14 and len(step.pool) == 1 + 5 + 4 * 25
        assert min(kept) >= max(pruned) - 1e-6
        assert sum(n.in_beam for n in step.pool) == 4 * 5


def test_head_runner_drops_tree_nodes_from_its_cache(llama, llama_head):
    runner = HeadRunner(llama_head, llama)
    hidden = torch.randn(6, llama.hidden_size)
    root_feature = runner.extend(torch.arange(3, 9), hidden)
    drafter = DynamicTreeDrafter.eagle2(Eagle2Settings(beam_width=3, draft_calls=4, total_tokens=10))
    drafter.draft(runner, torch.tensor(8), root_feature, depth_limit=100)
    assert runner.context_length == 6


@pytest.mark.parametrize("kept, want", [([0, 2, 5], [0, 1, 2, 3, 4, 6, 9]),  # moved down
                                        ([0, 1], [0, 1, 2, 3, 4, 5]),  # already in place: only cut
                                        ([0], [0, 1, 2, 3, 4])])
def test_the_target_cache_keeps_the_prefix_and_the_accepted_nodes_in_order(kept, want):
    from transformers import DynamicCache

    from ddd.kvcache import keep_cache

    cache, past = DynamicCache(), 4
    for layer in range(2):  # entry i of layer l holds 10 * l + i, so every move is visible
        entries = (10.0 * layer + torch.arange(past + 6.0)).expand(1, 2, -1)[..., None].expand(-1, -1, -1, 3)
        cache.update(entries.clone(), -entries, layer)
    keep_cache(cache, past, kept, torch.device("cpu"))
    for layer in range(2):
        expected = 10.0 * layer + torch.tensor(want, dtype=torch.float32)
        assert torch.equal(cache.layers[layer].keys[0, 1, :, 0], expected)
        assert torch.equal(cache.layers[layer].values[0, 0, :, 2], -expected)
    assert cache.get_seq_length() == past + len(kept)


# The inner loop runs int8, the app's CPU precision; the test command every one.
@pytest.mark.parametrize("precision", [pytest.param("bfloat16", marks=pytest.mark.slow),
                                       pytest.param("float16", marks=pytest.mark.slow), "int8"])
def test_greedy_equals_plain_greedy_in_every_precision(tiny_llama_dir, llama_head, precision):
    import copy

    from ddd.head import for_target
    from tests.tiny import load_target

    target = load_target(str(tiny_llama_dir), dtype=precision)
    head = for_target(copy.deepcopy(llama_head), target)
    for prompt in PROMPTS[:3]:
        plain = generate(target, None, prompt, "plain", max_new_tokens=30)
        list(plain)
        for method in ("eagle", "eagle2", "ddd"):
            run = generate(target, head, prompt, method, max_new_tokens=30)
            list(run)
            assert run.token_ids == plain.token_ids, (precision, method, prompt)
            assert run.trace.precision == precision


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_greedy_equals_plain_greedy_on_cuda(tiny_llama_dir, llama_head, precision):
    import copy

    from ddd import load_target
    from ddd.head import for_target

    target = load_target(str(tiny_llama_dir), dtype=precision, device="cuda")
    head = for_target(copy.deepcopy(llama_head), target)
    for run in runs_equal_to_plain(target, head, PROMPTS[:3] + UNSEEN, [("eagle2", {}), ("ddd", {})], 30):
        assert run.trace.device.startswith("cuda") and run.trace.precision == precision
