"""The target's KV cache after a verified tree: the prefix and the accepted path, contiguously."""
from __future__ import annotations

import torch
from transformers import DynamicCache


def keep_cache(cache: DynamicCache, past: int, kept: list[int], device: torch.device) -> None:
    """Keep the first `past` entries plus the tree entries `kept` (ascending), contiguously. Entries already in
    place (the path's first nodes where they lead the tree: the root, its first child, ...) stay; the others move
    down in place and the rest is cut off as a view: a step copies at most the accepted path, never the prefix,
    in three operations a layer's keys or values, or one where nothing moves (a GPU pays for each operation)."""
    end = past + len(kept)
    if kept == list(range(len(kept))):
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.narrow(2, 0, end), layer.values.narrow(2, 0, end)
        return
    source = torch.tensor(kept, device=device) + past
    target = torch.arange(past, end, device=device)
    for layer in cache.layers:  # the gather copies before the write: overlaps are safe
        layer.keys = layer.keys.index_copy_(2, target, layer.keys.index_select(2, source)).narrow(2, 0, end)
        layer.values = layer.values.index_copy_(2, target, layer.values.index_select(2, source)).narrow(2, 0, end)
