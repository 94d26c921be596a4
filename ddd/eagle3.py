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

Published checkpoints (the official EAGLE-3 release, SpecForge) name the parts `midlayer.*`, `fc`, `norm`,
`lm_head`, plus `d2t` and `t2d` (a bool mask over the target vocabulary); config.json adds
`draft_vocab_size` and sometimes the layer ids (`eagle_config.eagle_aux_hidden_state_layer_ids`) and
`target_hidden_size`.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm,
                                                      LlamaRotaryEmbedding)

from .head import (DraftHead, HeadLoadError, d2t_of, draft_map, fit_problems, llama_config, refuse_misfit,
                   target_config_fields)
from .models import Target

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
                 draft_hidden: str = "output"):
        super().__init__()
        if not 1 <= config.num_hidden_layers <= MAX_LAYERS:
            raise ValueError(f"An EAGLE-3 head has 1 to {MAX_LAYERS} decoder layers, not {config.num_hidden_layers}.")
        _check_draft_hidden(draft_hidden, config.num_hidden_layers)
        self.draft_hidden = draft_hidden
        config._attn_implementation = "sdpa"
        self.config = config
        self.aux_layers = tuple(aux_layers)
        hidden = config.hidden_size
        self.fc = nn.Linear(len(self.aux_layers) * hidden, hidden, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, layer_idx=i) for i in range(1, config.num_hidden_layers))
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, d2t.numel(), bias=False)
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("d2t", d2t, persistent=False)

    @property
    def feature_size(self) -> int:
        return self.fc.in_features

    @property
    def hidden_state_ids(self) -> list[int]:
        return list(self.aux_layers)

    def target_features(self, output: BaseModelOutputWithPast) -> torch.Tensor:
        return torch.cat([output.hidden_states[i] for i in self.aux_layers], dim=-1)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The fused target layers (batch, seq, 3H) -> the hidden input (batch, seq, H)."""
        return self.fc(features)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """The pre-norm output (batch, seq, H), which `logits` reads; with draft_hidden 'first_layer' the first
        layer's output follows it (batch, seq, 2H), and `next_hidden` picks what deeper levels take."""
        rotary = self.rotary(hidden, position_ids)
        first = out = self.midlayer(embeds, hidden, rotary, attention_mask, cache)
        for layer in self.layers:
            out = layer(out, attention_mask, cache=cache, position_embeddings=rotary)
        return torch.cat((out, first), dim=-1) if self.draft_hidden == "first_layer" else out

    def next_hidden(self, out: torch.Tensor) -> torch.Tensor:
        return out[..., self.config.hidden_size :] if self.draft_hidden == "first_layer" else out

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of head outputs."""
        return self.lm_head(self.norm(out[..., : self.config.hidden_size]))

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
        return {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": self.draft_vocab_size,
                "eagle_config": eagle}

    @classmethod
    def from_checkpoint(cls, raw: dict, weights: dict[str, torch.Tensor], target: Target, where: Path) -> "Eagle3Head":
        num_layers = target.model.config.num_hidden_layers
        # The head reads the target's token embeddings, so its own width must be the target's too.
        problems = fit_problems(raw, weights, target)
        if raw.get("target_hidden_size", target.hidden_size) != target.hidden_size:
            problems.append(f"target hidden size: head {raw['target_hidden_size']}, target {target.hidden_size}")
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
            return cls(config, layers, d2t, draft_hidden)
        except ValueError as err:
            raise HeadLoadError(f"The head at {where}: {err}") from None


def stacked_layers(weights: dict[str, torch.Tensor]) -> int | None:
    """How many decoder layers a checkpoint stacks after its first (`layers.N.*`); None unless they are
    numbered 0, 1, ... without a gap and leave the head at most MAX_LAYERS deep."""
    ids = {k.split(".")[1] for k in weights if k.startswith("layers.")}
    if ids != {str(i) for i in range(len(ids))} or len(ids) >= MAX_LAYERS:
        return None
    return len(ids)


def deepen(head: Eagle3Head, depth: int, seed: int = 0) -> Eagle3Head:
    """`head` with decoder layers added up to `depth`, drafting exactly as before: each new layer's
    output projections (attention o_proj, MLP down_proj) start at zero, so it adds nothing to the residual
    stream until training moves them, and its other weights start random so that training can."""
    have = head.config.num_hidden_layers
    if not have <= depth <= MAX_LAYERS:
        raise ValueError(f"The head has {have} decoder layers: it can grow to {have} to {MAX_LAYERS}, not {depth}.")
    grown = _rebuilt(head, seed, num_hidden_layers=depth)
    state = grown.state_dict()
    state.update(head.state_dict())
    for i in range(have - 1, depth - 1):
        state[f"layers.{i}.self_attn.o_proj.weight"].zero_()
        state[f"layers.{i}.mlp.down_proj.weight"].zero_()
    grown.load_state_dict(state)
    return grown


def shallower(head: Eagle3Head, depth: int) -> Eagle3Head:
    """`head` cut to `depth` decoder layers: its first layer and the last `depth - 1` of its stacked layers,
    the ones its norm and LM head read, keep their weights; the stacked layers just after the first go. A
    draft call then runs fewer layers; the cut head drafts differently (the dropped layers' updates to the
    residual stream are gone) until training adapts it."""
    have = head.config.num_hidden_layers
    if not 1 <= depth < have:
        raise ValueError(f"The head has {have} decoder layers: it can be cut to 1 to {have - 1}, not {depth}.")
    _check_draft_hidden(head.draft_hidden, depth)
    cut = _rebuilt(head, 0, num_hidden_layers=depth)
    dropped = have - depth
    state = {}
    for name, value in head.state_dict().items():
        if name.startswith("layers."):
            _, index, rest = name.split(".", 2)
            if int(index) < dropped:
                continue
            name = f"layers.{int(index) - dropped}.{rest}"
        state[name] = value
    cut.load_state_dict(state)
    return cut


def widen(head: Eagle3Head, mlp: int, seed: int = 0) -> Eagle3Head:
    """`head` with every decoder layer's MLP grown to `mlp` channels, drafting exactly as before: the added
    channels' gate and up rows start random and their down_proj columns at zero, so they add nothing until
    training moves them, and the zero columns move at once (their gradient is the new channels' output)."""
    have = head.config.intermediate_size
    if mlp < have:
        raise ValueError(f"The head's MLP has {have} channels: it can grow, not shrink to {mlp}.")
    wide = _rebuilt(head, seed, intermediate_size=mlp)
    state = wide.state_dict()
    for name, value in head.state_dict().items():
        if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            state[name][:have] = value
        elif name.endswith("mlp.down_proj.weight"):
            state[name].zero_()
            state[name][:, :have] = value
        else:
            state[name] = value
    wide.load_state_dict(state)
    return wide


def with_vocab(head: Eagle3Head, vocab: torch.Tensor, target_lm: torch.Tensor) -> Eagle3Head:
    """`head` drafting over `vocab` (target ids, a superset of its own draft vocabulary). Its own rows keep
    their weights; each new row starts as the target's LM-head row for that token through the linear map
    that best carries the target's rows of the shared tokens onto the head's (least squares). The head's own
    space is not the target's, so these rows rank low until training moves them (docs/training.md,
    "Growing the draft vocabulary"), and greedy drafting is nearly as before."""
    have = head.draft_to_target()
    vocab = torch.as_tensor(vocab, dtype=torch.long, device=have.device).unique()
    if not bool(torch.isin(have, vocab).all()):
        raise ValueError(f"The head drafts over {have.numel()} tokens: a new draft vocabulary must keep every one of "
                         "them.")
    if vocab.numel() == have.numel():
        return head
    if int(vocab.max()) >= target_lm.shape[0]:
        raise ValueError(f"The new draft vocabulary names token {int(vocab.max())}; the target has "
                         f"{target_lm.shape[0]}.")
    old = head.lm_head.weight.detach().float()
    source = target_lm.detach().float().to(old.device)
    carry = torch.linalg.lstsq(source[have], old).solution  # (H_target, H_head)
    rows = source[vocab] @ carry
    rows[torch.searchsorted(vocab, have)] = old
    grown = Eagle3Head(copy.deepcopy(head.config), head.aux_layers, d2t_of(vocab), head.draft_hidden)
    grown = grown.to(device=old.device, dtype=head.fc.weight.dtype)
    state = head.state_dict()
    state["lm_head.weight"] = rows.to(head.lm_head.weight.dtype)
    grown.load_state_dict(state)
    return grown


def _rebuilt(head: Eagle3Head, seed: int, layers: tuple[int, ...] | None = None, **config: Any) -> Eagle3Head:
    """A new random head shaped like `head` but for the `config` fields given, on its device and dtype."""
    grown = copy.deepcopy(head.config)
    for name, value in config.items():
        setattr(grown, name, value)
    torch.manual_seed(seed)
    new = Eagle3Head(grown, head.aux_layers if layers is None else layers, head.d2t.clone(), head.draft_hidden)
    return new.to(device=head.d2t.device, dtype=head.fc.weight.dtype)


def _check_draft_hidden(draft_hidden: str, depth: int) -> None:
    if draft_hidden not in DRAFT_HIDDEN or (draft_hidden == "first_layer" and depth < 2):
        raise ValueError(f"draft_hidden is one of {list(DRAFT_HIDDEN)} ('first_layer' needs two decoder layers or "
                         f"more), not {draft_hidden!r} with {depth}.")


def with_draft_hidden(head: Eagle3Head, draft_hidden: str) -> Eagle3Head:
    """`head` handing deeper draft levels `draft_hidden` (DRAFT_HIDDEN) instead, with the same weights: level
    one drafts exactly as before, deeper levels differ until training adapts them."""
    _check_draft_hidden(draft_hidden, head.config.num_hidden_layers)
    rewired = copy.deepcopy(head)
    rewired.draft_hidden = draft_hidden
    return rewired


def _check_first_layer(layers: tuple[int, ...]) -> None:
    if layers[0] == 1:
        raise ValueError("A layer list starting at 1 reads back as layer outputs (see aux_layers_of); "
                         "order the layers another way.")


def with_features(head: Eagle3Head, layers: tuple[int, ...]) -> Eagle3Head:
    """`head` reading the target's hidden states `layers`, which include every one it reads now, drafting
    exactly as before: `fc`'s columns for the added layers start at zero, and training moves them at once
    (their gradient is the fused input's times the new features)."""
    layers = tuple(layers)
    if not set(head.aux_layers) <= set(layers) or len(set(layers)) != len(layers):
        raise ValueError(f"The head reads hidden states {list(head.aux_layers)}: the new list must keep each of "
                         f"them and name every layer once, not {list(layers)}.")
    _check_first_layer(layers)
    wide = _rebuilt(head, 0, layers)
    state = head.state_dict()
    size = head.config.hidden_size
    fc = torch.zeros_like(wide.fc.weight)
    for k, layer in enumerate(head.aux_layers):
        at = layers.index(layer)
        fc[:, at * size : (at + 1) * size] = head.fc.weight[:, k * size : (k + 1) * size]
    state["fc.weight"] = fc
    wide.load_state_dict(state)
    return wide


def seeded_from_target(head: Eagle3Head, target: Target) -> Eagle3Head:
    """`head` (N decoder layers) turned into the target's own top: its stacked layers become copies of the
    target's last N-1 layers, its norm and LM head the target's final norm and LM head (the draft vocabulary's
    rows), `fc` passes through the hidden state those layers read (the input of layer L-N+1, which must be one
    of the head's features), and the first layer's output projections start at zero. So at the start the
    head computes the target's own next-token distribution at the context position it reads, one token
    behind its label; training has to teach the first layer the step forward, with the target's top layers
    already there to finish it (docs/training.md, "Seeded from the target")."""
    model = target.model.model
    num_layers, depth = model.config.num_hidden_layers, head.config.num_hidden_layers
    first = num_layers - depth + 1
    if depth < 2:
        raise ValueError("A head seeded from the target needs at least two decoder layers: the first one and "
                         "copies of the target's top layers after it.")
    if first not in head.aux_layers:
        raise ValueError(f"A head of {depth} layers stacks copies of the target's last {depth - 1} layers, which "
                         f"read hidden state {first}: its features {list(head.aux_layers)} must include it.")
    if head.config.intermediate_size != target.model.config.intermediate_size:
        raise ValueError("A head seeded from the target keeps the target's MLP width, which its copied layers have.")
    seeded = copy.deepcopy(head)
    with torch.no_grad():
        for i, layer in enumerate(seeded.layers):
            layer.load_state_dict(model.layers[first + i].state_dict())
        seeded.norm.weight.copy_(model.norm.weight)
        seeded.lm_head.weight.copy_(target.lm_weight[seeded.draft_to_target()])
        size = head.config.hidden_size
        at = head.aux_layers.index(first)
        seeded.fc.weight.zero_()
        seeded.fc.weight[:, at * size : (at + 1) * size] = torch.eye(size)
        seeded.midlayer.self_attn.o_proj.weight.zero_()
        seeded.midlayer.mlp.down_proj.weight.zero_()
    return seeded


def new_eagle3_head(target: Target, draft_vocab: torch.Tensor | None = None, seed: int = 0,
                    layers: tuple[int, ...] | None = None, depth: int = 1, mlp: int | None = None,
                    draft_hidden: str = "output") -> Eagle3Head:
    """A randomly initialised EAGLE-3 head for `target`. draft_vocab: the target ids to keep (default: all);
    layers: the `output_hidden_states` indices of its features (default: the official choice); depth:
    its decoder layers; mlp: their MLP channels (default: the target's); draft_hidden: what deeper draft
    levels read (DRAFT_HIDDEN)."""
    num_layers = target.model.config.num_hidden_layers
    layers = default_aux_layers(num_layers) if layers is None else tuple(layers)
    if not all(0 <= i <= num_layers for i in layers):
        raise ValueError(f"Feature layers {list(layers)} do not exist: {target.name} has hidden states 0 to "
                         f"{num_layers}; pass layers=.")
    _check_first_layer(layers)
    d2t = torch.zeros(target.vocab_size, dtype=torch.long) if draft_vocab is None else d2t_of(draft_vocab)
    torch.manual_seed(seed)
    fields = target_config_fields(target) | {"num_hidden_layers": depth}
    if mlp is not None:
        fields["intermediate_size"] = mlp
    head = Eagle3Head(LlamaConfig(**fields), layers, d2t, draft_hidden)
    return head.to(device=target.device, dtype=target.model.dtype)
