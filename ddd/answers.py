"""The target's own answers as training data (`python -m ddd.train data`).

The target answers each prompt (chat template, one user turn; greedy, plus a sampled fraction at
temperature 0.7); per sample the token ids (prompt + answer), the prompt length and the target's features
(last hidden state after the final norm, float16) go into shard files. Finished shards are skipped when the
command runs again.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from .training import DEFAULT_CORPUS, DEFAULT_PROMPTS, TrainError, add_machine_arguments, prompt_ids, read_prompt_files

SHARD_GLOB = "shard_*.pt"
DATA_FORMAT = 2  # 2: greedy and sampled rows share one decoding loop (1: separate generate() calls)
# Fields of the data run that must agree with an existing output directory for it to be resumed.
_PLAN_KEYS = ("format", "model", "prompts", "limit", "seed", "shard_size", "max_new_tokens", "max_prompt_tokens",
              "sampled_fraction", "temperature", "skip")


@dataclass
class _Item:
    index: int
    id: str
    ids: list[int]
    sampled: bool
    truncated: bool


def _plan(args, target) -> tuple[list[_Item], dict]:
    rows = read_prompt_files(args.prompts)
    order = list(range(len(rows)))
    random.Random(args.seed).shuffle(order)
    answered = {prompt for directory in args.skip for _, prompt in answered_samples(directory)}
    order = [index for index in order if rows[index]["prompt"] not in answered]
    if not order:
        raise TrainError("Every prompt is already answered in the --skip directories.")
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
        "prompts": [str(Path(p).resolve()) for p in args.prompts],
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
    if args.skip:  # only when given, so that directories made before --skip existed still resume
        plan["skip"] = [str(Path(d).resolve()) for d in args.skip]
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


def _check_data_args(args) -> None:
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
    read_prompt_files(args.prompts)  # fail on a bad file before loading the model
    for directory in args.skip:
        if not (Path(directory) / "meta.json").is_file():
            raise TrainError(f"--skip {directory} is not a directory written by `python -m ddd.train data`.")


def _resume_plan(plan: dict, meta_path: Path) -> None:
    """Keep the time already spent on this directory; refuse one made with other settings."""
    plan["wall_s"] = 0.0
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        changed = [k for k in _PLAN_KEYS if old.get(k) != plan.get(k)]
        if changed:
            raise TrainError(
                f"{meta_path.parent} holds data made with different settings ({', '.join(changed)}); "
                "rerun with the same arguments to resume, or pick another --out."
            )
        plan["wall_s"] = old.get("wall_s", 0.0)
    meta_path.write_text(json.dumps(plan, indent=2))


def _write_shard(target, items: list, number: int, args, out: Path, bar: tqdm, made: int, since: float) -> int:
    """Answer one shard's prompts (shortest first, so batches pad little) and save it; `made` (new tokens so
    far, reported on `bar` as a rate since `since`) plus this shard's."""
    started = time.time()
    chunk = sorted(items[number * args.shard_size:(number + 1) * args.shard_size], key=lambda i: len(i.ids))
    generator = torch.Generator(device=target.device).manual_seed(args.seed * 100003 + number)
    samples = []
    for start in range(0, len(chunk), args.batch_size):
        batch = chunk[start:start + args.batch_size]
        answers = _answer_batch(target, batch, args, generator)
        samples.extend(answers)
        made += sum(len(s["ids"]) - s["prompt_len"] for s in answers)
        bar.update(len(batch))
        bar.set_postfix(new_tokens=made, tok_s=f"{made / (time.time() - since):.0f}")
    samples.sort(key=lambda s: s["index"])
    path = _shard_path(out, number)
    tmp = path.with_suffix(".tmp")
    torch.save({"format": DATA_FORMAT, "samples": samples, "wall_s": time.time() - started}, tmp)
    tmp.replace(path)
    return made


def cmd_data(args) -> int:
    from .models import load_target

    _check_data_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.time()
    target = load_target(args.model, device=args.device)
    items, plan = _plan(args, target)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    _resume_plan(plan, meta_path)
    truncated = sum(item.truncated for item in items)
    print(f"{len(items)} prompts ({sum(i.sampled for i in items)} sampled at T={args.temperature}, "
          f"{truncated} cut to {args.max_prompt_tokens} tokens) -> {plan['shards']} shards in {out}", flush=True)
    todo = [n for n in range(plan["shards"]) if not _shard_path(out, n).exists()]
    if not todo:
        print("All shards are already there; nothing to do.")
        return 0
    bar = tqdm(total=len(items), desc="answers", unit="prompt", initial=len(items) - sum(
        len(items[n * args.shard_size:(n + 1) * args.shard_size]) for n in todo), dynamic_ncols=True)
    made = 0
    try:
        for number in todo:
            made = _write_shard(target, items, number, args, out, bar, made, started)
    finally:
        bar.close()
        plan["wall_s"] += time.time() - started
        meta_path.write_text(json.dumps(plan, indent=2))
    print(f"Done: {made} new answer tokens in {time.time() - started:.0f} s "
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


def answered_samples(directory: str | Path) -> list[tuple[dict, str]]:
    """Each stored sample with its prompt's text, checked against the prompt files `data` read."""
    samples, meta = load_samples(directory)
    rows = read_prompt_files(meta["prompts"])
    pairs = []
    for sample in samples:
        index = sample["index"]
        if not (0 <= index < len(rows) and rows[index]["id"] == sample["id"]):
            raise TrainError(f"{directory}: sample {sample['id']} is not row {index} of its prompt files any "
                             "more; they changed since `data` ran.")
        pairs.append((sample, rows[index]["prompt"]))
    return pairs


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="generate the target's own answers and store its features")
    p.add_argument("--prompts", nargs="+", default=[DEFAULT_PROMPTS, *DEFAULT_CORPUS],
                   help="JSONL files with `prompt` (or MT-bench `turns`); default: the training prompts and the "
                        "corpus's prompts, which cover maths, summarising, extraction and translation")
    p.add_argument("--out", required=True, help="directory for meta.json and shard_*.pt")
    p.add_argument("--limit", type=int, default=None, help="use this many prompts (a seeded shuffle of the file)")
    p.add_argument("--skip", nargs="+", default=[], metavar="DIR",
                   help="leave out prompts already answered in these data directories")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--max-prompt-tokens", type=int, default=320, help="longer questions are cut to fit")
    p.add_argument("--batch-size", type=int, default=64, help="prompts decoded together")
    p.add_argument("--shard-size", type=int, default=64, help="prompts per shard file (the unit of resuming)")
    p.add_argument("--sampled-fraction", type=float, default=0.3, help="share of answers sampled instead of greedy")
    p.add_argument("--temperature", type=float, default=0.7, help="temperature of the sampled answers")
    add_machine_arguments(p)
    p.set_defaults(func=cmd_data)
