"""One verify forward and one draft call of every catalog pair, traced at full size on fake CUDA tensors in float16
(the CUDA-only branches themselves: tests/test_gpu_paths.py).

Fake CUDA on a CPU-only torch. FakeTensorMode makes fake tensors on device "cuda" here (shapes, dtypes and devices
without memory or values), and most operations run on them. What fails, with "PyTorch is not linked with support for
cuda devices", is whatever opens a CUDA device guard or asks CUDA's runtime: Python indexing (`x[...]`, `x[...] =`),
`~x`, `.contiguous()`, `torch.tensor(..., device="cuda")`, `.to("cuda")` from another device, random initialisation,
and autograd's bookkeeping of a parameter (which aborts the process). So the models are built on the fake device
without initialisation (transformers' no_init_weights) and in float16 from the start, run in inference mode, and
`PastCudaGuards` takes the first four past their guard. Module.to cannot move fake parameters at all (it swaps them,
and the fake mode's weak references forbid the swap), so the traces build each head where for_target would leave it
and the move itself is the meta test in tests/test_gpu_paths.py. The configs are the catalog's TARGET_SIZES, the
numbers of each target's config.json (catalog.model_config would fetch the files themselves from the hub); each head
has the kind and draft vocabulary catalog.head_shape gives its pair. The tree verified is one the engine's EAGLE-2
drafter grew on the tiny Llama at the papers' settings, and its attention mask is made by DraftTree.attention_mask on
the fake device from a fake ancestor mask of the tree's size (the ancestor mask itself loops once per level of the
tree, a number a fake tensor does not hold).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.initialization import no_init_weights

from ddd.catalog import DEFAULT_HUB_ID, PAIRS, TARGET_SIZES, ModelPair, head_shape, target_size
from ddd.drafting import HeadRunner
from ddd.eagle3 import Eagle3Head, default_aux_layers
from ddd.head import DraftHead, EagleHead, for_target, target_config_fields
from ddd.models import Target, load_target
from ddd.precision import apply_precision
from ddd.settings import method_settings
from ddd.tree import DraftTree
from tests.test_gpu_paths import CUDA, PROMPT, drafted_tree, prefilled, sdpa_layers


GUARDED = (torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.__invert__, torch.Tensor.contiguous)


class PastCudaGuards(TorchFunctionMode):
    """Fake CUDA tensors past the Python bindings that open a CUDA device guard (GUARDED, and torch.tensor made on
    CUDA), which a CPU-only torch cannot open: for those calls the fake tensors report the CPU, and what comes back
    reports CUDA. The fake mode works out the same shapes and dtypes on either device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.tensor and torch.device(kwargs.get("device") or "cpu").type == "cuda":
            made = func(*args, **{**kwargs, "device": "cpu"})
            # Without its real value: the fake mode would compute with that on the CPU and hand back CPU results.
            made.fake_device, made.constant = CUDA, None
            return made
        if func not in GUARDED:
            return func(*args, **kwargs)
        fakes = [t for t in tree_leaves((args, kwargs)) if isinstance(t, FakeTensor) and t.fake_device == CUDA]
        for t in fakes:
            t.fake_device = torch.device("cpu")
        try:
            out = func(*args, **kwargs)
        finally:
            for t in fakes:
                t.fake_device = CUDA
        if fakes and isinstance(out, FakeTensor):
            out.fake_device = CUDA
        return out


@dataclass
class FakePair:
    """A catalog pair at full size on fake CUDA in float16: the target as load_target prepares it for a GPU, the head
    as for_target leaves it."""

    mode: FakeTensorMode
    target: Target
    head: DraftHead

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        with self.mode, PastCudaGuards(), torch.device(CUDA), torch.inference_mode():
            yield


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def fake_pair(pair: ModelPair, tokenizer) -> FakePair:
    """`pair` on fake CUDA; `tokenizer` may be any (a run decodes its prompt's ids with it)."""
    mode = FakeTensorMode()
    with mode, PastCudaGuards(), torch.device(CUDA), no_init_weights(), torch.no_grad(), default_dtype(torch.float16):
        config = LlamaConfig(**TARGET_SIZES[pair.model or DEFAULT_HUB_ID])
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16).eval().requires_grad_(False)
        target = Target(apply_precision(model, "float16", "cuda"), tokenizer, pair.label, "float16")
        kind, draft_vocab = head_shape(pair)
        fields = LlamaConfig(**target_config_fields(target))
        if kind == "eagle3":
            # The target's first ids: which ones changes no shape.
            d2t = torch.zeros(draft_vocab or target.vocab_size, dtype=torch.long)
            head = Eagle3Head(fields, default_aux_layers(config.num_hidden_layers), d2t,
                              target_hidden=target.hidden_size)
        else:
            head = EagleHead(fields)
    return FakePair(mode, target, head.eval().requires_grad_(False))


