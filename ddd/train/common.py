"""What every stage of the draft-head recipe shares: reading prompts, chat-templating a question, the
draft vocabulary's cut, the learning-rate schedule and checkpoint files."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ddd.jsonl import read_jsonl

DEFAULT_PROMPTS = "../shared/data/train_prompts.jsonl"
# Open models' answers to AlpacaEval instructions and GSM8K worked solutions (docs/training.md).
DEFAULT_CORPUS = ("../shared/data/corpus/alpaca_eval_open_models.jsonl", "../shared/data/corpus/gsm8k_train.jsonl")


class TrainError(ValueError):
    """A bad argument or input for training; the message says what to change."""


def read_prompt_files(paths: list[str]) -> list[dict]:
    """The prompts of several files, each row's id prefixed with its file's name, a prompt met twice kept
    once (the corpus answers some training prompts again)."""
    rows, seen = [], set()
    for path in paths:
        for row in read_prompts(path):
            if row["prompt"] not in seen:
                seen.add(row["prompt"])
                rows.append({"id": f"{Path(path).stem}/{row['id']}", "prompt": row["prompt"]})
    return rows


def read_corpus(path: str | Path) -> list[tuple[str, str]]:
    """The (prompt, response) rows of a corpus JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise TrainError(f"Corpus file {path} does not exist.")
    rows = []
    for number, row in read_jsonl(path, TrainError):
        prompt, response = (row.get("prompt"), row.get("response")) if isinstance(row, dict) else (None, None)
        if not (isinstance(prompt, str) and isinstance(response, str) and prompt.strip() and response.strip()):
            raise TrainError(f"{path}:{number} needs non-empty `prompt` and `response` strings.")
        rows.append((prompt, response))
    return rows


def read_prompts(path: str | Path) -> list[dict]:
    """Rows with an `id` and a `prompt` (train_prompts.jsonl), or MT-bench rows (first of `turns`)."""
    path = Path(path)
    if not path.is_file():
        raise TrainError(f"Prompt file {path} does not exist.")
    rows = []
    for number, row in read_jsonl(path, TrainError):
        text = row.get("prompt") if isinstance(row, dict) else None
        if text is None and isinstance(row, dict) and row.get("turns"):
            text = row["turns"][0]
        if not isinstance(text, str) or not text.strip():
            raise TrainError(f"{path}:{number} has no `prompt` text (nor MT-bench `turns`).")
        rows.append({"id": str(row.get("id", row.get("question_id", number))), "prompt": text})
    if not rows:
        raise TrainError(f"Prompt file {path} holds no prompts.")
    return rows


def _token_list(encoded) -> list[int]:
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return [int(i) for i in encoded]


def prompt_ids(tokenizer, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """Chat-templated ids of one user turn; an over-long question is cut (from its end) to fit."""
    def template(content: str) -> list[int]:
        messages = [{"role": "user", "content": content}]
        return _token_list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))

    ids = template(text)
    if len(ids) <= max_tokens:
        return ids, False
    content = tokenizer.encode(text, add_special_tokens=False)
    overhead = len(ids) - len(content)
    keep = max_tokens - overhead
    while keep > 0:
        ids = template(tokenizer.decode(content[:keep]))
        if len(ids) <= max_tokens:
            return ids, True
        keep -= max(1, len(ids) - max_tokens)
    raise TrainError(f"--max-prompt-tokens {max_tokens} leaves no room for the question after the chat template.")


def choose_draft_vocab(ranking: torch.Tensor, size: int, eos: set[int]) -> torch.Tensor:
    """The `size` top-ranked ids, always including the end-of-sequence ids; ascending."""
    keep = list(dict.fromkeys([int(i) for i in sorted(eos)] + ranking[:size].tolist()))[:size]
    for e in eos:  # eos ids first, so they survive the cut
        assert e in keep
    return torch.tensor(sorted(keep), dtype=torch.long)


