"""Turning target logits into emitted tokens: plain sampling, and tree acceptance that keeps the exact
distribution of plain decoding (greedy: token for token; sampling: in distribution)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .settings import Sampling
from .tree import DraftTree


def probabilities(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The target's next-token distribution after temperature, top-k and top-p (float32, on the CPU)."""
    logits = logits.float().cpu() / sampling.temperature
    if sampling.top_k:
        kth = logits.topk(min(sampling.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p < 1:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= sampling.top_p, 0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def next_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    """Plain decoding's choice from one row of logits."""
    if sampling.greedy:
        return int(logits.argmax())
    return int(torch.multinomial(probabilities(logits, sampling), 1, generator=generator))


class TreeLogits:
    """Target logits of tree nodes, computed on demand: acceptance only reads the nodes it walks through,
    and on a CPU the full-vocabulary LM head over every node of a large tree costs a good share of a forward."""

    def __init__(self, hidden: torch.Tensor, lm_head: torch.nn.Module):
        self.hidden, self.lm_head = hidden, lm_head
        self._rows: dict[int, torch.Tensor] = {}

    def rows(self, nodes: list[int]) -> torch.Tensor:
        todo = [i for i in nodes if i not in self._rows]
        if todo:
            for i, row in zip(todo, self.lm_head(self.hidden[todo])):
                self._rows[i] = row
        return torch.stack([self._rows[i] for i in nodes])


@dataclass
class Acceptance:
    path: list[int]  # tree indices from the root (the root included)
    bonus: int  # the token the target adds after the last accepted node


def accept_greedy(tree: DraftTree, logits: TreeLogits) -> Acceptance:
    """A node is accepted when it and all its ancestors equal the target's argmax at their parents.

    Siblings are distinct tokens, so the accepted nodes form one chain; its deepest node ends the path.
    Only nodes with children need the target's argmax, plus the last accepted node for the bonus.
    """
    parents = tree.parents.tolist()
    internal = sorted(set(parents) - {-1})
    best = torch.full_like(tree.tokens, -1)
    if internal:
        best[internal] = logits.rows(internal).argmax(dim=-1)
    ok = tree.tokens == best[tree.parents.clamp(min=0)]
    ok[0] = True
    accepted = ~(tree.ancestor_mask & ~ok[None, :]).any(dim=1)
    last = int(torch.where(accepted, tree.depths, -1).argmax())
    path = [last]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    bonus = int(best[last]) if last in internal else int(logits.rows([last])[0].argmax())
    return Acceptance(path[::-1], bonus)


def accept_sampled(tree: DraftTree, logits: TreeLogits, sampling: Sampling, generator: torch.Generator,
                   ranks: torch.Tensor) -> Acceptance:
    """Walk down from the root. At each node try its children in draft-rank order: accept child x with
    probability p(x) under what is left of the target distribution p; on rejection zero p(x) and renormalise.
    When every child is rejected (or at a leaf), sample the bonus from what is left. Each emitted token thus
    follows plain sampling's distribution exactly (the draft proposals are point masses)."""
    parents = tree.parents.tolist()
    tokens = tree.tokens.tolist()
    order = ranks.tolist()
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        if parent >= 0:
            children.setdefault(parent, []).append(i)
    node, path = 0, [0]
    while True:
        p = probabilities(logits.rows([node])[0], sampling)
        for child in sorted(children.get(node, []), key=lambda c: order[c]):
            token = tokens[child]
            mass = p.sum()
            if float(torch.rand((), generator=generator)) * mass < p[token]:
                node = child
                path.append(child)
                break
            p[token] = 0
        else:
            return Acceptance(path, int(torch.multinomial(p / p.sum(), 1, generator=generator)))
