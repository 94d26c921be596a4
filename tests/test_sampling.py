"""Sampled speculative decoding keeps plain sampling's distribution exactly.

Over many seeds we draw the first three new tokens with each method and compare their joint frequencies
with the exact probabilities computed from the target (a chi-square goodness-of-fit test). Cells with an
expected count under 5 are pooled. The false-alarm rate of each test is ALPHA.
"""

import pytest
import torch
from scipy.stats import chisquare

from ddd import Sampling, encode_prompt, generate
from tests.tiny import PROMPTS

ALPHA = 1e-3
SAMPLES = 1000
SAMPLING = dict(temperature=1.0, top_p=0.95)
# top-k keeps few enough tokens that the tree's drafts often fall outside it: rejections that must still
# leave plain top-k sampling's distribution.
TOP_K = dict(temperature=1.0, top_k=6)
FAST_TREES = {"eagle": {}, "eagle2": {"beam_width": 4, "draft_calls": 3, "total_tokens": 12},
              "ddd": {"beam_width": 4, "max_draft_calls": 4, "check_steps": "all", "threshold": -1.0, "total_tokens": 12},
              # Pinned cheap: on a tiny model a draft call costs about a target forward, so measured costs would
              # rightly draft little, and the test needs drafts to accept or reject.
              "cost": {"beam_width": 4, "max_draft_calls": 4, "total_tokens": 12, "pin_costs": True,
                       "draft_cost": 0.01, "verify_base": 0, "verify_cost": 0.001}}


def exact_joint(target, prompt, length, sampling):
    """P(first `length` tokens) by enumerating every prefix with probability above 1e-5."""
    from ddd.acceptance import probabilities

    model = target.model
    base = encode_prompt(target, prompt)
    table = {(): 1.0}
    with torch.no_grad():
        for _ in range(length):
            grown = {}
            for prefix, p in table.items():
                logits = model(torch.tensor([base + list(prefix)])).logits[0, -1]
                probs = probabilities(logits, sampling)
                for tok in torch.nonzero(probs * p > 1e-5).flatten().tolist():
                    grown[prefix + (tok,)] = p * float(probs[tok])
            table = grown
    return table


def sample_counts(target, head, prompt, method, settings, length, seeds, sampling=SAMPLING):
    counts, accepted = {}, 0
    for seed in seeds:
        run = generate(target, head, prompt, method, max_new_tokens=length, sampling=Sampling(seed=seed, **sampling),
                       record=False, **settings)
        steps = list(run)
        accepted += sum(s.accepted for s in steps)
        key = tuple(run.token_ids[:length])
        counts[key] = counts.get(key, 0) + 1
    return counts, accepted


def chi_square_p(counts, exact, n):
    cells = sorted(exact, key=exact.get, reverse=True)
    observed, expected, rest_o, rest_e = [], [], 0, 0.0
    for cell in cells:
        if exact[cell] * n >= 5:
            observed.append(counts.get(cell, 0))
            expected.append(exact[cell] * n)
        else:
            rest_o += counts.get(cell, 0)
            rest_e += exact[cell] * n
    rest_o += sum(c for k, c in counts.items() if k not in exact)
    observed.append(rest_o)
    expected.append(n - sum(expected))
    return chisquare(observed, expected).pvalue, len(observed)


@pytest.fixture(scope="module")
def exact(llama):
    return exact_joint(llama, PROMPTS[3], 3, Sampling(**SAMPLING))


# Acceptance is the same code whatever drafted the tree; the EAGLE-3 head (its own draft vocabulary, mapped to
# the target's) runs once, under the method that drafts the most varied trees.
RUNS = [("plain", None)] + [(method, "llama_head") for method in ("eagle", "eagle2", "ddd", "cost")] + [("ddd", "llama_eagle3_head")]


# The inner loop (pytest -m "not slow") samples DDD with top-p; the test command samples every run.
INNER_LOOP = {("ddd", "llama_head")}
# The cost rule samples top-k in tests/test_hf_generate.py (the same engine inside transformers' generate loop).
TOP_K_METHODS = ["plain", "eagle", "eagle2", "ddd"]


def inner_loop_or_slow(runs: list, ids: list[str]) -> list:
    return [pytest.param(*(r if isinstance(r, tuple) else (r,)), id=i,
                         marks=() if r in INNER_LOOP else pytest.mark.slow) for r, i in zip(runs, ids)]


@pytest.mark.parametrize("method, head", inner_loop_or_slow(RUNS, [m if h is None else f"{m}-{h}" for m, h in RUNS]))
def test_sampled_tokens_follow_plain_sampling(request, llama, exact, method, head):
    head = None if head is None else request.getfixturevalue(head)
    counts, accepted = sample_counts(llama, head, PROMPTS[3], method, FAST_TREES.get(method, {}), 3,
                                     range(SAMPLES))
    p, cells = chi_square_p(counts, exact, SAMPLES)
    assert cells >= 4, "the distribution is too peaked for a meaningful test"
    assert p > ALPHA, f"{method}: sampled tokens deviate from plain sampling (p = {p:.2e} over {cells} cells)"
    if method != "plain":
        assert accepted > SAMPLES * 0.1  # a draft token was accepted in a good share of the samples


@pytest.fixture(scope="module")
def exact_top_k(llama):
    return exact_joint(llama, PROMPTS[3], 3, Sampling(**TOP_K))


@pytest.mark.parametrize("method", inner_loop_or_slow(TOP_K_METHODS, TOP_K_METHODS))
def test_top_k_sampled_tokens_follow_plain_top_k_sampling(llama, llama_head, exact_top_k, method):
    counts, accepted = sample_counts(llama, llama_head if method != "plain" else None, PROMPTS[3], method,
                                     FAST_TREES.get(method, {}), 3, range(SAMPLES), TOP_K)
    p, cells = chi_square_p(counts, exact_top_k, SAMPLES)
    assert cells >= 4, "the distribution is too peaked for a meaningful test"
    assert p > ALPHA, f"{method}: top-k samples deviate from plain top-k sampling (p = {p:.2e} over {cells} cells)"
    if method != "plain":
        assert accepted > SAMPLES * 0.1


@pytest.mark.slow
def test_the_test_detects_a_wrong_distribution(llama, exact):
    """Power check: plain sampling at a slightly different temperature must be flagged."""
    counts = {}
    for seed in range(SAMPLES):
        run = generate(llama, None, PROMPTS[3], "plain", max_new_tokens=3, record=False,
                       sampling=Sampling(seed=seed, temperature=1.25, top_p=0.95))
        list(run)
        key = tuple(run.token_ids)
        counts[key] = counts.get(key, 0) + 1
    p, _ = chi_square_p(counts, exact, SAMPLES)
    assert p < ALPHA


def test_same_seed_same_tokens(llama, llama_head):
    runs = [generate(llama, llama_head, PROMPTS[0], "ddd", max_new_tokens=20, temperature=0.8, seed=7) for _ in range(2)]
    for run in runs:
        list(run)
    assert runs[0].token_ids == runs[1].token_ids
