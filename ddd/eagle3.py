"""The EAGLE-3 draft head, built from stock transformers Llama parts.

Its features are the target's hidden states at three layers (by default the inputs of layers 2, L//2 and
L-3), concatenated and fused by `fc` (3H -> H, no bias). One decoder layer attends over
cat(input_layernorm(token embedding), hidden_norm(hidden)) (2H -> q/k/v) with the hidden state as its
residual stream, then post_attention_layernorm + MLP; the head's own `norm` and `lm_head` give logits over
a draft vocabulary whose ids map to target ids through `d2t` (target id = draft id + d2t[draft id]). Inside
the draft tree the head takes its own pre-norm output as the hidden state, without `fc`.

Our heads may stack further stock Llama decoder layers (`layers.0.*`, `layers.1.*`, ...) after that first
one, for more capacity per draft call: `num_hidden_layers` counts all of them, and a checkpoint's count is
read from its weights. Published heads have none. Such a head may instead hand deeper draft levels its
first layer's output (`eagle_config.draft_hidden: "first_layer"`, docs/training.md): with stacked layers
seeded from the target's top, that output lives in the space those layers read, the same space `fc` gives
the first layer at level one, while the final output lives after them.

The trainer grows, cuts and rewires such heads (ddd/train/resize.py).

A head's own width (`hidden_size`) may differ from its target's (`target_hidden_size` in config.json, as the
official code writes it): then `fc` maps 3 x target_hidden_size to the head's width, everything after it
(the decoder layer, the hidden state handed down the tree, `norm`, `lm_head`) is in the head's width, and
the token embeddings must be too, so such a head brings its own `embed_tokens` (a head of its target's width
reads the target's embedding table, and a copy of it in the checkpoint is only checked).

Published checkpoints (the official EAGLE-3 release, SpecForge) name the parts `midlayer.*`, `fc`, `norm`,
`lm_head`, plus `d2t` and `t2d` (a bool mask over the target vocabulary); config.json adds
`draft_vocab_size` and sometimes the layer ids (`eagle_config.eagle_aux_hidden_state_layer_ids`) and
`target_hidden_size`.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm,
                                                      LlamaRotaryEmbedding)

from .head import (DraftHead, HeadLoadError, d2t_of, draft_map, llama_config, one_op_norms, refuse_misfit, seeded,
                   target_config_fields, vocab_problems)
from .models import Target
from .precision import TREE_ATTENTION

MAX_LAYERS = 8  # a draft head is meant to be a small fraction of its target
DRAFT_HIDDEN = ("output", "first_layer")  # what a draft step hands the next level as its hidden state


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """The official choice, as `output_hidden_states` indices: the inputs of layers 2, L//2 and L-3."""
    return 2, num_layers // 2, num_layers - 3


