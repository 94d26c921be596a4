"""Whole races with the default tensor device set to `meta`: a tensor the engine makes without naming its device
lands on `meta` and fails at once beside the model's, where on a GPU it would land on the CPU beside a CUDA model.
One mix goes unseen: a CPU tensor indexed by a `meta` index returns values instead of failing."""
from __future__ import annotations

import pytest
import torch

from ddd.engine import generate

PROMPT = list(range(1, 9))
METHODS = ("plain", "eagle", "eagle2", "ddd", "cost")


def race(target, head, method: str) -> list:
    with torch.device("meta"):
        return list(generate(target, head if method != "plain" else None, PROMPT, method, chat=False,
                             max_new_tokens=8, record=True))


@pytest.mark.parametrize("method", METHODS)
def test_a_race_makes_every_tensor_on_the_models_device(llama, llama_head, method):
    steps = race(llama, llama_head, method)
    assert sum(len(s.token_ids) for s in steps) == 8


@pytest.mark.parametrize("method", ("eagle2", "ddd"))
def test_an_eagle3_head_and_grouped_attention_too(qwen, qwen_head, llama, llama_eagle3_head, method):
    assert sum(len(s.token_ids) for s in race(qwen, qwen_head, method)) == 8
    assert sum(len(s.token_ids) for s in race(llama, llama_eagle3_head, method)) == 8
