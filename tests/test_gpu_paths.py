"""What the engine and the app do only on a GPU, run on this CPU: each CUDA-only branch forced (the traces of every
catalog pair on fake CUDA tensors: tests/test_fake_cuda.py).

The CUDA-only branches in ddd/ and explorer/ (every `cuda`, `is_available()` and `device.type` test) and what
forces each here:
- The wait for the device before a clock is read: ddd/engine.py Generation._sync, ddd/bench/benchmark.py _sync and
  ddd/bench/budget.py _ms all read their clock through ddd/devices.py clock_after. clock_after and _ms are handed
  a CUDA device and _sync a stand-in target on one (no tensor needs to live there); a decoding run cannot be, as it
  makes its tensors on its target's device, so there `is_cuda` is made to say yes. torch.cuda.synchronize is a
  recorder that notes each wait in one timeline with the clock reads.
- Tree attention without `enable_gqa` (ddd/precision.py tree_attention): sdpa reads grouped key/value heads in place
  under a mask only where `masked_gqa` says the device's kernels do (the CPU); elsewhere transformers' sdpa repeats
  them. `masked_gqa` is made to say no for the tiny Qwen2 (4 query heads over 2 key/value heads) verifying a tree:
  the hidden states are the same to the bit. On fake CUDA (below) the branch is taken as it is.
- Native float16 kernels (ddd/precision.py apply_precision): float16 off the CPU keeps native linears and sdpa tree
  attention, where the CPU computes exactly (float64 products, exact attention). load_target runs here with
  apply_precision told the device is "cuda"; greedy drafting still gives plain greedy decoding's tokens, as
  tests/test_engine.py checks on a real GPU.
- A head put on its target's device and dtype (ddd/head.py for_target, which ddd/checkpoint.py load_head and
  ddd/catalog.py resolve_head end with; new_head and new_eagle3_head make a head there): a no-op for a CPU target, a
  move for any other. The target here is loaded by load_target onto the `meta` device in float16, the way it loads
  onto CUDA once CUDA is there (ddd/models.py refuses "cuda" where torch.cuda.is_available says no, tested here too).
- The app on a machine with CUDA (explorer/models.py Models.device, default_precision, precisions; explorer/presets.py
  opening_preset) and the GPU memory it gives back after a failed load or an unload (Models._free_failed_load and
  _unload: torch.cuda.empty_cache): torch.cuda.is_available says yes; the models themselves still load on the CPU.
- ddd/catalog.py free_memory reads torch.cuda.mem_get_info, and ddd/bench/benchmark.py machine_info names the GPU:
  each is handed a CUDA device, with the CUDA call a stand-in.
- Tested elsewhere: the menu's pairs on a GPU (explorer/choosing.py offered: tests/test_model_menu.py) and the
  prompt limit of a GPU (explorer/racing.py prompt_tokens: tests/test_safety.py).
"""
from __future__ import annotations

import copy
import time
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

import ddd.models
from ddd import devices, precision
from ddd.bench import benchmark, budget
from ddd.catalog import free_memory, resolve_head
from ddd.checkpoint import load_head, save_head
from ddd.devices import clock_after
from ddd.drafting import DynamicTreeDrafter, HeadRunner
from ddd.eagle3 import new_eagle3_head
from ddd.engine import Generation
from ddd.head import DraftHead, for_target, new_head
from ddd.models import ModelLoadError, Target, load_target
from ddd.precision import TREE_ATTENTION, ExactLinear, apply_precision
from ddd.settings import method_settings
from ddd.tree import DraftTree
from explorer.models import ModelConfig, Models
from explorer.presets import GPU_PRESET, opening_preset
from tests.tiny import PROMPTS, runs_equal_to_plain

CUDA = torch.device("cuda", 0)
PROMPT = list(range(1, 13))


class Timeline:
    """Device waits and clock reads, in the order they happen."""

    def __init__(self):
        self.events: list[tuple[str, torch.device | None]] = []

    def synchronize(self, device=None) -> None:
        self.events.append(("wait", device))

    def clock(self) -> float:
        self.events.append(("clock", None))
        return float(len(self.events))

    def clock_reads(self) -> int:
        return sum(kind == "clock" for kind, _ in self.events)

    def each_clock_after_a_wait_for(self, device: torch.device) -> bool:
        return all(i and self.events[i - 1] == ("wait", device)
                   for i, (kind, _) in enumerate(self.events) if kind == "clock")


