"""Reshaping a trained EAGLE-3 head between training stages: more or fewer decoder layers, wider MLPs, a
larger draft vocabulary, more target features, another wiring of what deeper draft levels read, or a start
from the target's own top layers (docs/training.md).

Added layers, MLP channels and features start where the head drafts exactly as before (zero output
projections, zero `fc` columns), so a stage starts where the previous one stood and training moves them.
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from ddd.eagle3 import MAX_LAYERS, Eagle3Head, check_draft_hidden, check_first_layer
from ddd.head import d2t_of, seeded
from ddd.models import Target


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
    check_draft_hidden(head.draft_hidden, depth)
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
    with seeded(0):  # every weight is overwritten below: the seed only keeps the caller's draws untouched
        grown = Eagle3Head(copy.deepcopy(head.config), head.aux_layers, d2t_of(vocab), head.draft_hidden,
                           target_hidden=head.target_hidden)
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
    with seeded(seed):
        new = Eagle3Head(grown, head.aux_layers if layers is None else layers, head.d2t.clone(), head.draft_hidden,
                         target_hidden=head.target_hidden)
    return new.to(device=head.d2t.device, dtype=head.fc.weight.dtype)


def with_draft_hidden(head: Eagle3Head, draft_hidden: str) -> Eagle3Head:
    """`head` handing deeper draft levels `draft_hidden` (DRAFT_HIDDEN) instead, with the same weights: level
    one drafts exactly as before, deeper levels differ until training adapts them."""
    check_draft_hidden(draft_hidden, head.config.num_hidden_layers)
    rewired = copy.deepcopy(head)
    rewired.draft_hidden = draft_hidden
    return rewired


def with_features(head: Eagle3Head, layers: tuple[int, ...]) -> Eagle3Head:
    """`head` reading the target's hidden states `layers`, which include every one it reads now, drafting
    exactly as before: `fc`'s columns for the added layers start at zero, and training moves them at once
    (their gradient is the fused input's times the new features)."""
    layers = tuple(layers)
    if not set(head.aux_layers) <= set(layers) or len(set(layers)) != len(layers):
        raise ValueError(f"The head reads hidden states {list(head.aux_layers)}: the new list must keep each of "
                         f"them and name every layer once, not {list(layers)}.")
    check_first_layer(layers)
    wide = _rebuilt(head, 0, layers)
    state = head.state_dict()
    size = head.target_hidden  # fc's columns come in blocks of the target's width, one block a feature layer
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
    top = copy.deepcopy(head)
    with torch.no_grad():
        for i, layer in enumerate(top.layers):
            layer.load_state_dict(model.layers[first + i].state_dict())
        top.norm.weight.copy_(model.norm.weight)
        top.lm_head.weight.copy_(target.lm_weight[top.draft_to_target()])
        size = head.config.hidden_size
        at = head.aux_layers.index(first)
        top.fc.weight.zero_()
        top.fc.weight[:, at * size : (at + 1) * size] = torch.eye(size)
        top.midlayer.self_attn.o_proj.weight.zero_()
        top.midlayer.mlp.down_proj.weight.zero_()
    return top
