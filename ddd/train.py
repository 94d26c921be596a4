"""Training an EAGLE draft head on the target's own answers.

Two steps, both resumable:

    python -m ddd.train data --prompts ../shared/data/train_prompts.jsonl --out data/train
    python -m ddd.train fit --data data/train --out assets/head --draft-vocab 8192

`data` asks the target to answer each prompt (chat template, one user turn; greedy, plus a
sampled fraction at temperature 0.7) and stores, per sample, the token ids (prompt + answer),
the prompt length and the target's features (last hidden state after the final norm, float16)
in shard files. Finished shards are skipped when the command is run again.

`fit` trains the head's fc and decoder layer (the target's embeddings and LM head stay frozen)
with the EAGLE loss: SmoothL1 between predicted and true next features + 0.1 x cross-entropy of
the draft logits against the next token (or the target's whole distribution), with uniform noise on
the input features. Answer positions count (`--positions all`: question tokens too), and `--level2`
adds the loss one level deeper, where the head reads its own guesses as inside a draft tree.
Checkpoints are written periodically and `--resume` continues from the last one.

Alignment used throughout: for tokens x_0..x_n and features f_0..f_{n-1} (f_t is the target's
feature after reading x_t), the head reads (embed(x_{t+1}), f_t) at position t and its output
h_t should equal f_{t+1}; the draft logits of h_t predict x_{t+2}.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import DynamicCache

from . import distill
from .jsonl import read_jsonl

DEFAULT_PROMPTS = "../shared/data/train_prompts.jsonl"
SHARD_GLOB = "shard_*.pt"
DATA_FORMAT = 2  # 2: greedy and sampled rows share one decoding loop (1: separate generate() calls)
# Fields of the data run that must agree with an existing output directory for it to be resumed.
_PLAN_KEYS = ("format", "model", "prompts", "limit", "seed", "shard_size", "max_new_tokens", "max_prompt_tokens",
              "sampled_fraction", "temperature")


class TrainError(ValueError):
    """A bad argument or input for training; the message says what to change."""


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------

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


@dataclass
class _Item:
    index: int
    id: str
    ids: list[int]
    sampled: bool
    truncated: bool


def _plan(args, target) -> tuple[list[_Item], dict]:
    rows = read_prompts(args.prompts)
    order = list(range(len(rows)))
    random.Random(args.seed).shuffle(order)
    if args.limit is not None:
        order = order[: args.limit]
    coin = random.Random(args.seed + 1)
    items = []
    for index in order:
        ids, truncated = prompt_ids(target.tokenizer, rows[index]["prompt"], args.max_prompt_tokens)
        items.append(_Item(index, rows[index]["id"], ids, coin.random() < args.sampled_fraction, truncated))
    plan = {
        "format": DATA_FORMAT,
        "model": target.name,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
        "prompts": str(Path(args.prompts).resolve()),
        "limit": args.limit,
        "seed": args.seed,
        "shard_size": args.shard_size,
        "max_new_tokens": args.max_new_tokens,
        "max_prompt_tokens": args.max_prompt_tokens,
        "sampled_fraction": args.sampled_fraction,
        "temperature": args.temperature,
        "samples": len(items),
        "shards": math.ceil(len(items) / args.shard_size),
    }
    return items, plan


@torch.inference_mode()
def _answer_batch(target, items: list[_Item], args, generator: torch.Generator) -> list[dict]:
    """Answers for a batch of prompts in one left-padded decoding loop, greedy and sampled rows side by side.

    The features are the final norm's outputs that the loop computes anyway: prompt positions from the
    prefill, then one per answer token read back. A static batch, so short prompts wait for long ones,
    but each step multiplies all rows at once, which is what makes a 2-core CPU fast here.
    """
    model = target.model
    device = target.device
    eos = target.eos_ids()
    width = max(len(item.ids) for item in items)
    ids = torch.zeros((len(items), width), dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, width - len(item.ids):] = torch.tensor(item.ids)
        attention[row, width - len(item.ids):] = 1
    ids, attention = ids.to(device), attention.to(device)
    sampled = torch.tensor([item.sampled for item in items], device=device)
    eos_ids = torch.tensor(sorted(eos) if eos else [-1], device=device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    hidden = model.model(input_ids=ids, attention_mask=attention, position_ids=positions, cache=cache,
                         use_cache=True).last_hidden_state
    features = [hidden.to(torch.float16).cpu()]
    answers: list[torch.Tensor] = []
    done = torch.zeros(len(items), dtype=torch.bool, device=device)
    position = positions[:, -1:]
    for step in range(args.max_new_tokens):
        logits = model.lm_head(hidden[:, -1]).float()
        token = logits.argmax(-1)
        if bool(sampled.any()):
            drawn = torch.multinomial(torch.softmax(logits / args.temperature, -1), 1, generator=generator)[:, 0]
            token = torch.where(sampled, drawn, token)
        answers.append(token.cpu())
        done |= torch.isin(token, eos_ids)
        if bool(done.all()) or step == args.max_new_tokens - 1:
            break
        attention = torch.cat((attention, torch.ones_like(attention[:, :1])), dim=1)
        position = position + 1
        hidden = model.model(input_ids=token[:, None], attention_mask=attention, position_ids=position, cache=cache,
                             use_cache=True).last_hidden_state
        features.append(hidden.to(torch.float16).cpu())
    answers_t, features_t = torch.stack(answers, dim=1), torch.cat(features, dim=1)
    samples = []
    for row, item in enumerate(items):
        answer = answers_t[row].tolist()
        for position_in_answer, token in enumerate(answer):
            if token in eos:
                answer = answer[: position_in_answer + 1]
                break
        full = item.ids + answer
        start = width - len(item.ids)
        samples.append({
            "id": item.id, "index": item.index, "ids": torch.tensor(full, dtype=torch.int32),
            "prompt_len": len(item.ids), "sampled": item.sampled, "truncated": item.truncated,
            "finished": bool(answer) and answer[-1] in eos,
            "features": features_t[row, start: start + len(full) - 1].clone(),
        })
    return samples


def _shard_path(out: Path, number: int) -> Path:
    return out / f"shard_{number:05d}.pt"


def cmd_data(args) -> int:
    from .models import load_target

    if args.limit is not None and args.limit < 1:
        raise TrainError("--limit must be at least 1.")
    if args.max_new_tokens < 1:
        raise TrainError("--max-new-tokens must be at least 1.")
    if args.batch_size < 1 or args.shard_size < 1:
        raise TrainError("--batch-size and --shard-size must be at least 1.")
    if not 0.0 <= args.sampled_fraction <= 1.0:
        raise TrainError("--sampled-fraction must lie between 0 and 1.")
    if args.temperature <= 0:
        raise TrainError("--temperature must be positive (greedy answers come from the other fraction).")
    if args.max_prompt_tokens < 8:
        raise TrainError("--max-prompt-tokens must be at least 8.")
    read_prompts(args.prompts)  # fail on a bad file before loading the model
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.time()
    target = load_target(args.model, device=args.device)
    items, plan = _plan(args, target)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        changed = [k for k in _PLAN_KEYS if old.get(k) != plan.get(k)]
        if changed:
            raise TrainError(
                f"{out} holds data made with different settings ({', '.join(changed)}); "
                "rerun with the same arguments to resume, or pick another --out."
            )
        plan["wall_s"] = old.get("wall_s", 0.0)
    else:
        plan["wall_s"] = 0.0
    meta_path.write_text(json.dumps(plan, indent=2))
    truncated = sum(item.truncated for item in items)
    print(f"{len(items)} prompts ({sum(i.sampled for i in items)} sampled at T={args.temperature}, "
          f"{truncated} cut to {args.max_prompt_tokens} tokens) -> {plan['shards']} shards in {out}", flush=True)

    todo = [n for n in range(plan["shards"]) if not _shard_path(out, n).exists()]
    if not todo:
        print("All shards are already there; nothing to do.")
        return 0
    bar = tqdm(total=len(items), desc="answers", unit="prompt", initial=len(items) - sum(
        len(items[n * args.shard_size:(n + 1) * args.shard_size]) for n in todo), dynamic_ncols=True)
    new_tokens = 0
    try:
        for number in todo:
            shard_started = time.time()
            chunk = sorted(items[number * args.shard_size:(number + 1) * args.shard_size], key=lambda i: len(i.ids))
            generator = torch.Generator(device=target.device).manual_seed(args.seed * 100003 + number)
            samples = []
            for start in range(0, len(chunk), args.batch_size):
                batch = chunk[start:start + args.batch_size]
                made = _answer_batch(target, batch, args, generator)
                samples.extend(made)
                new_tokens += sum(len(s["ids"]) - s["prompt_len"] for s in made)
                bar.update(len(batch))
                bar.set_postfix(new_tokens=new_tokens, tok_s=f"{new_tokens / (time.time() - started):.0f}")
            samples.sort(key=lambda s: s["index"])
            path = _shard_path(out, number)
            tmp = path.with_suffix(".tmp")
            torch.save({"format": DATA_FORMAT, "samples": samples, "wall_s": time.time() - shard_started}, tmp)
            tmp.replace(path)
    finally:
        bar.close()
        plan["wall_s"] += time.time() - started
        meta_path.write_text(json.dumps(plan, indent=2))
    print(f"Done: {new_tokens} new answer tokens in {time.time() - started:.0f} s "
          f"(all runs of this directory: {plan['wall_s']:.0f} s).", flush=True)
    return 0


def load_samples(directory: str | Path) -> tuple[list[dict], dict]:
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        raise TrainError(f"No training data in {directory}: meta.json is missing (make it with `python -m ddd.train data`).")
    meta = json.loads(meta_path.read_text())
    paths = sorted(directory.glob(SHARD_GLOB))
    if not paths:
        raise TrainError(f"No shard files in {directory}; run `python -m ddd.train data` first.")
    samples = []
    for path in paths:
        samples.extend(torch.load(path, map_location="cpu", weights_only=False)["samples"])
    return samples, meta


# ----------------------------------------------------------------------------------------------
# fit
# ----------------------------------------------------------------------------------------------

COVERAGE_SIZES = (1024, 2048, 4096, 8192, 16384, 32768)


def split_samples(samples: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    """A seeded held-out split by sample (at least one held-out sample when there are two or more)."""
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    count = 0 if len(samples) < 2 or heldout <= 0 else max(1, round(heldout * len(samples)))
    held = set(order[:count])
    return [s for i, s in enumerate(samples) if i not in held], [s for i, s in enumerate(samples) if i in held]


def _answer_tokens(samples: list[dict]) -> torch.Tensor:
    parts = [s["ids"][s["prompt_len"]:].long() for s in samples]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def token_ranking(samples: list[dict], vocab_size: int, extra: torch.Tensor | None = None,
                  extra_weight: float = 0.1) -> torch.Tensor:
    """Target ids, most useful first: answer-token counts + extra_weight x `extra` counts (e.g. the
    tokens of the training prompts, which tell which rarer words the domain uses); ties go to lower ids
    (a byte-pair vocabulary lists its more frequent merges first)."""
    score = torch.bincount(_answer_tokens(samples), minlength=vocab_size)[:vocab_size].double()
    if extra is not None and extra_weight > 0:
        score = score + extra_weight * extra[:vocab_size].double()
    return torch.sort(score, descending=True, stable=True).indices


def prompt_token_counts(path: str | Path, tokenizer, vocab_size: int, exclude: set[str]) -> torch.Tensor | None:
    """Token counts over the prompts of a prompt file (rows whose id is in `exclude` left out)."""
    try:
        rows = read_prompts(path)
    except TrainError:
        return None
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for row in rows:
        if row["id"] in exclude:
            continue
        ids = torch.tensor(tokenizer.encode(row["prompt"], add_special_tokens=False), dtype=torch.long)
        counts += torch.bincount(ids[ids < vocab_size], minlength=vocab_size).double()
    return counts


def coverage(ranking: torch.Tensor, samples: list[dict], sizes=COVERAGE_SIZES) -> dict[int, float]:
    """Share of the answer tokens of `samples` that fall inside the top-N of `ranking`, for each N."""
    tokens = _answer_tokens(samples)
    if tokens.numel() == 0:
        return {n: float("nan") for n in sizes}
    rank = torch.empty_like(ranking)
    rank[ranking] = torch.arange(ranking.numel())
    token_rank = rank[tokens]
    return {n: float((token_rank < n).double().mean()) for n in sizes}


def share_in(vocab: torch.Tensor | None, samples: list[dict]) -> float:
    """Share of the answer tokens of `samples` that belong to `vocab` (None: the full vocabulary)."""
    tokens = _answer_tokens(samples)
    if tokens.numel() == 0:
        return float("nan")
    if vocab is None:
        return 1.0
    return float(torch.isin(tokens, vocab).double().mean())


def choose_draft_vocab(ranking: torch.Tensor, size: int, eos: set[int]) -> torch.Tensor:
    """The `size` top-ranked ids, always including the end-of-sequence ids; ascending."""
    keep = list(dict.fromkeys([int(i) for i in sorted(eos)] + ranking[:size].tolist()))[:size]
    for e in eos:  # eos ids first, so they survive the cut
        assert e in keep
    return torch.tensor(sorted(keep), dtype=torch.long)


def shared_prefix(samples: list[dict]) -> int:
    """Length of the token prefix every sample's prompt starts with (a chat template's fixed system turn)."""
    first = samples[0]["ids"][: samples[0]["prompt_len"]]
    length = first.numel()
    for sample in samples[1:]:
        other = sample["ids"][: min(length, sample["prompt_len"])]
        same = (other == first[: other.numel()]).long()
        length = int(same.cumprod(0).sum())
    return length


def make_batches(samples: list[dict], batch_tokens: int, rng: random.Random) -> list[list[dict]]:
    """Length-grouped batches of about `batch_tokens` padded tokens, in random order."""
    order = samples[:]
    rng.shuffle(order)
    pool = max(1, 16 * batch_tokens // max(1, int(sum(len(s["ids"]) for s in samples) / max(1, len(samples)))))
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda s: len(s["ids"]))
        batch: list[dict] = []
        for sample in chunk:
            width = max([len(sample["ids"])] + [len(s["ids"]) for s in batch])
            if batch and width * (len(batch) + 1) > batch_tokens:
                batches.append(batch)
                batch = []
            batch.append(sample)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(batch: list[dict], max_len: int, prefix: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded ids (B, L), features f_0..f_{L-2} (B, L-1, H), and the loss mask (B, L-2).

    mask[b, t] is on where the head output h_t has both a target feature f_{t+1} and a next token
    x_{t+2}, and x_{t+2} belongs to the answer (t >= prompt_len - 2). With `prefix`, every token after
    the first `prefix` ones counts, question tokens included: the features there are still the target's
    own, so they teach the same mapping (the shared prefix, the chat template's system turn, teaches nothing).
    """
    lengths = [min(len(s["ids"]), max_len) for s in batch]
    width = max(lengths)
    hidden = batch[0]["features"].shape[-1]
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    feats = torch.zeros((len(batch), width - 1, hidden), dtype=torch.float16)
    mask = torch.zeros((len(batch), max(width - 2, 0)), dtype=torch.bool)
    for row, (sample, n) in enumerate(zip(batch, lengths)):
        ids[row, :n] = sample["ids"][:n].long()
        feats[row, : n - 1] = sample["features"][: n - 1]
        first = max(0, (sample["prompt_len"] if prefix is None else prefix) - 2)
        if n - 2 > first:
            mask[row, first: n - 2] = True
    return {"ids": ids, "features": feats, "mask": mask}