@pytest.fixture
def timeline(monkeypatch) -> Timeline:
    recorded = Timeline()
    monkeypatch.setattr(torch.cuda, "synchronize", recorded.synchronize)
    return recorded


def test_clock_after_waits_for_a_cuda_device_before_reading_the_clock(timeline):
    clock_after(torch.device("cuda", 1), timeline.clock)
    assert timeline.events == [("wait", torch.device("cuda", 1)), ("clock", None)]


def test_clock_after_reads_the_clock_at_once_on_a_cpu(timeline):
    clock_after(torch.device("cpu"), timeline.clock)
    assert timeline.events == [("clock", None)]


def test_every_timing_of_a_run_waits_for_the_device_first(llama, llama_head, timeline, monkeypatch):
    monkeypatch.setattr(devices, "is_cuda", lambda device: True)
    run = Generation(llama, llama_head, PROMPT, "eagle2", chat=False, max_new_tokens=12, clock=timeline.clock)
    steps = list(run)
    assert timeline.clock_reads() >= 3 * len(steps)  # each step's draft, verify and other times
    assert timeline.each_clock_after_a_wait_for(llama.device)


def test_the_benchmark_waits_for_the_device_before_its_clock(timeline, monkeypatch):
    monkeypatch.setattr(time, "perf_counter", timeline.clock)
    benchmark._sync(SimpleNamespace(device=CUDA))
    assert timeline.events == [("wait", CUDA), ("clock", None)]


def test_the_budget_times_a_job_up_to_the_end_of_its_device_work(timeline, monkeypatch):
    monkeypatch.setattr(time, "perf_counter", timeline.clock)
    budget._ms(lambda: timeline.events.append(("job", None)), 1, CUDA)
    assert timeline.events == [("clock", None), ("job", None), ("wait", CUDA), ("clock", None)]


# -- attention without enable_gqa ----------------------------------------------------------------------------------

def drafted_tree(target: Target) -> DraftTree:
    """The tree the EAGLE-2 drafter grows at the papers' settings (ten-wide beams, six draft calls, 60 tokens kept)
    with an untrained head: a real tree's shape, siblings hidden from one another."""
    runner = HeadRunner(new_head(target), target)
    ids, root = torch.tensor(PROMPT), torch.tensor(PROMPT[-1] + 1)
    with torch.inference_mode():
        features = target.model.model(input_ids=ids[None]).last_hidden_state[0]
        root_feature = runner.extend(torch.cat((ids[1:], root[None])), features)
        return DynamicTreeDrafter.eagle2(method_settings("eagle2")).draft(runner, root, root_feature, 64).tree


def prefilled(target: Target, head: DraftHead | None = None) -> tuple[Generation, DynamicCache]:
    """A run of `target` (EAGLE-2 with `head`, else plain) and its cache after the prompt's forward."""
    run = Generation(target, head, PROMPT, "eagle2" if head else "plain", chat=False)
    cache = DynamicCache(config=target.model.config)
    with torch.inference_mode():
        run._forward(input_ids=torch.tensor([PROMPT]), cache=cache, use_cache=True)
    return run, cache


def verified_hidden(run: Generation, cache: DynamicCache, tree: DraftTree) -> torch.Tensor:
    """The target's hidden states over `tree` from the engine's own verify forward; the cache is left as it was."""
    with torch.inference_mode():
        hidden = run._verify(cache, tree, cache.get_seq_length())[0]
    cache.crop(-len(tree))
    return hidden


def sdpa_layers(monkeypatch) -> list[torch.nn.Module]:
    """The attention modules transformers' sdpa runs for from now on (tree_attention's branch that repeats grouped
    key/value heads)."""
    layers = []
    real = precision.sdpa_attention_forward
    monkeypatch.setattr(precision, "sdpa_attention_forward",
                        lambda module, *args, **kwargs: layers.append(module) or real(module, *args, **kwargs))
    return layers


def test_tree_attention_repeating_grouped_heads_gives_the_same_hidden_states(qwen, monkeypatch):
    config = qwen.model.config
    assert config.num_key_value_heads < config.num_attention_heads
    tree = drafted_tree(qwen)
    run, cache = prefilled(qwen)
    in_place = verified_hidden(run, cache, tree)
    layers = sdpa_layers(monkeypatch)
    monkeypatch.setattr(precision, "masked_gqa", lambda device: False)
    repeated = verified_hidden(run, cache, tree)
    assert len(set(layers)) == config.num_hidden_layers
    assert torch.equal(repeated, in_place)


