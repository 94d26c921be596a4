"""Fitting an EAGLE-1/2 head on stored answers (`python -m ddd.train fit`).

The head's fc and decoder layer train with the EAGLE loss (ddd/train/eagle_loss.py). Answer positions count
(`--positions all`: question tokens too), and `--level2` adds the loss one level deeper, where the head reads
its own guesses as inside a draft tree. Checkpoints are written periodically and `--resume` continues from
the last one.
"""
from __future__ import annotations

import random
import time

import torch
from tqdm import tqdm

from ddd.checkpoint import save_head
from ddd.head import new_head
from ddd.models import load_target
from .answers import load_samples
from .common import (Optimiser, Progress, TrainError, add_machine_arguments, choose_draft_vocab, epoch_batches,
                     length_batches, read_checkpoint, read_prompt_files, read_prompts, restore, write_checkpoint)
from .eagle_loss import HeadTrainer

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


def prompt_token_counts(paths: list[str] | str, tokenizer, vocab_size: int, exclude: set[str]) -> torch.Tensor | None:
    """Token counts over the prompts the data was made from (rows whose id is in `exclude` left out). Data made
    from one file names it as a string, and its rows' ids carry no file prefix."""
    try:
        rows = read_prompts(paths) if isinstance(paths, str) else read_prompt_files(paths)
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
    return length_batches(samples, [len(s["ids"]) for s in samples], batch_tokens, rng)


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


def _check(args) -> None:
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


def _draft_vocab(args, target, meta: dict, train: list[dict], held: list[dict],
                 state: dict | None) -> tuple[torch.Tensor | None, dict]:
    """The head's draft vocabulary (None: the full one), printing and returning how well it covers the answers."""
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
    return vocab, {"draft_vocab": size, "draft_vocab_coverage_heldout": covered,
                   "coverage_heldout": {str(n): round(v, 4) for n, v in cover_held.items()}}


def _record(progress: Progress, lr: float, window: list[dict], trainer: HeadTrainer, held: list) -> dict:
    """One line of the training history: the window's training means and the held-out evaluation."""
    record = {"step": progress.step, "epoch": progress.epoch, "lr": lr}
    for key in ("loss", "reg", "ce", "acc", "acc2"):
        values = [w[key] for w in window if key in w]
        if values:
            record[f"train_{key}" if key != "acc2" else "train_acc_level2"] = sum(values) / len(values)
    record["elapsed_s"] = round(progress.elapsed, 1)
    if held:
        ev = trainer.evaluate(held)
        record |= {"heldout_loss": ev["loss"], "heldout_reg": ev["reg"], "heldout_ce": ev["ce"],
                   "heldout_acc": ev["acc"], "heldout_acc_level2": ev["acc_self"]}
    return record