class HeadTrainer:
    """The EAGLE loss on batches from `collate`, with the target's embeddings and LM head frozen.

    level2 > 0 adds the same loss one level deeper at that share of positions: there the head reads its own
    guess of the feature (its level-one output one position back) while attending to the real-feature context
    before it, exactly what its second call inside a draft tree sees.
    """

    def __init__(self, target, head, ce_weight: float = 0.1, noise: float = 0.2, soft: bool = False,
                 level2: float = 0.0):
        self.target = target
        self.head = head
        self.ce_weight = ce_weight
        # soft: cross-entropy against the target's whole next-token distribution (read from the stored next
        # feature) rather than its one sampled token; the tree needs the draft's top-k order, not just top-1
        self.soft = soft
        self.noise = noise
        self.level2 = level2
        self.embed = target.model.model.embed_tokens
        weight = target.model.lm_head.weight.detach()
        rows = head.draft_to_target()
        self.rows = rows
        self.lm_weight = weight if rows is None else weight[rows.to(weight.device)].contiguous()
        t2d = torch.full((target.vocab_size,), -1, dtype=torch.long, device=weight.device)
        if rows is None:
            t2d = torch.arange(target.vocab_size, device=weight.device)
        else:
            t2d[rows.to(weight.device)] = torch.arange(rows.numel(), device=weight.device)
        self.t2d = t2d

    def forward(self, batch: dict[str, torch.Tensor], noise: bool, cache: DynamicCache | None = None):
        """Level one: (predicted h_t, true f_{t+1}, next token x_{t+2}, embed(x_{t+1})) for every position t."""
        device = self.lm_weight.device
        ids = batch["ids"].to(device)
        feats = batch["features"].to(device=device, dtype=self.lm_weight.dtype)
        width = ids.shape[1] - 2
        with torch.no_grad():
            embeds = self.embed(ids[:, 1:1 + width]).to(self.lm_weight.dtype)
        inputs = feats[:, :width]
        if noise and self.noise > 0:
            inputs = inputs + (torch.rand_like(inputs) - 0.5) * self.noise
        positions = torch.arange(width, device=device).unsqueeze(0).expand(ids.shape[0], -1)
        predicted = self.head(embeds=embeds, features=inputs, position_ids=positions, cache=cache)
        return predicted, feats[:, 1:1 + width], ids[:, 2:2 + width], embeds

    def deeper(self, embeds: torch.Tensor, guesses: torch.Tensor, columns: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Level two at positions `columns` (each >= 1): t reads (embed(x_{t+1}), guesses[t - 1]) and attends to the
        level-one positions before t, held in `cache`, and to itself."""
        width, count = embeds.shape[1], columns.numel()
        device = embeds.device
        mask = torch.zeros((count, width + count), dtype=torch.bool, device=device)
        mask[:, :width] = torch.arange(width, device=device)[None] < columns[:, None]
        mask[:, width:] = torch.eye(count, dtype=torch.bool, device=device)
        positions = columns[None].expand(embeds.shape[0], -1)
        return self.head(embeds=embeds[:, columns], features=guesses[:, columns - 1], position_ids=positions,
                         attention_mask=mask[None, None], cache=cache)

    def soft_ce(self, logits: torch.Tensor, true_next: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the draft logits against the target's distribution, read from the true next feature
        through the same (draft-vocabulary) LM head."""
        with torch.no_grad():
            wanted = torch.softmax(true_next.float() @ self.lm_weight.T.float(), dim=-1)
        return -(wanted * torch.log_softmax(logits.float(), dim=-1)).sum(-1).mean()

    def terms(self, out: torch.Tensor, want: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Feature regression, cross-entropy and top-1 accuracy of predicted features `out` (N, H)."""
        reg = F.smooth_l1_loss(out, want)
        logits = out @ self.lm_weight.T
        if self.soft:
            ce = self.soft_ce(logits, want)
        else:
            labels = self.t2d[tokens]
            ce = F.cross_entropy(logits, labels, ignore_index=-1) if bool((labels >= 0).any()) else logits.sum() * 0
        with torch.no_grad():
            top = logits.argmax(-1)
            top = top if self.rows is None else self.rows.to(top.device)[top]
            acc = float((top == tokens).float().mean())
        return reg, ce, acc

    def _level2_columns(self, width: int, share: float) -> torch.Tensor:
        columns = torch.arange(1, width, device=self.lm_weight.device)
        if share >= 1.0:
            return columns
        keep = max(1, round(share * columns.numel()))
        return columns[torch.randperm(columns.numel(), device=columns.device)[:keep].sort().values]

    def loss(self, batch: dict[str, torch.Tensor], noise: bool = True,
             level2: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        level2 = self.level2 if level2 is None else level2
        mask = batch["mask"].to(self.lm_weight.device)
        if mask.shape[1] == 0 or not bool(mask.any()):
            zero = sum(p.sum() * 0 for p in self.head.parameters())
            return zero, {"reg": 0.0, "ce": 0.0, "acc": 0.0, "tokens": 0}
        cache = DynamicCache(config=self.head.config) if level2 > 0 and mask.shape[1] > 1 else None
        predicted, true_next, next_tokens, embeds = self.forward(batch, noise, cache)
        reg, ce, acc = self.terms(predicted[mask], true_next[mask], next_tokens[mask])
        total = reg + self.ce_weight * ce
        parts = {"reg": float(reg.detach()), "ce": float(ce.detach()), "acc": acc, "tokens": int(mask.sum())}
        if cache is not None:
            columns = self._level2_columns(mask.shape[1], level2)
            deep_mask = mask[:, columns]
            if bool(deep_mask.any()):
                deep = self.deeper(embeds, predicted.detach(), columns, cache)
                reg2, ce2, acc2 = self.terms(deep[deep_mask], true_next[:, columns][deep_mask], next_tokens[:, columns][deep_mask])
                total = total + reg2 + self.ce_weight * ce2
                parts |= {"acc2": acc2, "tokens2": int(deep_mask.sum())}
        return total, parts

    @torch.no_grad()
    def evaluate(self, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """Held-out loss and top-1 accuracy (true features, no noise), and top-1 accuracy one level deeper
        (the head reading its own guess of the feature, as in a draft tree's second call)."""
        was_training = self.head.training
        self.head.eval()
        sums = {"loss": 0.0, "reg": 0.0, "ce": 0.0, "acc": 0.0, "acc_self": 0.0}
        count = count2 = 0
        for batch in batches:
            _, parts = self.loss(batch, noise=False, level2=1.0)
            n = parts["tokens"]
            if n == 0:
                continue
            sums["loss"] += (parts["reg"] + self.ce_weight * parts["ce"]) * n
            for key in ("reg", "ce", "acc"):
                sums[key] += parts[key] * n
            count += n
            if "tokens2" in parts:
                sums["acc_self"] += parts["acc2"] * parts["tokens2"]
                count2 += parts["tokens2"]
        self.head.train(was_training)
        out = {k: v / max(1, count) for k, v in sums.items() if k != "acc_self"}
        return out | {"acc_self": sums["acc_self"] / max(1, count2), "tokens": count}


def _lr_factor(step: int, warmup: int, total: int, floor: float = 0.05) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def cmd_fit(args) -> int:
    from .head import new_head, save_head
    from .models import load_target

    for name in ("steps", "batch_tokens", "eval_every", "ckpt_every"):
        if getattr(args, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be at least 1.")
    if args.lr <= 0:
        raise TrainError("--lr must be positive.")
    if not 0 <= args.heldout < 0.5:
        raise TrainError("--heldout must lie in [0, 0.5).")
    if not 0 <= args.level2 <= 1:
        raise TrainError("--level2 must lie in [0, 1].")
    if args.draft_vocab < 0:
        raise TrainError("--draft-vocab must be 0 (the full vocabulary) or a positive number of tokens.")
    if args.threads:
        torch.set_num_threads(args.threads)
    samples, meta = load_samples(args.data)
    ckpt_path = Path(args.ckpt_dir) / "checkpoint.pt"
    state = None
    if args.resume:
        if not ckpt_path.exists():
            raise TrainError(f"--resume: no checkpoint at {ckpt_path}.")
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    target = load_target(args.model or meta["model"], device=args.device)
    if target.hidden_size != meta["hidden_size"]:
        raise TrainError(f"The data in {args.data} has features of size {meta['hidden_size']}, "
                         f"but {target.name} has hidden size {target.hidden_size}.")
    train, held = split_samples(samples, args.heldout, args.seed)
    tokens = _answer_tokens(train).numel()
    print(f"{len(samples)} samples: {len(train)} for training ({tokens} answer tokens), {len(held)} held out.", flush=True)

    extra = None
    if args.vocab_prompt_weight > 0:
        extra = prompt_token_counts(meta.get("prompts", ""), target.tokenizer, target.vocab_size, {s["id"] for s in held})
    ranking = token_ranking(train, target.vocab_size, extra, args.vocab_prompt_weight)
    cover_train, cover_held = coverage(ranking, train), coverage(ranking, held)
    print("draft vocabulary coverage of answer tokens (top N by training-answer counts + weighted prompt counts):", flush=True)
    for n in COVERAGE_SIZES:
        print(f"  N={n:6d}  train {cover_train[n]:.4f}  held-out {cover_held[n]:.4f}", flush=True)
    if state is not None:
        vocab = state["draft_vocab"]
    elif args.draft_vocab and args.draft_vocab < target.vocab_size:
        vocab = choose_draft_vocab(ranking, args.draft_vocab, target.eos_ids())
    else:
        vocab = None
    size = target.vocab_size if vocab is None else vocab.numel()
    covered = share_in(vocab, held)
    print(f"draft vocabulary: {size} tokens, held-out answer coverage {covered:.4f}", flush=True)

    head = new_head(target, draft_vocab=vocab, seed=args.seed)
    head.train().requires_grad_(True)
    trainer = HeadTrainer(target, head, ce_weight=args.ce_weight, noise=args.noise, soft=args.ce_target == "target",
                          level2=args.level2)
    prefix = shared_prefix(samples) if args.positions == "all" else None
    optimizer = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    warmup = args.warmup if args.warmup is not None else max(1, args.steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, warmup, args.steps))
    rng = random.Random(args.seed)
    step, epoch, history, elapsed = 0, 0, [], 0.0
    if state is not None:
        head.load_state_dict(state["head"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, epoch, history, elapsed = state["step"], state["epoch"], state["history"], state["elapsed"]
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        print(f"resumed from {ckpt_path} at step {step}", flush=True)
    held_batches = [collate(b, args.max_len) for b in make_batches(held, args.batch_tokens, random.Random(0))]
    summary = {
        "data": str(args.data), "samples_train": len(train), "samples_heldout": len(held),
        "answer_tokens_train": tokens, "draft_vocab": size,
        "draft_vocab_coverage_heldout": covered, "vocab_prompt_weight": args.vocab_prompt_weight,
        "coverage_heldout": {str(n): round(v, 4) for n, v in cover_held.items()},
        "ce_weight": args.ce_weight, "ce_target": args.ce_target, "noise": args.noise, "lr": args.lr, "batch_tokens": args.batch_tokens,
        "positions": args.positions, "level2": args.level2,
    }

    def export(final: bool) -> None:
        extra = {"training": summary | {"steps": step, "final": final, "history": history[-1:] if history else []}}
        save_head(head, args.out, extra=extra)

    def checkpoint() -> None:
        _save_checkpoint(ckpt_path, {
            "head": head.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "step": step, "epoch": epoch, "history": history, "elapsed": elapsed, "rng": rng.getstate(),
            "torch_rng": torch.get_rng_state(), "draft_vocab": vocab, "batch_in_epoch": done_in_epoch,
            "args": {k: v for k, v in vars(args).items() if k != "func"},
        })
        export(final=False)

    started = time.time() - elapsed
    bar = tqdm(total=args.steps, initial=step, desc="fit", unit="step", dynamic_ncols=True)
    window = {"loss": 0.0, "reg": 0.0, "ce": 0.0, "acc": 0.0, "acc2": 0.0, "n": 0}
    batches: list[list[dict]] = []
    # Rebuild the current epoch's order, then skip what earlier runs already did.
    done_in_epoch = 0
    if state is not None:
        batches = make_batches(train, args.batch_tokens, random.Random(args.seed * 7919 + epoch))
        done_in_epoch = state.get("batch_in_epoch", 0)
    while step < args.steps:
        if done_in_epoch >= len(batches):
            epoch += 1 if batches else 0
            batches = make_batches(train, args.batch_tokens, random.Random(args.seed * 7919 + epoch))
            done_in_epoch = 0
        batch = collate(batches[done_in_epoch], args.max_len, prefix)
        done_in_epoch += 1
        loss, parts = trainer.loss(batch, noise=True)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), args.clip)
        optimizer.step()
        scheduler.step()
        step += 1
        loss_value = float(loss.detach())
        for key in ("reg", "ce", "acc", "acc2"):
            window[key] += parts.get(key, 0.0)
        window["loss"] += loss_value
        window["n"] += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.3f}", acc=f"{parts['acc']:.3f}", epoch=epoch)
        if step % args.eval_every == 0 or step == args.steps:
            n = max(1, window["n"])
            record = {"step": step, "epoch": epoch, "lr": scheduler.get_last_lr()[0],
                      "train_loss": window["loss"] / n, "train_reg": window["reg"] / n,
                      "train_ce": window["ce"] / n, "train_acc": window["acc"] / n,
                      **({"train_acc_level2": window["acc2"] / n} if args.level2 > 0 else {}),
                      "elapsed_s": round(time.time() - started, 1)}
            window = {"loss": 0.0, "reg": 0.0, "ce": 0.0, "acc": 0.0, "acc2": 0.0, "n": 0}
            if held_batches:
                ev = trainer.evaluate(held_batches)
                record |= {"heldout_loss": ev["loss"], "heldout_reg": ev["reg"], "heldout_ce": ev["ce"],
                           "heldout_acc": ev["acc"], "heldout_acc_level2": ev["acc_self"]}
            history.append(record)
            tqdm.write(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        if step % args.ckpt_every == 0 or step == args.steps:
            elapsed = time.time() - started
            checkpoint()
    bar.close()
    elapsed = time.time() - started
    summary["wall_s"] = round(elapsed, 1)
    export(final=True)
    print(f"Saved the head to {args.out} after {step} steps ({elapsed:.0f} s of training).", flush=True)
    if history:
        print(json.dumps(history[-1]), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (TrainError, distill.DistillError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddd.train", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    distill.add_parser(sub)

    data = sub.add_parser("data", help="generate the target's own answers and store its features")
    data.add_argument("--prompts", default=DEFAULT_PROMPTS, help="JSONL with `prompt` (or MT-bench `turns`)")
    data.add_argument("--out", required=True, help="directory for meta.json and shard_*.pt")
    data.add_argument("--model", default=None, help="target model: default SmolLM2-135M-Instruct, or a local dir / hub id")
    data.add_argument("--device", default="cpu")
    data.add_argument("--limit", type=int, default=None, help="use this many prompts (a seeded shuffle of the file)")
    data.add_argument("--max-new-tokens", type=int, default=200)
    data.add_argument("--max-prompt-tokens", type=int, default=320, help="longer questions are cut to fit")
    data.add_argument("--batch-size", type=int, default=64, help="prompts decoded together")
    data.add_argument("--shard-size", type=int, default=64, help="prompts per shard file (the unit of resuming)")
    data.add_argument("--sampled-fraction", type=float, default=0.3, help="share of answers sampled instead of greedy")
    data.add_argument("--temperature", type=float, default=0.7, help="temperature of the sampled answers")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    data.set_defaults(func=cmd_data)

    fit = sub.add_parser("fit", help="train a draft head on data made by `data`")
    fit.add_argument("--data", required=True, help="directory written by `python -m ddd.train data`")
    fit.add_argument("--out", required=True, help="where the head goes (config.json + model.safetensors)")
    fit.add_argument("--model", default=None, help="target model (default: the one the data was made with)")
    fit.add_argument("--device", default="cpu")
    fit.add_argument("--steps", type=int, default=600)
    fit.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per batch")
    fit.add_argument("--lr", type=float, default=1e-3)
    fit.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 5%% of --steps)")
    fit.add_argument("--weight-decay", type=float, default=0.0)
    fit.add_argument("--clip", type=float, default=0.5, help="gradient-norm clip")
    fit.add_argument("--ce-weight", type=float, default=0.1, help="weight of the next-token cross-entropy")
    fit.add_argument("--ce-target", choices=("token", "target"), default="token",
                     help="cross-entropy against the next token (EAGLE) or the target's whole next-token distribution")
    fit.add_argument("--noise", type=float, default=0.2, help="width of the uniform noise on input features")
    fit.add_argument("--positions", choices=("answer", "all"), default="answer",
                     help="learn from answer tokens only, or from every token after the prompts' shared prefix")
    fit.add_argument("--level2", type=float, default=0.0,
                     help="share of positions that also learn one level deeper, from the head's own features (0: off)")
    fit.add_argument("--draft-vocab", type=int, default=8192,
                     help="keep the N most frequent answer tokens as the draft vocabulary (0: the full vocabulary)")
    fit.add_argument("--vocab-prompt-weight", type=float, default=0.1,
                     help="weight of the training prompts' token counts when ranking the draft vocabulary (0: answers only)")
    fit.add_argument("--heldout", type=float, default=0.05, help="share of samples held out for evaluation")
    fit.add_argument("--max-len", type=int, default=1024, help="longer samples are cut")
    fit.add_argument("--eval-every", type=int, default=50)
    fit.add_argument("--ckpt-every", type=int, default=50)
    fit.add_argument("--ckpt-dir", default="runs/head-ckpt", help="checkpoints for --resume")
    fit.add_argument("--resume", action="store_true", help="continue from the checkpoint in --ckpt-dir")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    fit.set_defaults(func=cmd_fit)
    return parser


if __name__ == "__main__":
    sys.exit(main())
