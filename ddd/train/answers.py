"""The target's own answers as training data (`python -m ddd.train data`).

The target answers each prompt (chat template, one user turn; greedy, plus a sampled fraction at
temperature 0.7); per sample the token ids (prompt + answer), the prompt length and the target's features
(last hidden state after the final norm, float16) go into shard files. Finished shards are skipped when the
command runs again. With `--bf16` the target decodes in bfloat16 and no features are stored: ids alone are
what stage two's distillation reads (it computes labels and features itself), and on a CPU with bfloat16
matrix units decoding runs several times faster (docs/training.md).
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ddd.models import load_target
from .common import DEFAULT_CORPUS, DEFAULT_PROMPTS, TrainError, add_machine_arguments, prompt_ids, read_prompt_files
from .decoding import Item, decode_answers

SHARD_GLOB = "shard_*.pt"
DATA_FORMAT = 2  # 2: greedy and sampled rows share one decoding loop (1: separate generate() calls)
# Fields of the data run that must agree with an existing output directory for it to be resumed.
_PLAN_KEYS = ("format", "model", "prompts", "limit", "seed", "shard_size", "max_new_tokens", "max_prompt_tokens",
              "sampled_fraction", "temperature", "skip", "skip_greedy", "bf16")


# meta.json keeps the files and directories a run read relative to itself, so that a data directory and the
# files it names can move together (another checkout, another machine).
_PATH_KEYS = ("prompts", "skip", "skip_greedy")


def _relative_to(paths: list[str], directory: Path) -> list[str]:
    return [os.path.relpath(Path(p).resolve(), directory.resolve()) for p in paths]


def _with_resolved_paths(meta: dict, directory: Path) -> dict:
    """A meta.json's fields with its paths absolute again; older directories hold absolute paths already, and
    one-file data names its file as a plain string."""
    def resolved(paths: list[str] | str) -> list[str] | str:
        if isinstance(paths, str):
            return str((directory / paths).resolve())
        return [str((directory / p).resolve()) for p in paths]

    return meta | {key: resolved(meta[key]) for key in _PATH_KEYS if key in meta}


def _plan(args, target, out: Path) -> tuple[list[Item], dict]:
    rows = read_prompt_files(args.prompts)
    order = list(range(len(rows)))
    random.Random(args.seed).shuffle(order)
    answered = {prompt for directory in args.skip for _, prompt in answered_samples(directory)}
    # A greedy answer is one text per prompt, so a prompt that has one gains nothing from another.
    answered |= {prompt for directory in args.skip_greedy for sample, prompt in answered_samples(directory)
                 if not sample["sampled"]}
    order = [index for index in order if rows[index]["prompt"] not in answered]
    if not order:
        raise TrainError("Every prompt is already answered in the --skip / --skip-greedy directories.")
    if args.limit is not None:
        order = order[: args.limit]
    coin = random.Random(args.seed + 1)
    items = []
    for index in order:
        ids, truncated = prompt_ids(target.tokenizer, rows[index]["prompt"], args.max_prompt_tokens)
        items.append(Item(index, rows[index]["id"], ids, coin.random() < args.sampled_fraction, truncated))
    plan = {
        "format": DATA_FORMAT,
        "model": target.name,
        "hidden_size": target.hidden_size,
        "vocab_size": target.vocab_size,
        "prompts": _relative_to(args.prompts, out),
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
        plan["skip"] = _relative_to(args.skip, out)
    if args.skip_greedy:
        plan["skip_greedy"] = _relative_to(args.skip_greedy, out)
    if args.bf16:  # likewise
        plan["bf16"] = True
    return items, plan


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
    for flag, directories in (("--skip", args.skip), ("--skip-greedy", args.skip_greedy)):
        for directory in directories:
            if not (Path(directory) / "meta.json").is_file():
                raise TrainError(f"{flag} {directory} is not a directory written by `python -m ddd.train data`.")


def _resume_plan(plan: dict, meta_path: Path) -> None:
    """Keep the time already spent on this directory; refuse one made with other settings."""
    plan["wall_s"] = 0.0
    if meta_path.exists():
        old, new = (_with_resolved_paths(m, meta_path.parent) for m in (json.loads(meta_path.read_text()), plan))
        changed = [k for k in _PLAN_KEYS if old.get(k) != new.get(k)]
        if changed:
            raise TrainError(
                f"{meta_path.parent} holds data made with different settings ({', '.join(changed)}); "
                "rerun with the same arguments to resume, or pick another --out."
            )
        plan["wall_s"] = old.get("wall_s", 0.0)
    meta_path.write_text(json.dumps(plan, indent=2))


def _write_shard(samples: list[dict], number: int, out: Path) -> None:
    path = _shard_path(out, number)
    tmp = path.with_suffix(".tmp")
    samples = sorted(samples, key=lambda s: s["index"])
    torch.save({"format": DATA_FORMAT, "samples": samples}, tmp)
    tmp.replace(path)


def _answer_shards(target, items: list[Item], todo: list[int], args, out: Path, bar: tqdm, since: float) -> int:
    """Answer the prompts of the `todo` shards in one stream of batches, saving each shard as soon as its
    last answer is in; the new tokens made."""
    size = args.shard_size
    shard_of = {item.index: n for n in todo for item in items[n * size:(n + 1) * size]}
    waiting = {n: len(items[n * size:(n + 1) * size]) for n in todo}
    done: dict[int, list[dict]] = {n: [] for n in todo}
    queue = [item for n in todo for item in items[n * size:(n + 1) * size]]
    generator = torch.Generator(device=target.device).manual_seed(args.seed * 100003 + todo[0])
    made = 0
    for sample in decode_answers(target, queue, args, generator):
        number = shard_of[sample["index"]]
        done[number].append(sample)
        made += len(sample["ids"]) - sample["prompt_len"]
        bar.update(1)
        bar.set_postfix(new_tokens=made, tok_s=f"{made / (time.time() - since):.0f}")
        if len(done[number]) == waiting[number]:
            _write_shard(done.pop(number), number, out)
    return made


def cmd_data(args) -> int:
    _check_data_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.time()
    target = load_target(args.model, device=args.device)
    if args.bf16:
        target.model.to(torch.bfloat16)
    out = Path(args.out)
    items, plan = _plan(args, target, out)
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
        made = _answer_shards(target, items, todo, args, out, bar, started)
    finally:
        bar.close()
        plan["wall_s"] += time.time() - started
        meta_path.write_text(json.dumps(plan, indent=2))
    print(f"Done: {made} new answer tokens in {time.time() - started:.0f} s "
          f"(all runs of this directory: {plan['wall_s']:.0f} s).", flush=True)
    return 0


def load_samples(directory: str | Path) -> tuple[list[dict], dict]:
    """The samples of a data directory and its meta.json, whose paths come back absolute."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        raise TrainError(f"No training data in {directory}: meta.json is missing (make it with `python -m ddd.train data`).")
    meta = _with_resolved_paths(json.loads(meta_path.read_text()), directory)
    paths = sorted(directory.glob(SHARD_GLOB))
    if not paths:
        raise TrainError(f"No shard files in {directory}; run `python -m ddd.train data` first.")
    samples = []
    for path in paths:
        samples.extend(torch.load(path, map_location="cpu", weights_only=True)["samples"])
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
    p.add_argument("--skip-greedy", nargs="+", default=[], metavar="DIR",
                   help="leave out prompts these data directories hold a greedy answer to")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--max-prompt-tokens", type=int, default=320, help="longer questions are cut to fit")
    p.add_argument("--batch-size", type=int, default=64, help="prompts decoded together")
    p.add_argument("--shard-size", type=int, default=64, help="prompts per shard file (the unit of resuming)")
    p.add_argument("--sampled-fraction", type=float, default=0.3, help="share of answers sampled instead of greedy")
    p.add_argument("--temperature", type=float, default=0.7, help="temperature of the sampled answers")
    p.add_argument("--bf16", action="store_true",
                   help="decode in bfloat16 and store token ids only (for distill; fit needs the features)")
    add_machine_arguments(p)
    p.set_defaults(func=cmd_data)
