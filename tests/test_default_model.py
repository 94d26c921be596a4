"""The embedded default model (SmolLM2-135M-Instruct) with the shipped head: speculative greedy decoding
reproduces plain greedy decoding on real prompts. A difference is tolerated only where it is proven to be
a float near-tie (the top-2 target logits within 1e-4), and then it is reported."""
import warnings

import pytest
import torch

from ddd import encode_prompt, generate, load_target, resolve_head

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the factorial of n.",
    "Give me three tips for staying focused while studying.",
    "Translate to French: The weather is nice today.",
]


@pytest.fixture(scope="module")
def default():
    target = load_target()
    head, _ = resolve_head(None, target)
    return target, head


def top2_gap(target, ids):
    with torch.no_grad():
        logits = target.model(torch.tensor([ids])).logits[0, -1]
    top = logits.topk(2).values
    return float(top[0] - top[1])


@pytest.mark.parametrize("method", ["eagle2", "ddd"])
def test_speculative_greedy_reproduces_plain_greedy(default, method):
    target, head = default
    for prompt in PROMPTS:
        plain = generate(target, None, prompt, "plain", max_new_tokens=48)
        run = generate(target, head, prompt, method, max_new_tokens=48, total_tokens=24)
        list(plain), list(run)
        if run.token_ids == plain.token_ids:
            continue
        first = next(i for i, (a, b) in enumerate(zip(run.token_ids, plain.token_ids)) if a != b)
        gap = top2_gap(target, encode_prompt(target, prompt) + plain.token_ids[:first])
        assert gap < 1e-4, f"{method} differs from plain at token {first} of {prompt!r} without a near-tie ({gap})"
        warnings.warn(f"{method}: float near-tie at token {first} of {prompt!r} (top-2 gap {gap:.2e})")


def test_int8_speculative_greedy_reproduces_int8_plain_greedy():
    """int8 has no float near-ties to excuse: its linears are row-invariant and its attention exact."""
    target = load_target(dtype="int8")
    head, _ = resolve_head(None, target)
    for prompt in PROMPTS[:2]:
        plain = generate(target, None, prompt, "plain", max_new_tokens=48)
        list(plain)
        for method in ("eagle2", "ddd"):
            run = generate(target, head, prompt, method, max_new_tokens=48, total_tokens=24)
            list(run)
            assert run.token_ids == plain.token_ids, (method, prompt)
