"""The embedded default model (SmolLM2-135M-Instruct) with the shipped head: speculative greedy decoding
reproduces plain greedy decoding on real prompts. A difference is tolerated only where it is proven to be
a float near-tie (the top-2 target logits within 1e-4), and then it is reported."""
import warnings

import pytest
import torch

from ddd import encode_prompt, generate, load_head, load_target, new_head, resolve_head, save_head

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


def test_the_shipped_head_belongs_to_the_default_model_and_its_drafts_get_accepted(default):
    target, head = default
    assert head.name == "shipped head"
    run = generate(target, head, PROMPTS[1], "eagle2", max_new_tokens=48)
    list(run)
    assert run.trace.summary["tau"] > 1.2  # tokens per target forward; a random head gives about 1.0


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


@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_speculative_greedy_reproduces_plain_greedy_exactly_in_cpu_precisions(precision):
    """No near-ties to excuse here: on a CPU these modes compute every row independently of the others."""
    target = load_target(dtype=precision)
    head, _ = resolve_head(None, target)
    for prompt in PROMPTS[:2]:
        plain = generate(target, None, prompt, "plain", max_new_tokens=48)
        list(plain)
        for method in ("eagle2", "ddd"):
            run = generate(target, head, prompt, method, max_new_tokens=48, total_tokens=24)
            list(run)
            assert run.token_ids == plain.token_ids, (method, prompt)


@pytest.mark.parametrize("precision", ["int8", "bfloat16"])
def test_a_token_gets_the_same_hidden_state_alone_or_with_others(precision):
    """What the exact greedy equality above stands on. Native bfloat16 kernels fail this on the default model
    (their sums depend on the number of rows); the CPU modes compute every row on its own."""
    from transformers import DynamicCache

    target = load_target(dtype=precision)
    ids = torch.tensor([encode_prompt(target, PROMPTS[1])])
    start = ids.shape[1] - 6

    def first_new_hidden(chunk: int) -> torch.Tensor:
        cache = DynamicCache(config=target.model.config)
        with torch.inference_mode():
            target.model.model(input_ids=ids[:, :start], cache=cache, use_cache=True)
            out = target.model.model(input_ids=ids[:, start:start + chunk], cache=cache, use_cache=True)
        return out.last_hidden_state[0, 0]

    alone = first_new_hidden(1)
    for chunk in (3, 6):
        assert torch.equal(first_new_hidden(chunk), alone)


def test_the_shipped_head_drafts_deeper_than_an_eagle_head_loaded_beside_it(default, tmp_path):
    """The shipped EAGLE-3 head against an EAGLE-1/2 checkpoint of the default model's shape (an untrained
    one, written here), on a real prompt at the papers' settings: both layouts load for the same target, both
    outputs are plain decoding's, and the shipped head gets more tokens per target forward."""
    target, head = default
    previous = load_head(save_head(new_head(target), tmp_path / "eagle-head"), target)
    assert (head.kind, previous.kind) == ("eagle3", "eagle")
    plain = generate(target, None, PROMPTS[3], "plain", max_new_tokens=48)
    new, old = (generate(target, h, PROMPTS[3], "eagle2", max_new_tokens=48) for h in (head, previous))
    list(plain), list(new), list(old)
    assert new.token_ids == old.token_ids == plain.token_ids
    assert new.trace.summary["tau"] > old.trace.summary["tau"] + 0.2, (new.trace.summary["tau"], old.trace.summary["tau"])


def test_the_converted_copy_is_written_whole_even_when_two_processes_make_it_at_once(tmp_path):
    from ddd.models import write_in_place

    out = tmp_path / "model"

    def first(tmp):  # another process finishes its copy while this one is still writing
        (tmp / "config.json").write_text("mine")
        write_in_place(out, lambda other: (other / "config.json").write_text("theirs"))

    assert write_in_place(out, first) == out
    assert (out / "config.json").read_text() == "theirs"  # the copy already in place is kept whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no partial copy left behind
    with pytest.raises(OSError):
        write_in_place(tmp_path / "other", lambda tmp: (tmp / "missing" / "config.json").write_text("x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
