"""Counting the operations PyTorch dispatches: a cost that no machine's speed or load changes.

On a GPU, a small target's forward at batch 1 is bound by launching its operations (a few microseconds
each), not by reading its weights, so the number of operations a method dispatches per generated token
is what decides its speed there (docs/algorithms.md, "Operations"). The counter sees every aten operation
below autograd, views included, exactly as a `TorchDispatchMode` is handed them; a step records them as
`ddd.trace.StepOps`.
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts every dispatched operation; `mark()` reads how many ran since the last mark."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self._marked = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))

    def mark(self) -> int:
        since, self._marked = self.count - self._marked, self.count
        return since
