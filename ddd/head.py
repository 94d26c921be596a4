"""Draft heads: the interface the engine drafts through, the EAGLE-1/EAGLE-2 head, and what every head
shares: the Llama config a head copies from its target, the checks of a head's config against the target,
and seeded construction.

The EAGLE head is fc(2H -> H) + one stock Llama decoder layer without its input norm. It reads and writes
the official EAGLE-1/EAGLE-2 checkpoint layout (config.json + weights with keys `fc.*`, `layers.0.*`). Our
own heads may add `d2t`, a reduced draft vocabulary given as EAGLE-3 style offsets
(target_id = draft_id + d2t[draft_id]), so the draft LM head multiplies fewer rows.

EAGLE-3 heads are in ddd/eagle3.py; ddd/checkpoint.py reads and writes both layouts, and ddd/catalog.py
decides which head goes with which target.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from .costs import IDENTITY, Calibration
from .models import Target
from .precision import TREE_ATTENTION, quantize_int8

# config.json fields that describe the checkpoint rather than the Llama layer inside it.
_NOT_LLAMA_FIELDS = ("bias", "architectures", "torch_dtype", "dtype", "draft_vocab_size", "eagle_config",
                     "target_hidden_size")


class HeadLoadError(ValueError):
    """A draft head could not be loaded or does not fit the target; the message says which numbers disagree."""


class DraftHead(nn.Module, ABC):
    """What the engine needs from a draft head of any architecture.

    The engine asks the target's forward for `hidden_state_ids` (None: only the final hidden state), turns
    its output into per-position features with `target_features`, and the head steps with
    `head(embeds, fuse(features), ...)` over accepted context and `head(embeds, next_hidden(own output), ...)`
    inside the draft tree; `draft_lm` turns a step's output into logits over the draft vocabulary.
    """

    kind: str
    config: LlamaConfig
    d2t: torch.Tensor | None
    rotary: LlamaRotaryEmbedding
    # How often the target accepts a drafted token, by its draft probability (ddd/costs.py); measured by
    # `python -m ddd.bench.calibrate` and kept in config.json, else draft probabilities are taken at face value.
    calibration: Calibration = IDENTITY
    # (module prefix, published prefix) pairs where the published layout names a part differently.
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def draft_vocab_size(self) -> int:
        return self.config.vocab_size if self.d2t is None else int(self.d2t.numel())

    def draft_to_target(self) -> torch.Tensor | None:
        """Target token id of each draft-vocabulary row, or None for the full vocabulary."""
        if self.d2t is None:
            return None
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    @property
    def feature_size(self) -> int:
        """Width of the features `target_features` gives."""
        return self.config.hidden_size

    @property
    def hidden_state_ids(self) -> list[int] | None:
        """The `output_hidden_states` indices the head's features come from; None: the final hidden state."""
        return None

    def target_features(self, output: BaseModelOutputWithPast) -> torch.Tensor:
        """The head's input features, (batch, seq, F), from a target forward that was asked for
        `hidden_state_ids`."""
        return output.last_hidden_state

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features as the hidden input of a context step."""
        return features

    def embedding(self, target: Target) -> nn.Module:
        """The token embeddings the head reads (token ids -> head width): the target's own table, unless the
        head is of another width and brings its own."""
        return target.model.get_input_embeddings()

    @abstractmethod
    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None,
                attention_mask: torch.Tensor | None = None, cache=None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """One head step over (batch, seq) positions; `next_hidden` of the output is what deeper draft levels
        take as hidden. `position_embeddings` (the rotary cos and sin of the positions) stand in for
        `position_ids` where the caller has them already (ddd.drafting.HeadRunner keeps a table)."""

    def next_hidden(self, out: torch.Tensor) -> torch.Tensor:
        """The part of a step's output that the next draft level takes as its hidden state."""
        return out

    @abstractmethod
    def draft_lm(self, target: Target) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function from head outputs to draft-vocabulary logits."""

    @abstractmethod
    def config_extra(self) -> dict[str, Any]:
        """What config.json holds beyond the Llama config."""

    def official_weights(self) -> dict[str, torch.Tensor]:
        """The head's weights under their published names."""
        out = {}
        for key, value in self.state_dict().items():
            if key.startswith("rotary."):
                continue
            for ours, published in self.renames:
                if key.startswith(ours):
                    key = published + key[len(ours):]
                    break
            out[key] = value
        return out

    def state_dict_official(self) -> dict[str, torch.Tensor]:
        """Everything a published checkpoint of this head holds."""
        out = self.official_weights()
        if self.d2t is not None:
            out["d2t"] = self.d2t
        return out

    def load_official(self, weights: dict[str, torch.Tensor]) -> None:
        state = {}
        for key, value in weights.items():
            for ours, published in self.renames:
                if key.startswith(published):
                    key = ours + key[len(published):]
                    break
            state[key] = value
        self.load_state_dict(state)


