"""The candidate pool a drafter grows, and the tree it keeps for verification."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch


def _flat(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`values` as a 1-D tensor of `dtype`, converted only where it is not one already (each conversion is an
    operation a GPU launches)."""
    values = values if values.dim() == 1 else values.reshape(-1)
    return values if values.dtype == dtype else values.to(dtype)


@dataclass
class Pool:
    """Every drafted candidate of one step, in drafting order (parents before children; 0 is the root), as one
    chunk of 1-D tensors per level added."""

    tokens: list[torch.Tensor] = field(default_factory=list)
    parents: list[torch.Tensor] = field(default_factory=list)
    logprobs: list[torch.Tensor] = field(default_factory=list)
    scores: list[torch.Tensor] = field(default_factory=list)
    ranks: list[torch.Tensor] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)  # one a candidate, kept as numbers until `cat`
    size: int = 0

    @classmethod
    def with_root(cls, root_token: torch.Tensor) -> "Pool":
        pool = cls()
        zero = torch.zeros(1, device=root_token.device)
        pool.add(root_token.view(1), torch.full((1,), -1, device=root_token.device), 0, zero, zero,
                 torch.zeros(1, dtype=torch.long, device=root_token.device))
        return pool

    def add(self, tokens, parents, depth: int, logprobs, scores, ranks) -> int:
        """Append candidates (tensors of one shape, read in order); returns the pool index of the first."""
        start = self.size
        self.tokens.append(_flat(tokens, torch.long))
        self.parents.append(_flat(parents, torch.long))
        self.logprobs.append(_flat(logprobs, torch.float32))
        self.scores.append(_flat(scores, torch.float32))
        self.ranks.append(_flat(ranks, torch.long))
        count = self.tokens[-1].numel()
        self.depths += [depth] * count
        self.size += count
        return start

    def cat(self) -> dict[str, torch.Tensor]:
        device = self.tokens[0].device
        return {
            "tokens": torch.cat(self.tokens),
            "parents": torch.cat(self.parents),
            "depths": torch.tensor(self.depths, device=device),
            "logprobs": torch.cat(self.logprobs),
            "scores": torch.cat(self.scores),
            "ranks": torch.cat(self.ranks),
        }


def pool_size(beam_width: int, calls: int) -> int:
    """The nodes `calls` draft calls of a dynamic tree put in its pool: the root, the root call's K (`beam_width`)
    children, then K x K candidates per later call."""
    return 1 + (beam_width + (calls - 1) * beam_width**2 if calls else 0)


def rerank(scores: torch.Tensor, budget: int) -> torch.Tensor:
    """Pool indices of the root plus the `budget - 1` best candidates by cumulative score, in pool order.

    Scores only fall along a path, and exact ties go to the shallower node (the pool lists levels in order and
    the sort is stable), so every kept node's parent is kept too.
    """
    if scores.numel() <= budget:
        return torch.arange(scores.numel(), device=scores.device)
    best = torch.sort(scores[1:], descending=True, stable=True).indices[: budget - 1] + 1
    return torch.cat((best.new_zeros(1), best.sort().values))


@dataclass
class DraftTree:
    """The kept tree, root first, topologically ordered; what the target verifies in one forward."""

    tokens: torch.Tensor  # (n,)
    parents: torch.Tensor  # (n,) index into the tree, -1 for the root
    depths: torch.Tensor  # (n,)
    pool_index: torch.Tensor  # (n,) index of each node in the step's pool

    @classmethod
    def from_pool(cls, pool: dict[str, torch.Tensor], keep: torch.Tensor) -> "DraftTree":
        # One slot past the pool stays -1: the root's parent, -1, reads it.
        remap = torch.full((pool["parents"].numel() + 1,), -1, dtype=torch.long, device=keep.device)
        remap[keep] = torch.arange(keep.numel(), device=keep.device)
        return cls(pool["tokens"][keep], remap[pool["parents"][keep]], pool["depths"][keep], keep)

    def __len__(self) -> int:
        return self.tokens.numel()

    @cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """(n, n) bool: row i marks i and all its ancestors (verification and acceptance both read it). Each node's
        chain of ancestors comes from following parent links once per level of the tree (the root is its own
        parent here, which changes nothing: it is everyone's ancestor)."""
        n = len(self)
        parents = self.parents.clamp(min=0)
        chain = [torch.arange(n, device=self.tokens.device)]
        for _ in range(int(self.depths.max())):
            chain.append(parents[chain[-1]])
        return torch.zeros(n, n, dtype=torch.bool, device=self.tokens.device).scatter_(1, torch.stack(chain, 1), True)

    def attention_mask(self, past: int, dtype: torch.dtype) -> torch.Tensor:
        """(1, 1, n, past + n) additive mask for verifying the tree after `past` cached tokens: each node sees
        the prefix, its ancestors and itself."""
        n = len(self)
        mask = torch.zeros(1, 1, n, past + n, dtype=dtype, device=self.tokens.device)
        mask[0, 0, :, past:].masked_fill_(~self.ancestor_mask, torch.finfo(dtype).min)
        return mask

    @classmethod
    def chain(cls, tokens: torch.Tensor) -> "DraftTree":
        """A tree that is one path (each token the child of the one before): what verifying n tokens costs
        barely depends on the tree's shape, so the budget times these."""
        n = tokens.numel()
        index = torch.arange(n, device=tokens.device)
        return cls(tokens, index - 1, index, index)
