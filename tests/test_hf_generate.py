"""Every method inside transformers' own `model.generate(custom_generate=ddd.hf.generate, ...)`: greedy output is
plain `model.generate()`'s token for token, sampling keeps plain sampling's distribution, streamers receive the
same text, and what the loop cannot honour is refused in one line."""
import threading

import pytest
import torch
from transformers import TextIteratorStreamer, TextStreamer

import ddd.hf
from ddd import HeadLoadError, SettingsError, encode_prompt
from tests.test_sampling import ALPHA, SAMPLES, SAMPLING, TOP_K, FAST_TREES, chi_square_p, exact_joint
from tests.tiny import PROMPTS, TREE_SETTINGS

METHODS = ("plain", "eagle", "eagle2", "ddd", "cost")
NEW_TOKENS = 40


def prompt_ids(target, prompt=PROMPTS[0]):
    return torch.tensor([encode_prompt(target, prompt)])


def plain_generate(target, ids, **kwargs):
    return target.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, **kwargs)


def ddd_generate(target, ids, head, method="ddd", **kwargs):
    return target.model.generate(ids, custom_generate=ddd.hf.generate, head=head, method=method,
                                 max_new_tokens=NEW_TOKENS, **kwargs)


# Each method on both tiny models with an EAGLE head, and the drafting methods with an EAGLE-3 head too.
RUNS = [(model, head, method) for model, head in (("llama", "llama_head"), ("qwen", "qwen_head")) for method in METHODS]
RUNS += [("llama", "llama_eagle3_head", method) for method in METHODS[1:]]


# The inner loop (pytest -m "not slow") runs the Llama model with its EAGLE head; the test command every run.
@pytest.mark.parametrize("model, head, method", [
    pytest.param(*run, id="-".join(run), marks=() if run[:2] == ("llama", "llama_head") else pytest.mark.slow)
    for run in RUNS])
def test_greedy_generate_returns_plain_generates_tokens(request, model, head, method):
    target, head = request.getfixturevalue(model), request.getfixturevalue(head)
    for prompt in PROMPTS[:3]:
        ids = prompt_ids(target, prompt)
        assert torch.equal(ddd_generate(target, ids, head, method), plain_generate(target, ids)), (prompt, method)


def test_the_output_carries_the_runs_trace(llama, llama_head):
    ids = prompt_ids(llama)
    out = ddd_generate(llama, ids, llama_head, return_dict_in_generate=True, threshold=-0.5)
    new = out.sequences[0, ids.shape[1]:].tolist()
    assert out.trace.method == "ddd" and out.trace.settings["threshold"] == -0.5
    assert [t for step in out.trace.steps for t in step.token_ids] == new
    assert out.trace.summary["tau"] > 1  # the fitted head's drafts were accepted
    assert out.trace.steps[1].pool  # the trees are recorded


def test_eos_tokens_come_from_the_generation_config(llama, llama_head):
    ids = prompt_ids(llama)
    answer = plain_generate(llama, ids)[0, ids.shape[1]:].tolist()
    eos = answer[5]  # a token the answer reaches: both loops must stop right after it
    plain = plain_generate(llama, ids, eos_token_id=eos)
    assert plain.shape[1] <= ids.shape[1] + 6
    assert torch.equal(ddd_generate(llama, ids, llama_head, eos_token_id=eos), plain)


def test_max_length_bounds_the_answer_as_max_new_tokens_does(llama, llama_head):
    ids = prompt_ids(llama)
    out = llama.model.generate(ids, custom_generate=ddd.hf.generate, head=llama_head, max_length=ids.shape[1] + 7)
    assert torch.equal(out, llama.model.generate(ids, max_length=ids.shape[1] + 7))


def test_a_left_padded_prompt_decodes_as_the_prompt_alone(llama, llama_head):
    ids = prompt_ids(llama)
    padded = torch.cat((torch.zeros(1, 3, dtype=ids.dtype), ids), dim=1)
    mask = torch.cat((torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)), dim=1)
    out = ddd_generate(llama, padded, llama_head, attention_mask=mask)
    assert torch.equal(out[:, 3:], ddd_generate(llama, ids, llama_head))


def test_the_generation_configs_sampling_reaches_the_engine(llama, llama_head):
    out = ddd_generate(llama, prompt_ids(llama), llama_head, do_sample=True, temperature=0.7, top_k=9, top_p=0.8,
                       return_dict_in_generate=True)
    assert {k: out.trace.sampling[k] for k in ("temperature", "top_k", "top_p")} == dict(temperature=0.7, top_k=9,
                                                                                         top_p=0.8)


def test_torch_manual_seed_repeats_a_sampled_run(llama, llama_head):
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append(ddd_generate(llama, prompt_ids(llama), llama_head, do_sample=True))
    assert torch.equal(*runs)