class EagleHead(DraftHead):
    kind = "eagle"
    renames = (("layer.", "layers.0."),)

    def __init__(self, config: LlamaConfig, bias: bool = True, d2t: torch.Tensor | None = None):
        super().__init__()
        config.num_hidden_layers = 1
        config._attn_implementation = TREE_ATTENTION
        self.config = config
        self.bias = bias
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=bias)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.layer.input_layernorm = nn.Identity()
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("d2t", d2t, persistent=False)
        one_op_norms(self)

    def forward(
        self,
        embeds: torch.Tensor,
        features: torch.Tensor,
        position_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Predicted next features, (batch, seq, H), from token embeddings and the features one step behind."""
        hidden = self.fc(torch.cat((embeds, features), dim=-1))
        rope = position_embeddings or self.rotary(hidden, position_ids)
        return self.layer(
            hidden,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=cache is not None,
            position_embeddings=rope,
        )

    def draft_lm(self, target: Target) -> Callable[[torch.Tensor], torch.Tensor]:
        """The target's LM head, restricted to the draft vocabulary when the head has one."""
        rows = self.draft_to_target()
        weight = target.lm_weight if rows is None else target.lm_weight[rows].contiguous()
        return lambda out: out @ weight.T

    def config_extra(self) -> dict[str, Any]:
        return {"bias": self.bias, "architectures": ["EagleHead"]}

    @classmethod
    def from_checkpoint(cls, raw: dict, weights: dict[str, torch.Tensor], target: Target, where: Path) -> "EagleHead":
        refuse_misfit(fit_problems(raw, weights, target), where, target)
        config = llama_config(raw, where)
        d2t = weights.get("d2t")
        if d2t is not None:
            d2t = draft_map(d2t, target.vocab_size, where)
        return cls(config, bias=bool(raw.get("bias", "fc.bias" in weights)), d2t=d2t)


class RMSNorm(LlamaRMSNorm):
    """LlamaRMSNorm, computed in float32 as torch's one `rms_norm` operation (the same bits as LlamaRMSNorm's eight:
    a draft call runs three or four norms, and a GPU pays for every operation it launches); other dtypes take
    LlamaRMSNorm's own steps, whose rounding between them the fused operation would not repeat."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return nn.functional.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon)
        return super().forward(hidden_states)


def one_op_norms(module: nn.Module) -> None:
    """Every LlamaRMSNorm inside a head becomes an RMSNorm with the same weight (names and checkpoints unchanged)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is LlamaRMSNorm:
                norm = RMSNorm(child.weight.shape[0], eps=child.variance_epsilon)
                norm.weight = child.weight
                setattr(parent, name, norm)


def target_config_fields(target: Target) -> dict[str, Any]:
    """The Llama config fields a head copies from its target (one layer of the same shape)."""
    cfg = target.model.config
    return dict(
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        vocab_size=target.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters=dict(cfg.rope_parameters),
        hidden_act=cfg.hidden_act,
        num_hidden_layers=1,
    )


def d2t_of(draft_vocab: torch.Tensor) -> torch.Tensor:
    """The d2t offsets of a draft vocabulary given as the target ids to keep (sorted here)."""
    draft_vocab = torch.as_tensor(draft_vocab, dtype=torch.long).sort().values
    return draft_vocab - torch.arange(draft_vocab.numel())


def new_head(target: Target, draft_vocab: torch.Tensor | None = None, seed: int = 0) -> EagleHead:
    """A randomly initialised head shaped for `target` (draft_vocab: the target ids to keep, ascending)."""
    config = LlamaConfig(**target_config_fields(target))
    d2t = None if draft_vocab is None else d2t_of(draft_vocab)
    with seeded(seed):
        head = EagleHead(config, bias=True, d2t=d2t)
    return head.to(device=target.device, dtype=target.model.dtype)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Random draws inside come from the CPU generator seeded with `seed`, and the caller's generator state
    is put back afterwards: building a head the same way twice gives the same weights without reseeding
    anyone else's draws. Heads are built on the CPU, so only its generator is forked."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


# -- checks shared by the head kinds' loaders ----------------------------------------------------------------

def one_line(err: Exception) -> str:
    """An exception as one line of a HeadLoadError message."""
    return f"{type(err).__name__}: " + " ".join(str(err).split())


def fit_problems(raw: dict, weights: dict[str, torch.Tensor], target: Target) -> list[str]:
    """Where a head's config and weights disagree with the target's hidden size and vocabulary (a head whose
    width must be its target's: EAGLE-1/EAGLE-2)."""
    problems = []
    for hidden in dict.fromkeys((weights["fc.weight"].shape[0], raw.get("hidden_size", target.hidden_size))):
        if hidden != target.hidden_size:
            problems.append(f"hidden size: head {hidden}, target {target.hidden_size}")
    return problems + vocab_problems(raw, target)


def vocab_problems(raw: dict, target: Target) -> list[str]:
    vocab = raw.get("vocab_size", target.vocab_size)
    return [] if vocab == target.vocab_size else [f"vocabulary: head {vocab}, target {target.vocab_size}"]


def refuse_misfit(problems: list[str], where: Path, target: Target) -> None:
    if problems:
        raise HeadLoadError(f"The head at {where} does not fit {target.name}: " + "; ".join(problems) + ".")


def llama_config(raw: dict, where: Path) -> LlamaConfig:
    """The Llama config of a head's decoder layer, refused when no layer can be built from it."""
    fields = {k: v for k, v in raw.items() if k not in _NOT_LLAMA_FIELDS}
    try:
        config = LlamaConfig(**fields)
    # Field validation reports through several exception types (TypeError, ValueError, hub dataclass errors).
    except Exception as err:
        raise HeadLoadError(f"config.json in {where} is not a Llama config a head can be built from: "
                            f"{one_line(err)}") from None
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if not (isinstance(heads, int) and isinstance(kv_heads, int) and heads > 0 and kv_heads > 0
            and heads % kv_heads == 0):
        raise HeadLoadError(f"config.json in {where}: {heads} attention heads cannot share {kv_heads} key/value heads.")
    return config


def draft_map(d2t: torch.Tensor, vocab_size: int, where: Path) -> torch.Tensor:
    """`d2t` as int64 offsets, refused unless it maps every draft id to a distinct target id."""
    if d2t.dtype.is_floating_point or d2t.dtype.is_complex or d2t.dtype == torch.bool or d2t.ndim != 1:
        raise HeadLoadError(f"`d2t` in {where} must be a 1-D integer tensor, not {d2t.dtype} of shape {list(d2t.shape)}.")
    d2t = d2t.long()
    ids = torch.arange(d2t.numel()) + d2t
    if d2t.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise HeadLoadError(f"The head's draft vocabulary (d2t in {where}) points outside the target's "
                            f"{vocab_size} tokens.")
    if ids.unique().numel() != ids.numel():
        raise HeadLoadError(f"`d2t` in {where} maps two draft ids to the same target token.")
    return d2t


def for_target(head: DraftHead, target: Target) -> DraftHead:
    """Put a head on the target's device and in its precision."""
    head = head.to(device=target.device, dtype=target.model.dtype).eval().requires_grad_(False)
    if target.precision == "int8":
        quantize_int8(head)
    return head