def fake_copy(tree: DraftTree) -> DraftTree:
    """`tree` on fake CUDA, its ancestor mask given: working it out loops once per level of the tree, a number a fake
    tensor does not hold."""
    copied = DraftTree(*(torch.empty(t.shape, dtype=t.dtype) for t in (tree.tokens, tree.parents, tree.depths,
                                                                         tree.pool_index)))
    copied.ancestor_mask = torch.empty(len(tree), len(tree), dtype=torch.bool)
    return copied


@pytest.fixture(scope="module")
def papers_tree(llama) -> DraftTree:
    return drafted_tree(llama)


@pytest.fixture(scope="module", params=PAIRS, ids=[p.label.split(" + ")[0] for p in PAIRS])
def fake(request, llama) -> FakePair:
    return fake_pair(request.param, llama.tokenizer)


BEAM = method_settings("eagle2").beam_width


def on_cuda_in(tensor: torch.Tensor, dtype: torch.dtype) -> bool:
    return tensor.device == CUDA and tensor.dtype == dtype


def test_the_verify_forward_traces_on_fake_cuda_in_float16(fake, papers_tree):
    config, past, n = fake.target.model.config, len(PROMPT), len(papers_tree)
    with fake.tracing():
        run, cache = prefilled(fake.target, fake.head)
        hidden, features = run._verify(cache, fake_copy(papers_tree), past)
    assert n == method_settings("eagle2").total_tokens
    assert hidden.shape == (n, config.hidden_size) and on_cuda_in(hidden, torch.float16)
    assert features.shape == (n, fake.head.feature_size) and on_cuda_in(features, torch.float16)
    assert len(cache.layers) == config.num_hidden_layers
    assert all(layer.keys.shape == (1, config.num_key_value_heads, past + n, config.head_dim)
               and on_cuda_in(layer.values, torch.float16) for layer in cache.layers)


def test_a_draft_call_traces_on_fake_cuda_in_float16(fake):
    head, context = fake.head, len(PROMPT)
    with fake.tracing():
        runner = HeadRunner(head, fake.target)
        features = torch.zeros(context, head.feature_size, dtype=torch.float16)
        root = runner.extend(torch.zeros(context, dtype=torch.long), features)
        runner.begin_tree(BEAM * (method_settings("eagle2").draft_calls - 1))
        out, _ = runner.expand(torch.zeros(BEAM, dtype=torch.long), root.expand(BEAM, -1), 1,
                               torch.zeros(BEAM, dtype=torch.long))
        logprobs = runner.logprobs(out)
        seen = runner.context_length
    assert root.shape == (head.config.hidden_size,) and on_cuda_in(root, torch.float16)
    assert out.shape == (BEAM, head.config.hidden_size) and on_cuda_in(out, torch.float16)
    assert logprobs.shape == (BEAM, head.draft_vocab_size) and on_cuda_in(logprobs, torch.float32)
    assert seen == context + BEAM  # the tree's nodes sit on the context in the head's cache


def test_on_cuda_the_tree_forward_attends_through_transformers_sdpa(llama, papers_tree, monkeypatch):
    grouped = next(p for p in PAIRS if target_size(p).num_key_value_heads < target_size(p).num_attention_heads)
    fake = fake_pair(grouped, llama.tokenizer)
    with fake.tracing():
        run, cache = prefilled(fake.target, fake.head)
        layers = sdpa_layers(monkeypatch)
        run._verify(cache, fake_copy(papers_tree), len(PROMPT))
    assert len(set(layers)) == fake.target.model.config.num_hidden_layers