# -- native float16 kernels --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_float16(tiny_llama_dir) -> Target:
    """The tiny Llama in float16 as load_target prepares it for a GPU, on the CPU."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ddd.models, "apply_precision",
                      lambda model, dtype, device, tokenizer=None: apply_precision(model, dtype, "cuda", tokenizer))
        return load_target(str(tiny_llama_dir), dtype="float16")


def test_float16_off_the_cpu_keeps_native_linears_and_sdpa_tree_attention(gpu_float16):
    model = gpu_float16.model
    assert model.dtype == torch.float16 and model.config._attn_implementation == TREE_ATTENTION
    assert not any(isinstance(m, ExactLinear) for m in model.modules())
    assert isinstance(model.model.layers[0].self_attn.q_proj, torch.nn.Linear)


def test_greedy_decoding_on_native_float16_kernels_equals_plain_greedy(gpu_float16, llama_head):
    head = for_target(copy.deepcopy(llama_head), gpu_float16)
    runs = runs_equal_to_plain(gpu_float16, head, PROMPTS[:3], [("eagle2", {}), ("ddd", {})], 30)
    assert sum(step.accepted for run in runs for step in run.trace.steps) > 0  # drafts were accepted, not only roots


# -- a head on its target's device ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def meta_target(tiny_llama_dir) -> Target:
    """The tiny Llama loaded onto another device than the CPU head's: `meta`, in float16."""
    return load_target(str(tiny_llama_dir), dtype="float16", device="meta")


def on_target(head: DraftHead, target: Target) -> bool:
    tensors = [*head.parameters(), *head.buffers()]
    return all(t.device == target.device and (t.dtype == target.model.dtype or not t.is_floating_point())
               for t in tensors)


@pytest.mark.parametrize("make", [new_head, lambda target: new_eagle3_head(target, layers=(0, 1, 2))],
                         ids=["eagle", "eagle3"])
def test_a_loaded_head_moves_to_its_targets_device_and_dtype(llama, meta_target, make, tmp_path):
    assert meta_target.device.type == "meta"
    head = load_head(save_head(make(llama), tmp_path), meta_target)
    assert on_target(head, meta_target)


def test_a_random_head_is_made_on_its_targets_device_and_dtype(meta_target):
    head, _ = resolve_head("random", meta_target)
    assert on_target(head, meta_target)


def test_cuda_is_refused_where_torch_has_none(tiny_llama_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelLoadError, match="'cuda:0' was asked for but CUDA is not available here"):
        load_target(str(tiny_llama_dir), device="cuda:0")


# -- the app on a machine with CUDA --------------------------------------------------------------------------------

@pytest.fixture
def cuda_available(monkeypatch) -> list[str]:
    """torch.cuda.is_available says yes; the list notes each time the app empties CUDA's cache."""
    emptied: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("emptied"))
    return emptied


def test_with_cuda_the_app_races_there_in_float16_and_offers_no_int8(cuda_available):
    models = Models(ModelConfig())
    assert models.device() == "cuda" and models.default_precision() == "float16"
    assert "int8" not in models.precisions() and "float16" in models.precisions()


def test_with_cuda_the_page_opens_on_the_papers_preset(cuda_available):
    assert opening_preset(Models(ModelConfig())).name == GPU_PRESET


def test_a_failed_load_empties_the_cuda_cache(cuda_available, tmp_path):
    models = Models(ModelConfig(model=str(tmp_path / "no-model"), head="random", device="cpu"))
    assert models.start() is None
    assert cuda_available == ["emptied"]


def test_unloading_a_pair_empties_the_cuda_cache(cuda_available, tiny_llama_dir):
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", device="cpu"), max_loaded=1)
    models.load("float32")
    assert cuda_available == []
    models.load("bfloat16")  # room for one pair: float32's goes
    assert cuda_available == ["emptied"]


def test_free_memory_on_a_gpu_is_what_cuda_reports_free_on_it(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: asked.append(device) or (3 << 30, 80 << 30))
    assert free_memory("cuda:1") == 3 << 30
    assert asked == [torch.device("cuda", 1)]


def test_a_benchmark_on_cuda_names_its_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"the GPU at {device}")
    info = benchmark.machine_info(SimpleNamespace(device=CUDA, precision="float16"))
    assert info["gpu"] == "the GPU at cuda:0" and info["device"] == "cuda:0"


# -- the catalog pairs on fake CUDA ---------------------------------------------------------------------------------