def aux_layers_of(raw: dict, num_layers: int, where: Path) -> tuple[int, ...]:
    """The layer ids a checkpoint's config names, as `output_hidden_states` indices (default: the official
    choice). Published ids come in two numberings: inputs of layers (the official code, vLLM) and outputs of
    layers (SpecForge), one less. A list that starts at 1 can only be the second: the official first id is 2,
    and its counterpart there is 1."""
    eagle_config = raw.get("eagle_config")
    ids = eagle_config.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle_config, dict) else None
    if ids is None:
        return default_aux_layers(num_layers)
    if not (isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        raise HeadLoadError(f"eagle_aux_hidden_state_layer_ids in {where} must be a list of layer numbers, not {ids!r}.")
    return tuple(i + 1 for i in ids) if ids[0] == 1 else tuple(ids)


class Eagle3Layer(nn.Module):
    """The head's decoder layer: a stock Llama attention whose q/k/v read [embedding, hidden] (2H), a stock
    MLP and three RMSNorms."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        hidden = config.hidden_size
        self.self_attn = LlamaAttention(config, layer_idx=0)
        for name in ("q_proj", "k_proj", "v_proj"):
            narrow = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * hidden, narrow.out_features, bias=narrow.bias is not None))
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None, cache) -> torch.Tensor:
        both = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        attended, _ = self.self_attn(both, position_embeddings=position_embeddings, attention_mask=attention_mask,
                                     cache=cache)
        hidden = hidden + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Eagle3Head(DraftHead):
    kind = "eagle3"

    def __init__(self, config: LlamaConfig, aux_layers: tuple[int, ...], d2t: torch.Tensor,
                 draft_hidden: str = "output", target_hidden: int | None = None):
        super().__init__()
        if not 1 <= config.num_hidden_layers <= MAX_LAYERS:
            raise ValueError(f"An EAGLE-3 head has 1 to {MAX_LAYERS} decoder layers, not {config.num_hidden_layers}.")
        check_draft_hidden(draft_hidden, config.num_hidden_layers)
        self.draft_hidden = draft_hidden
        config._attn_implementation = TREE_ATTENTION
        self.config = config
        self.aux_layers = tuple(aux_layers)
        hidden = config.hidden_size
        self.target_hidden = hidden if target_hidden is None else target_hidden
        self.fc = nn.Linear(len(self.aux_layers) * self.target_hidden, hidden, bias=False)
        # The target's embedding table has the target's width: a head of another width has its own.
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden) if self.target_hidden != hidden else None
        self.midlayer = Eagle3Layer(config)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, layer_idx=i) for i in range(1, config.num_hidden_layers))
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, d2t.numel(), bias=False)
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("d2t", d2t, persistent=False)
        one_op_norms(self)

    @property
    def feature_size(self) -> int:
        return self.fc.in_features

    @property
    def hidden_state_ids(self) -> list[int]:
        return list(self.aux_layers)

    def target_features(self, output: BaseModelOutputWithPast) -> torch.Tensor:
        return torch.cat([output.hidden_states[i] for i in self.aux_layers], dim=-1)

    def embedding(self, target: Target) -> nn.Module:
        return super().embedding(target) if self.embed_tokens is None else self.embed_tokens

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The fused target layers (batch, seq, 3 x target width) -> the hidden input (batch, seq, H)."""
        return self.fc(features)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None,
                attention_mask: torch.Tensor | None = None, cache=None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The pre-norm output (batch, seq, H), which `logits` reads; with draft_hidden 'first_layer' the first
        layer's output follows it (batch, seq, 2H), and `next_hidden` picks what deeper levels take."""
        rotary = position_embeddings or self.rotary(hidden, position_ids)
        first = out = self.midlayer(embeds, hidden, rotary, attention_mask, cache)
        for layer in self.layers:
            out = layer(out, attention_mask, cache=cache, position_embeddings=rotary)
        return torch.cat((out, first), dim=-1) if self.draft_hidden == "first_layer" else out

    def next_hidden(self, out: torch.Tensor) -> torch.Tensor:
        return out[..., self.config.hidden_size :] if self.draft_hidden == "first_layer" else out

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of head outputs."""
        if out.shape[-1] != self.config.hidden_size:  # draft_hidden 'first_layer': the output, then the first layer's
            out = out[..., : self.config.hidden_size]
        return self.lm_head(self.norm(out))

    def draft_lm(self, target: Target) -> Callable[[torch.Tensor], torch.Tensor]:
        return self.logits

    def state_dict_official(self) -> dict[str, torch.Tensor]:
        out = super().state_dict_official()
        t2d = torch.zeros(self.config.vocab_size, dtype=torch.bool, device=self.d2t.device)
        t2d[self.draft_to_target()] = True
        out["t2d"] = t2d
        return out

    def config_extra(self) -> dict[str, Any]:
        eagle = {"eagle_aux_hidden_state_layer_ids": list(self.aux_layers)}
        if self.draft_hidden != "output":
            eagle["draft_hidden"] = self.draft_hidden
        extra = {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": self.draft_vocab_size,
                 "eagle_config": eagle}
        if self.target_hidden != self.config.hidden_size:
            extra["target_hidden_size"] = self.target_hidden
        return extra

    @classmethod
    def from_checkpoint(cls, raw: dict, weights: dict[str, torch.Tensor], target: Target, where: Path) -> "Eagle3Head":
        num_layers = target.model.config.num_hidden_layers
        problems = vocab_problems(raw, target) + width_problems(raw, target)
        layers = aux_layers_of(raw, num_layers, where)
        if not all(0 <= i <= num_layers for i in layers):
            problems.append(f"feature layers {list(layers)}: the target has hidden states 0 to {num_layers}")
        t2d = weights.get("t2d")
        if t2d is not None and (t2d.ndim != 1 or t2d.numel() != target.vocab_size):
            problems.append(f"t2d covers {list(t2d.shape)} tokens, target {target.vocab_size}")
        extra = stacked_layers(weights)
        if extra is None:
            problems.append(f"stacked layers: {sorted({k.split('.')[1] for k in weights if k.startswith('layers.')})} "
                            f"are not 0 to {MAX_LAYERS - 2} in order")
        refuse_misfit(problems, where, target)
        config = llama_config(raw, where)
        config.num_hidden_layers = 1 + extra
        config.vocab_size = target.vocab_size  # the config's own, when it names one, is the target's (checked)
        if config.hidden_size != target.hidden_size and "embed_tokens.weight" not in weights:
            raise HeadLoadError(f"The head at {where} is {config.hidden_size} wide and its target ({target.name}) "
                                f"{target.hidden_size}: such a head needs token embeddings of its own width "
                                "(`embed_tokens.weight`), and this checkpoint has none.")
        draft_size = raw.get("draft_vocab_size")
        if "d2t" in weights:
            d2t = draft_map(weights["d2t"], target.vocab_size, where)
            draft_size = d2t.numel() if draft_size is None else draft_size
        elif draft_size in (None, target.vocab_size):
            draft_size = target.vocab_size
            d2t = torch.zeros(draft_size, dtype=torch.long)
        else:
            raise HeadLoadError(f"The head at {where} drafts over {draft_size} tokens but has no `d2t` to map them "
                                "to the target's.")
        if d2t.numel() != draft_size:
            raise HeadLoadError(f"The head at {where}: draft_vocab_size is {draft_size} but d2t maps {d2t.numel()} ids.")
        eagle_config = raw.get("eagle_config")
        draft_hidden = eagle_config.get("draft_hidden", "output") if isinstance(eagle_config, dict) else "output"
        try:
            return cls(config, layers, d2t, draft_hidden, target_hidden=target.hidden_size)
        except ValueError as err:
            raise HeadLoadError(f"The head at {where}: {err}") from None


def width_problems(raw: dict, target: Target) -> list[str]:
    """Where the width a head reads its features in disagrees with the target's: `target_hidden_size` when
    config.json names it, else the head's own `hidden_size` (fc then reads 3 x hidden_size, as in the
    official code)."""
    if "target_hidden_size" in raw:
        given = raw["target_hidden_size"]
        if given != target.hidden_size or isinstance(given, bool):
            return [f"target hidden size: head {given!r}, target {target.hidden_size}"]
        return []
    hidden = raw.get("hidden_size", target.hidden_size)
    if hidden != target.hidden_size:
        return [f"hidden size: head {hidden}, target {target.hidden_size}, and config.json names no "
                "target_hidden_size"]
    return []


def stacked_layers(weights: dict[str, torch.Tensor]) -> int | None:
    """How many decoder layers a checkpoint stacks after its first (`layers.N.*`); None unless they are
    numbered 0, 1, ... without a gap and leave the head at most MAX_LAYERS deep."""
    ids = {k.split(".")[1] for k in weights if k.startswith("layers.")}
    if ids != {str(i) for i in range(len(ids))} or len(ids) >= MAX_LAYERS:
        return None
    return len(ids)


def check_draft_hidden(draft_hidden: str, depth: int) -> None:
    if draft_hidden not in DRAFT_HIDDEN or (draft_hidden == "first_layer" and depth < 2):
        raise ValueError(f"draft_hidden is one of {list(DRAFT_HIDDEN)} ('first_layer' needs two decoder layers or "
                         f"more), not {draft_hidden!r} with {depth}.")


def check_first_layer(layers: tuple[int, ...]) -> None:
    if layers[0] == 1:
        raise ValueError("A layer list starting at 1 reads back as layer outputs (see aux_layers_of); "
                         "order the layers another way.")


def new_eagle3_head(target: Target, draft_vocab: torch.Tensor | None = None, seed: int = 0,
                    layers: tuple[int, ...] | None = None, depth: int = 1, mlp: int | None = None,
                    draft_hidden: str = "output", hidden: int | None = None) -> Eagle3Head:
    """A randomly initialised EAGLE-3 head for `target`. draft_vocab: the target ids to keep (default: all);
    layers: the `output_hidden_states` indices of its features (default: the official choice); depth:
    its decoder layers; mlp: their MLP channels (default: the target's); draft_hidden: what deeper draft
    levels read (DRAFT_HIDDEN); hidden: the head's own width (default: the target's; another width gives the
    head its own token embeddings, and its attention heads the width hidden / the target's head count)."""
    num_layers = target.model.config.num_hidden_layers
    layers = default_aux_layers(num_layers) if layers is None else tuple(layers)
    if not all(0 <= i <= num_layers for i in layers):
        raise ValueError(f"Feature layers {list(layers)} do not exist: {target.name} has hidden states 0 to "
                         f"{num_layers}; pass layers=.")
    check_first_layer(layers)
    d2t = torch.zeros(target.vocab_size, dtype=torch.long) if draft_vocab is None else d2t_of(draft_vocab)
    fields = target_config_fields(target) | {"num_hidden_layers": depth}
    if mlp is not None:
        fields["intermediate_size"] = mlp
    if hidden is not None and hidden != target.hidden_size:
        heads = fields["num_attention_heads"]
        if hidden <= 0 or hidden % heads:
            raise ValueError(f"A head {hidden} wide cannot split into {target.name}'s {heads} attention heads.")
        fields |= {"hidden_size": hidden, "head_dim": hidden // heads}
    with seeded(seed):
        head = Eagle3Head(LlamaConfig(**fields), layers, d2t, draft_hidden, target_hidden=target.hidden_size)
    return head.to(device=target.device, dtype=target.model.dtype)