@pytest.mark.parametrize("method, sampling", [("ddd", SAMPLING), ("cost", TOP_K)], ids=["ddd-top-p", "cost-top-k"])
@pytest.mark.slow
def test_sampled_generate_follows_plain_sampling(llama, llama_head, method, sampling):
    """The chi-square test of tests/test_sampling.py, on tokens drawn through generate()."""
    from ddd import Sampling

    exact = exact_joint(llama, PROMPTS[3], 3, Sampling(**sampling))
    # The cost rule at costs cheap enough that it drafts on the tiny model, so that drafts get accepted.
    trees = {**FAST_TREES, "cost": {**FAST_TREES["cost"], **TREE_SETTINGS["cost"][1]}}
    ids = prompt_ids(llama, PROMPTS[3])
    counts, accepted = {}, 0
    torch.manual_seed(0)
    for _ in range(SAMPLES):
        out = llama.model.generate(ids, custom_generate=ddd.hf.generate, head=llama_head, method=method,
                                   max_new_tokens=3, do_sample=True, return_dict_in_generate=True,
                                   **{"top_k": None, **sampling}, **trees[method])
        key = tuple(out.sequences[0, ids.shape[1]:].tolist())
        counts[key] = counts.get(key, 0) + 1
        accepted += sum(step.accepted for step in out.trace.steps)
    p, cells = chi_square_p(counts, exact, SAMPLES)
    assert cells >= 4, "the distribution is too peaked for a meaningful test"
    assert p > ALPHA, f"{method}: generate()'s samples deviate from plain sampling (p = {p:.2e} over {cells} cells)"
    assert accepted > SAMPLES * 0.1


def test_a_text_streamer_prints_what_plain_generate_prints(llama, llama_head, capsys):
    ids = prompt_ids(llama)
    plain_generate(llama, ids, streamer=TextStreamer(llama.tokenizer, skip_prompt=True))
    plain = capsys.readouterr().out
    ddd_generate(llama, ids, llama_head, streamer=TextStreamer(llama.tokenizer, skip_prompt=True))
    assert capsys.readouterr().out == plain and plain.strip()


def test_a_text_iterator_streamer_yields_what_plain_generate_yields(llama, llama_head):
    def streamed(**kwargs) -> list[str]:
        streamer = TextIteratorStreamer(llama.tokenizer, skip_prompt=True, timeout=120)
        thread = threading.Thread(target=llama.model.generate, kwargs=dict(inputs=prompt_ids(llama), streamer=streamer,
                                                                          max_new_tokens=NEW_TOKENS, **kwargs))
        thread.start()
        pieces = list(streamer)
        thread.join()
        return pieces

    pieces = streamed(custom_generate=ddd.hf.generate, head=llama_head, method="eagle2")
    assert "".join(pieces) == "".join(streamed(do_sample=False)) and len(pieces) > 1


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(num_return_sequences=2, do_sample=True), ddd.hf.GenerateError, "one sequence at a time"),
    (dict(threshold=5), SettingsError, "threshold must be a number from -1,000 to 0"),
    (dict(method="eagle2", threshold=-0.5), SettingsError, "Unknown setting(s) threshold for eagle2"),
    (dict(method="beam"), SettingsError, "Unknown method 'beam'"),
    (dict(head="/no/such/head"), HeadLoadError, "No draft head at /no/such/head"),
    (dict(head=3), HeadLoadError, "head must be a head directory"),
    (dict(repetition_penalty=1.3), ddd.hf.GenerateError, "not with RepetitionPenaltyLogitsProcessor"),
    (dict(do_sample=True, min_p=0.1), ddd.hf.GenerateError, "not with MinPLogitsWarper"),
    (dict(num_beams=2), ddd.hf.GenerateError, "not a beam search"),
    (dict(return_dict_in_generate=True, output_scores=True), ddd.hf.GenerateError, "not output_scores"),
])
def test_what_the_loop_cannot_honour_is_refused_in_one_line(llama, llama_head, kwargs, error, message):
    with pytest.raises(error) as caught:
        ddd_generate(llama, prompt_ids(llama), **{"head": llama_head, **kwargs})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_batch_of_two_prompts_is_refused(llama, llama_head):
    ids = prompt_ids(llama)
    with pytest.raises(ddd.hf.GenerateError, match="batch size 1.*holds 2 rows"):
        ddd_generate(llama, torch.cat((ids, ids)), llama_head)


def test_a_model_without_a_given_head_is_told_to_give_one(llama):
    with pytest.raises(SettingsError, match="needs a draft head"):
        ddd_generate(llama, prompt_ids(llama), None)


@pytest.fixture(scope="module")
def default_model():
    from ddd import load_target

    return load_target()


@pytest.fixture(scope="module")
def default_plain(default_model) -> dict[str, list[int]]:
    """Plain `generate()`'s tokens on the default model for each question, made once for every method's test."""
    from tests.test_default_model import PROMPTS as QUESTIONS

    return {q: plain_generate(default_model, prompt_ids(default_model, q))[0].tolist() for q in QUESTIONS[:2]}


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS[1:])
def test_the_default_model_and_its_shipped_head_decode_as_plain_generate(default_model, default_plain, method):
    """head=None picks the shipped head for the default model. As in tests/test_default_model.py, a difference
    would be tolerated only at a proven float near-tie."""
    from tests.test_default_model import top2_gap

    for question, plain in default_plain.items():
        ids = prompt_ids(default_model, question)
        out = ddd_generate(default_model, ids, None, method, return_dict_in_generate=True)
        assert out.trace.head == "shipped head"
        ours = out.sequences[0].tolist()
        if ours != plain:
            first = next((i for i, (a, b) in enumerate(zip(ours, plain)) if a != b), min(len(ours), len(plain)))
            assert top2_gap(default_model, plain[:first]) < 1e-4, (question, method, first)