def cmd_fit(args) -> int:
    _check(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    samples, meta = load_samples(args.data)
    if meta.get("bf16"):
        raise TrainError(f"{args.data} was made with `data --bf16`, which stores token ids only; fit trains on "
                         "the target's float32 features (distill --answers reads such data).")
    state = read_checkpoint(args.ckpt_dir, args.resume)
    target = load_target(args.model or meta["model"], device=args.device)
    if target.hidden_size != meta["hidden_size"]:
        raise TrainError(f"The data in {args.data} has features of size {meta['hidden_size']}, "
                         f"but {target.name} has hidden size {target.hidden_size}.")
    train, held = split_samples(samples, args.heldout, args.seed)
    tokens = _answer_tokens(train).numel()
    print(f"{len(samples)} samples: {len(train)} for training ({tokens} answer tokens), {len(held)} held out.", flush=True)
    vocab, vocab_summary = _draft_vocab(args, target, meta, train, held, state)
    head = new_head(target, draft_vocab=vocab, seed=args.seed).train().requires_grad_(True)
    trainer = HeadTrainer(target, head, ce_weight=args.ce_weight, noise=args.noise, soft=args.ce_target == "target",
                          level2=args.level2, seed=args.seed)
    prefix = shared_prefix(samples) if args.positions == "all" else None
    warmup = args.warmup if args.warmup is not None else max(1, args.steps // 20)
    optimiser = Optimiser(head, args.lr, args.steps, warmup, args.clip, args.weight_decay)
    progress = restore(state, head, optimiser, trainer.generator) if state is not None else Progress()
    if state is not None:
        print(f"resumed from {args.ckpt_dir} at step {progress.step}", flush=True)
    held_batches = [collate(b, args.max_len) for b in make_batches(held, args.batch_tokens, random.Random(0))]
    summary = {"data": str(args.data), "samples_train": len(train), "samples_heldout": len(held),
               "answer_tokens_train": tokens, **vocab_summary, "vocab_prompt_weight": args.vocab_prompt_weight,
               "ce_weight": args.ce_weight, "ce_target": args.ce_target, "noise": args.noise, "lr": args.lr,
               "batch_tokens": args.batch_tokens, "positions": args.positions, "level2": args.level2}
    batches = epoch_batches(progress, lambda epoch: make_batches(train, args.batch_tokens,
                                                                 random.Random(args.seed * 7919 + epoch)))
    window: list[dict] = []
    with tqdm(total=args.steps, initial=progress.step, desc="fit", unit="step", dynamic_ncols=True) as bar:
        while progress.step < args.steps:
            started = time.time()
            loss, parts = trainer.loss(collate(next(batches), args.max_len, prefix), noise=True)
            optimiser.step(loss)
            progress.step += 1
            progress.elapsed += time.time() - started
            window.append(parts | {"loss": float(loss.detach())})
            bar.update(1)
            if progress.step % args.eval_every == 0 or progress.step == args.steps:
                progress.history.append(_record(progress, optimiser.lr, window, trainer, held_batches))
                window = []
                tqdm.write(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in progress.history[-1].items()))
            if progress.step % args.ckpt_every == 0 or progress.step == args.steps:
                write_checkpoint(args.ckpt_dir, head, optimiser, progress, trainer.generator, draft_vocab=vocab)
                save_head(head, args.out, extra={"training": summary | {
                    "steps": progress.step, "final": progress.step >= args.steps, "wall_s": round(progress.elapsed, 1),
                    "history": progress.history[-1:]}})
    print(f"Saved the head to {args.out} after {progress.step} steps ({progress.elapsed:.0f} s of training).", flush=True)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="train a draft head on data made by `data`")
    p.add_argument("--data", required=True, help="directory written by `python -m ddd.train data`")
    p.add_argument("--out", required=True, help="where the head goes (config.json + model.safetensors)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per batch")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 5%% of --steps)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip", type=float, default=0.5, help="gradient-norm clip")
    p.add_argument("--ce-weight", type=float, default=0.1, help="weight of the next-token cross-entropy")
    p.add_argument("--ce-target", choices=("token", "target"), default="token",
                     help="cross-entropy against the next token (EAGLE) or the target's whole next-token distribution")
    p.add_argument("--noise", type=float, default=0.2, help="width of the uniform noise on input features")
    p.add_argument("--positions", choices=("answer", "all"), default="answer",
                     help="learn from answer tokens only, or from every token after the prompts' shared prefix")
    p.add_argument("--level2", type=float, default=0.0,
                     help="share of positions that also learn one level deeper, from the head's own features (0: off)")
    p.add_argument("--draft-vocab", type=int, default=8192,
                     help="keep the N most frequent answer tokens as the draft vocabulary (0: the full vocabulary)")
    p.add_argument("--vocab-prompt-weight", type=float, default=0.1,
                     help="weight of the training prompts' token counts when ranking the draft vocabulary (0: answers only)")
    p.add_argument("--heldout", type=float, default=0.05, help="share of samples held out for evaluation")
    p.add_argument("--max-len", type=int, default=1024, help="longer samples are cut")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--ckpt-every", type=int, default=50)
    p.add_argument("--ckpt-dir", default="runs/head-ckpt", help="checkpoints for --resume")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --ckpt-dir")
    add_machine_arguments(p, "target model (default: the one the data was made with)")
    p.set_defaults(func=cmd_fit)
