"""Decoding the target's answers to many prompts at once, for `python -m ddd.train data` (ddd/train/answers.py):
greedy and sampled rows side by side over one preallocated cache, each row refilled with the next prompt as
soon as its answer ends, keeping the final norm's outputs as the answer's features when asked to."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin


@dataclass
class Item:
    """A prompt to answer: its row and id in the prompt files, its chat-templated ids (cut to fit where
    `truncated`), and whether its answer is sampled rather than greedy."""

    index: int
    id: str
    ids: list[int]
    sampled: bool
    truncated: bool


class _RowLayer(CacheLayerMixin):
    """One decoder layer's keys and values, preallocated for every row of the batch, each row at its own
    length: a step writes each row's new entry at that row's end, so nothing grows (growing a cache by
    concatenation was most of a decoding step), and a row whose answer is done takes the next prompt's
    prefill while the others decode on."""

    def __init__(self, rows: int, heads: int, width: int, dim: int, dtype: torch.dtype, device, lengths):
        super().__init__()
        self.keys = torch.zeros((rows, heads, width, dim), dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.lengths = lengths  # (rows,) shared by every layer: where each row's next entry goes
        self.rows = torch.arange(rows, device=device)
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffers exist from the start."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys[self.rows, :, self.lengths] = key_states[:, :, 0]
        self.values[self.rows, :, self.lengths] = value_states[:, :, 0]
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def get_seq_length(self) -> int:
        return int(self.lengths.max())

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


@dataclass
class _Row:
    """The answer a batch row is decoding."""

    item: Item
    answer: list[int]
    features: list[torch.Tensor]  # float16: the prompt's positions from its prefill, then one per token read


class _Rows:
    """The decoding batch: `rows` slots over one preallocated cache, refilled from a queue of prompts."""

    def __init__(self, target, rows: int, width: int, keep: bool):
        model = target.model
        config = model.config
        self.model, self.keep, self.device = model, keep, target.device
        dtype = next(model.parameters()).dtype
        heads = config.num_key_value_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.layers = [_RowLayer(rows, heads, width, dim, dtype, self.device, self.lengths)
                       for _ in range(config.num_hidden_layers)]
        self.cache = Cache(layers=self.layers)
        self.last = torch.zeros((rows, config.hidden_size), dtype=dtype, device=self.device)  # newest final states
        self.sampled = torch.zeros(rows, dtype=torch.bool, device=self.device)
        self.slots: list[_Row | None] = [None] * rows
        self.low = torch.finfo(dtype).min

    def fill(self, row: int, item: Item | None) -> None:
        """Prefill `item` alone into `row` (or leave the row idle: None)."""
        self.slots[row] = None
        if item is None:
            return
        single = DynamicCache(config=self.model.config)
        ids = torch.tensor([item.ids], device=self.device)
        hidden = self.model.model(input_ids=ids, cache=single, use_cache=True).last_hidden_state[0]
        n = len(item.ids)
        for layer, filled in zip(self.layers, single.layers):
            layer.keys[row, :, :n] = filled.keys[0]
            layer.values[row, :, :n] = filled.values[0]
        self.lengths[row], self.last[row], self.sampled[row] = n, hidden[-1], item.sampled
        self.slots[row] = _Row(item, [], [hidden.to(torch.float16).cpu()] if self.keep else [])

    def step(self, tokens: torch.Tensor, advance: torch.Tensor) -> None:
        """Read `tokens` (one per row) where `advance` is set; other rows (idle, or just refilled) are run too,
        as a batch is, but their entry is written past their end and their state kept."""
        width = self.layers[0].keys.shape[-2]
        visible = torch.arange(width, device=self.device)[None] <= self.lengths[:, None]
        mask = torch.zeros(visible.shape, dtype=self.last.dtype, device=self.device).masked_fill(~visible, self.low)
        hidden = self.model.model(input_ids=tokens[:, None], position_ids=self.lengths[:, None],
                                  attention_mask=mask[:, None, None], cache=self.cache,
                                  use_cache=True).last_hidden_state[:, 0]
        self.last[advance] = hidden[advance]
        self.lengths += advance.long()
        if self.keep:
            stored = hidden.to(torch.float16).cpu()  # one copy a step, shared by the rows' lists
            for row in advance.nonzero()[:, 0].tolist():
                self.slots[row].features.append(stored[row: row + 1])

    def shrink(self) -> None:
        """Drop the idle rows, so that the last answers decode in a smaller batch."""
        keep = torch.tensor([slot is not None for slot in self.slots], device=self.device)
        self.lengths = self.lengths[keep]
        for layer in self.layers:
            layer.keys, layer.values, layer.lengths = layer.keys[keep], layer.values[keep], self.lengths
            layer.rows = torch.arange(len(self.lengths), device=self.device)
        self.last, self.sampled = self.last[keep], self.sampled[keep]
        self.slots = [slot for slot in self.slots if slot is not None]


@torch.inference_mode()
def decode_answers(target, items: list[Item], args, generator: torch.Generator) -> Iterator[dict]:
    """The target's answers to `items`, greedy and sampled rows side by side, each yielded once done.

    Every row holds one prompt from its own prefill (no padding, its own positions) and decodes one token
    a step; a row whose answer ends takes the next prompt, so no row idles while a long answer finishes.
    The features are the final norm's outputs that the loop computes anyway: prompt positions from the
    prefill, then one per answer token read back.
    """
    eos = target.eos_ids()
    queue = iter(items)
    width = max(len(item.ids) for item in items) + args.max_new_tokens
    batch = _Rows(target, min(args.batch_size, len(items)), width, keep=not args.bf16)
    for row in range(len(batch.slots)):
        batch.fill(row, next(queue, None))
    while batch.slots:
        logits = target.model.lm_head(batch.last).float()
        tokens = logits.argmax(-1)
        if bool(batch.sampled.any()):
            drawn = torch.multinomial(torch.softmax(logits / args.temperature, -1), 1, generator=generator)[:, 0]
            tokens = torch.where(batch.sampled, drawn, tokens)
        advance = torch.zeros(len(batch.slots), dtype=torch.bool, device=batch.device)
        for row, (slot, token) in enumerate(zip(batch.slots, tokens.tolist())):
            if slot is None:
                continue
            slot.answer.append(token)
            if token in eos or len(slot.answer) == args.max_new_tokens:
                yield _sample(slot, eos)
                batch.fill(row, next(queue, None))
            else:
                advance[row] = True
        if not any(batch.slots):
            break
        if 2 * batch.slots.count(None) >= len(batch.slots):  # rows idle only once the queue is empty
            busy = torch.tensor([slot is not None for slot in batch.slots], device=batch.device)
            tokens, advance = tokens[busy], advance[busy]
            batch.shrink()
        batch.step(tokens, advance)


def _sample(slot: _Row, eos: set[int]) -> dict:
    item, answer = slot.item, slot.answer
    full = item.ids + answer
    features = torch.cat(slot.features)[: len(full) - 1] if slot.features else None
    return {"id": item.id, "index": item.index, "ids": torch.tensor(full, dtype=torch.int32),
            "prompt_len": len(item.ids), "sampled": item.sampled, "truncated": item.truncated,
            "finished": answer[-1] in eos, "features": features}
