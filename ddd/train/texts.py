"""The texts distillation reads: chat-templated corpus rows, prompts and the target's own answers as token
ids, the held-out split, padded batches, and the draft vocabulary chosen from them (`python -m ddd.train
distill`, ddd/train/distill.py)."""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from .answers import answered_samples
from .common import TrainError, choose_draft_vocab, length_batches, read_corpus, read_prompts

HELDOUT_EVERY = 50  # one prompt in 50 (by a hash of its text) is held out, with every answer to it


@dataclass
class Text:
    key: str  # the user turn: answers to one prompt stay on one side of the held-out split
    ids: list[int]
    start: int  # index of the first answer token (len(ids) for a question alone)


@dataclass
class Batch:
    ids: torch.Tensor  # (B, T) right-padded
    lengths: torch.Tensor  # (B,)
    starts: torch.Tensor  # (B,) index of each row's first answer token


def is_heldout(key: str) -> bool:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % HELDOUT_EVERY == 0


def read_texts(corpus: list[str], prompts: str | None, tokenizer, max_len: int) -> list[Text]:
    """Chat-templated token ids: corpus rows as a user turn plus its answer, prompts as a user turn alone."""
    turns: list[tuple[str, list[dict], bool]] = []
    for path in corpus:
        for prompt, response in read_corpus(path):
            turns.append((prompt, [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                          False))
    if prompts:
        for row in read_prompts(prompts):
            turns.append((row["prompt"], [{"role": "user", "content": row["prompt"]}], True))
    if not turns:
        return []
    texts = [tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=question)
             for _, messages, question in turns]
    questions = [tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
                 for _, messages, _ in turns]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    asked = tokenizer(questions, add_special_tokens=False)["input_ids"]
    out = []
    for (key, _, question), ids, head in zip(turns, encoded, asked):
        start = len(ids) if question else _common_prefix(ids, head)
        ids = ids[:max_len]
        if len(ids) >= 3:
            out.append(Text(key, ids, min(start, len(ids))))
    return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def read_answers(directories: list[str], max_len: int) -> list[Text]:
    """The target's own answers, as `python -m ddd.train data` stores them, keyed by their prompt's text so
    that they fall on the same side of the held-out split as the corpus rows on that prompt."""
    texts = []
    for directory in directories:
        for sample, prompt in answered_samples(directory):
            ids = sample["ids"].tolist()[:max_len]
            if len(ids) >= 3:
                texts.append(Text(prompt, ids, min(sample["prompt_len"], len(ids))))
    return texts


def template_prefix(tokenizer) -> int:
    """Tokens every chat-templated text starts with (a fixed system turn): too easy to count as signal."""
    a, b = ([tokenizer.apply_chat_template([{"role": "user", "content": c}], tokenize=False)] for c in ("a", "b"))
    ids_a, ids_b = (tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (a, b))
    return _common_prefix(ids_a, ids_b)


def make_batches(texts: list[Text], batch_tokens: int, rng: random.Random) -> list[list[Text]]:
    return length_batches(texts, [len(t.ids) for t in texts], batch_tokens, rng)


def collate(texts: list[Text], pad_id: int) -> Batch:
    width = max(len(t.ids) for t in texts)
    ids = torch.full((len(texts), width), pad_id, dtype=torch.long)
    for row, text in enumerate(texts):
        ids[row, : len(text.ids)] = torch.tensor(text.ids)
    return Batch(ids, torch.tensor([len(t.ids) for t in texts]), torch.tensor([t.start for t in texts]))


def cached_texts(args, target, cache_dir: Path) -> list[Text]:
    """Tokenised texts, cached beside the checkpoint so that a resumed stage starts at once."""
    source = {"corpus": list(args.corpus), "prompts": args.prompts, "max_len": args.max_len, "model": target.name,
              "answers": [str(Path(d).resolve()) for d in args.answers]}
    path = cache_dir / "texts.pt"
    if path.exists():
        cached = torch.load(path, weights_only=False)
        if cached["source"] == source:
            return [Text(*row) for row in cached["texts"]]
    texts = read_texts(list(args.corpus), args.prompts, target.tokenizer, args.max_len)
    texts += read_answers(args.answers, args.max_len)
    if not texts:
        raise TrainError("No texts to distil from: give --corpus files, --prompts or --answers.")
    cache_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"source": source, "texts": [(t.key, t.ids, t.start) for t in texts]}, path)
    return texts


def _by_frequency(texts: list[Text], vocab_size: int) -> torch.Tensor:
    """Every target id, the training texts' most frequent first."""
    counts = torch.bincount(torch.tensor([i for t in texts for i in t.ids]), minlength=vocab_size)
    return counts.argsort(descending=True, stable=True)


def draft_vocabulary(texts: list[Text], vocab_size: int, size: int, eos: set[int]) -> torch.Tensor:
    """The `size` most frequent target tokens of the training texts, always with the end-of-turn tokens."""
    return choose_draft_vocab(_by_frequency(texts, vocab_size), size, eos)


def grown_vocabulary(texts: list[Text], have: torch.Tensor, size: int, vocab_size: int) -> torch.Tensor:
    """`have` plus the training texts' most frequent other tokens, `size` target ids in all (ascending)."""
    ranking = _by_frequency(texts, vocab_size)
    extra = ranking[~torch.isin(ranking, have.cpu())][: max(0, size - have.numel())]
    return torch.cat((have.cpu(), extra)).sort().values