def lr_factor(step: int, warmup: int, total: int, floor: float = 0.05) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def length_batches(items: list, lengths: list[int], batch_tokens: int, rng: random.Random) -> list[list]:
    """Batches of about `batch_tokens` padded tokens, in random order: items of similar length go together
    (sorted within shuffled pools of about 16 batches, so that batches differ from epoch to epoch)."""
    order = list(range(len(items)))
    rng.shuffle(order)
    pool = max(1, 16 * batch_tokens // max(1, sum(lengths) // max(1, len(items))))
    batches = []
    for start in range(0, len(order), pool):
        batch: list[int] = []
        width = 0
        for i in sorted(order[start:start + pool], key=lambda i: lengths[i]):
            if batch and max(width, lengths[i]) * (len(batch) + 1) > batch_tokens:
                batches.append(batch)
                batch, width = [], 0
            batch.append(i)
            width = max(width, lengths[i])
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return [[items[i] for i in batch] for batch in batches]


@dataclass
class Progress:
    """Where a training run stands; its checkpoint holds it, so that --resume continues exactly."""

    step: int = 0
    epoch: int = 0
    done_in_epoch: int = 0
    history: list[dict] = field(default_factory=list)
    elapsed: float = 0.0


def epoch_batches(progress: Progress, make: Callable[[int], list]) -> Iterator:
    """Batches forever, epoch after epoch (`make(epoch)` gives an epoch's seeded order); a resumed run
    rebuilds its epoch's order and skips what earlier runs did."""
    batches = make(progress.epoch)
    while True:
        if progress.done_in_epoch >= len(batches):
            progress.epoch, progress.done_in_epoch = progress.epoch + 1, 0
            batches = make(progress.epoch)
        progress.done_in_epoch += 1
        yield batches[progress.done_in_epoch - 1]


class Optimiser:
    """AdamW with linear warm-up then cosine decay over `steps`, and gradient-norm clipping."""

    def __init__(self, head: torch.nn.Module, lr: float, steps: int, warmup: int, clip: float,
                 weight_decay: float = 0.0, prefix_lr: dict[str, float] | None = None):
        """`prefix_lr` gives the parameters whose names start with a prefix their own peak learning rate:
        weights added to a trained head start at zero and, at the rate that fine-tunes the rest, barely move."""
        named = [(name, p) for name, p in head.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        self.clip = clip
        groups: dict[float, list[torch.nn.Parameter]] = {}
        for name, p in named:
            rate = next((r for prefix, r in (prefix_lr or {}).items() if name.startswith(prefix)), lr)
            groups.setdefault(rate, []).append(p)
        self.optimizer = torch.optim.AdamW([{"params": ps, "lr": rate} for rate, ps in groups.items()], lr=lr,
                                           betas=(0.9, 0.95), weight_decay=weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, warmup, steps))

    def step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.scheduler.step()

    @property
    def lr(self) -> float:
        """The current rate of the first parameters' group (the head's own, not a `prefix_lr` one)."""
        return self.scheduler.get_last_lr()[0]

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def read_checkpoint(ckpt_dir: str | Path, resume: bool) -> dict | None:
    """The checkpoint to resume from (None for a fresh run); --resume without one is an error."""
    path = Path(ckpt_dir) / "checkpoint.pt"
    if not resume:
        return None
    if not path.exists():
        raise TrainError(f"--resume: no checkpoint at {path}.")
    return torch.load(path, map_location="cpu", weights_only=False)


def write_checkpoint(ckpt_dir: str | Path, head: torch.nn.Module, optimiser: Optimiser, progress: Progress,
                     generator: torch.Generator, **extra) -> None:
    """Everything --resume needs, `generator` being the run's own source of random draws."""
    save_checkpoint(Path(ckpt_dir) / "checkpoint.pt", {
        "head": head.state_dict(), "optimiser": optimiser.state_dict(), "progress": asdict(progress),
        "torch_rng": generator.get_state(), **extra,
    })


def restore(state: dict, head: torch.nn.Module, optimiser: Optimiser, generator: torch.Generator) -> Progress:
    """Put a checkpoint's weights, optimiser and random draws back; where the run stood."""
    head.load_state_dict(state["head"], strict=False)
    optimiser.load_state_dict(state["optimiser"])
    generator.set_state(state["torch_rng"])
    return Progress(**state["progress"])


def log_record(record: dict) -> None:
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()), flush=True)


def add_machine_arguments(parser, model_help: str = "target model: default SmolLM2-135M-Instruct, or a local dir / "
                                                   "hub id") -> None:
    """The arguments every stage takes: which target, where it runs, how many threads, which seed."""
    parser.add_argument("--model", default=None, help=model_help)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
