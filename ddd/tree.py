"""The candidate pool a drafter grows, and the tree it keeps for verification."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch


@dataclass
class Pool:
    """Every drafted candidate of one step, in drafting order (parents before children; 0 is the root)."""

    tokens: list[torch.Tensor] = field(default_factory=list)
    parents: list[torch.Tensor] = field(default_factory=list)
    depths: list[torch.Tensor] = field(default_factory=list)
    logprobs: list[torch.Tensor] = field(default_factory=list)
    scores: list[torch.Tensor] = field(default_factory=list)
    ranks: list[torch.Tensor] = field(default_factory=list)
    size: int = 0

    @classmethod
    def with_root(cls, root_token: torch.Tensor) -> "Pool":
        pool = cls()
        zero = torch.zeros(1, device=root_token.device)
        pool.add(root_token.view(1), torch.full((1,), -1, device=root_token.device), 0, zero, zero)
        return pool

    def add(self, tokens, parents, depth: int, logprobs, scores, ranks=None) -> torch.Tensor:
        """Append candidates; returns their pool indices."""
        n = tokens.numel()
        device = tokens.device
        self.tokens.append(tokens.reshape(-1))
        self.parents.append(parents.reshape(-1).long())
        self.depths.append(torch.full((n,), depth, device=device, dtype=torch.long))
        self.logprobs.append(logprobs.reshape(-1).float())
        self.scores.append(scores.reshape(-1).float())
        self.ranks.append(torch.zeros(n, dtype=torch.long, device=device) if ranks is None else ranks.reshape(-1))
        index = torch.arange(self.size, self.size + n, device=device)
        self.size += n
        return index

    def cat(self) -> dict[str, torch.Tensor]:
        return {
            "tokens": torch.cat(self.tokens),
            "parents": torch.cat(self.parents),
            "depths": torch.cat(self.depths),
            "logprobs": torch.cat(self.logprobs),
            "scores": torch.cat(self.scores),
            "ranks": torch.cat(self.ranks),
        }


def pool_size(beam_width: int, calls: int) -> int:
    """The nodes `calls` draft calls of a dynamic tree put in its pool: the root, the root call's K (`beam_width`)
    children, then K x K candidates per later call."""
    return 1 + (beam_width + (calls - 1) * beam_width**2 if calls else 0)


def rerank(scores: torch.Tensor, depths: torch.Tensor, budget: int) -> torch.Tensor:
    """Pool indices of the root plus the `budget - 1` best candidates by cumulative score, in pool order.

    Scores only fall along a path, and exact ties go to the shallower node, so every kept node's parent
    is kept too.
    """
    candidates = torch.arange(1, scores.numel(), device=scores.device)
    if candidates.numel() > budget - 1:
        by_depth = candidates[torch.sort(depths[1:], stable=True).indices]
        by_score = by_depth[torch.sort(scores[by_depth], descending=True, stable=True).indices]
        candidates = by_score[: budget - 1].sort().values
    return torch.cat((candidates.new_zeros(1), candidates))


@dataclass
class DraftTree:
    """The kept tree, root first, topologically ordered; what the target verifies in one forward."""

    tokens: torch.Tensor  # (n,)
    parents: torch.Tensor  # (n,) index into the tree, -1 for the root
    depths: torch.Tensor  # (n,)
    pool_index: torch.Tensor  # (n,) index of each node in the step's pool

    @classmethod
    def from_pool(cls, pool: dict[str, torch.Tensor], keep: torch.Tensor) -> "DraftTree":
        remap = torch.full_like(pool["parents"], -1)
        remap[keep] = torch.arange(keep.numel(), device=keep.device)
        parents = pool["parents"][keep]
        tree_parents = torch.where(parents >= 0, remap[parents.clamp(min=0)], parents)
        return cls(pool["tokens"][keep], tree_parents, pool["depths"][keep], keep)

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
