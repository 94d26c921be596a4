"""Operations as a cost (ddd/ops.py): counted per step and phase, without changing a token, and within the
budgets the engine keeps on a target of the default model's shape (30 layers, three query heads a key/value
head) with an EAGLE-3 head: a draft call at most 80 operations, the rest of a speculative step at most 1.15 plain
steps (docs/algorithms.md, "Operations")."""
import tempfile

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ddd import generate, load_target, new_eagle3_head
from ddd import metrics
from tests.tiny import PROMPTS, tiny_tokenizer


def test_counting_changes_no_token(llama, llama_head):
    for method in ("plain", "eagle2", "ddd"):
        head = llama_head if method != "plain" else None
        counted = generate(llama, head, PROMPTS[0], method, max_new_tokens=20, count_ops=True)
        plain = generate(llama, head, PROMPTS[0], method, max_new_tokens=20)
        list(counted), list(plain)
        assert counted.token_ids == plain.token_ids
        assert all(s.ops is not None and s.ops.total > 0 for s in counted.trace.steps)
        assert all(s.ops is None for s in plain.trace.steps)


def test_a_plain_step_is_all_verification_and_a_speculative_step_drafts(llama, llama_head):
    plain = list(generate(llama, None, PROMPTS[1], "plain", max_new_tokens=8, count_ops=True))
    assert all(s.ops.draft == 0 and s.ops.verify > 0 for s in plain)
    steps = list(generate(llama, llama_head, PROMPTS[1], "eagle2", max_new_tokens=8, count_ops=True))[1:]
    assert all(s.ops.draft > 0 and s.ops.verify > 0 and s.ops.other > 0 for s in steps)


def test_the_figures_pool_the_counts(llama, llama_head):
    run = generate(llama, llama_head, PROMPTS[2], "ddd", max_new_tokens=16, count_ops=True)
    steps = [s for s in run if not s.prefill]
    figures = metrics.op_figures(metrics.counts_from_steps(run.trace.steps))
    total = sum(s.ops.total for s in steps)
    assert figures["ops_per_token"] == pytest.approx(total / sum(len(s.token_ids) for s in steps))
    assert figures["ops_per_draft_call"] == pytest.approx(sum(s.ops.draft for s in steps)
                                                          / sum(s.draft_calls for s in steps))
    uncounted = metrics.op_figures(metrics.counts_from_steps(list(generate(llama, llama_head, PROMPTS[2], "ddd",
                                                                           max_new_tokens=4))))
    assert set(uncounted.values()) == {None}


@pytest.fixture(scope="module")
def default_shaped():
    """A random target of the default model's structure (30 layers, 9 query heads on 3 key/value heads), narrow."""
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = tiny_tokenizer(folder)
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=72, intermediate_size=96,
                                     num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                     max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id)).save_pretrained(folder)
        target = load_target(folder)
    return target, new_eagle3_head(target, layers=(2, 15, 27))


@pytest.mark.parametrize("method", ["eagle2", "ddd"])
def test_draft_calls_and_verification_stay_within_their_budgets(default_shaped, method):
    target, head = default_shaped
    plain = generate(target, None, PROMPTS[0], "plain", max_new_tokens=12, count_ops=True)
    plain_step = metrics.op_figures(metrics.counts_from_steps(list(plain)))["ops_per_step"]
    run = generate(target, head, PROMPTS[0], method, max_new_tokens=12, count_ops=True)  # the papers' settings
    figures = metrics.op_figures(metrics.counts_from_steps(list(run)))
    assert figures["ops_per_draft_call"] <= 80
    assert figures["ops_rest_per_step"] <= 1.15 * plain_step
