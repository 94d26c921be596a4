"""Counting the operations PyTorch dispatches: a cost that no machine's speed or load changes.

On a GPU, a small target's forward at batch 1 is bound by launching its operations (a few microseconds
each), not by reading its weights, so the number of operations a method dispatches per generated token
is what decides its speed there (docs/results.md, "Operations per token"). The counter sees every aten
operation below autograd, views included, exactly as a `TorchDispatchMode` is handed them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from torch.utils._python_dispatch import TorchDispatchMode

PHASES = ("draft", "verify", "other")  # a step's parts, as its timings split it (ddd/trace.py Step)


@dataclass
class StepOps:
    """The operations one step dispatched: drafting (the head's calls and the tree's scores), verification
    (the target's forward over the tree and the acceptance walk), and the rest (the KV cache kept, the
    step's record, the text)."""

    draft: int = 0
    verify: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.draft + self.verify + self.other


class OpCounter(TorchDispatchMode):
    """Counts every dispatched operation; `mark()` reads how many ran since the last mark. With `by_name`
    it also tallies them by operation, for finding where a step's operations go."""

    def __init__(self, by_name: bool = False):
        super().__init__()
        self.count = 0
        self._marked = 0
        self.by_name: Counter[str] | None = Counter() if by_name else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        if self.by_name is not None:
            self.by_name[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))

    def mark(self) -> int:
        since, self._marked = self.count - self._marked, self.count
        return since
