"""Distillation of an EAGLE-3 head from texts read by the target, teacher-forced (stages one and two).

    python -m ddd.train distill --out runs/head-distill --minutes 110            # first run
    python -m ddd.train distill --out runs/head-distill --minutes 110 --resume   # the next job of the stage
    python -m ddd.train distill --out runs/head-2 --init runs/head-distill --corpus --prompts '' \
        --answers runs/answers                                                   # stage two: the target's own answers

The target reads whole texts (a user turn and an answer, through the chat template) in one forward per
batch, so a position of training signal costs a small part of a decoded token. At every position the
target's own next-token distribution over the draft vocabulary is the label, and its features at three
layers are the EAGLE-3 head's input; nothing is stored but checkpoints. The texts and batches are in
ddd/train/texts.py, the training-time-test loss in ddd/train/unrolled.py, and the changes an --init head may
go through in ddd/train/resize.py.
"""
from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ddd.checkpoint import load_head, save_head
from ddd.eagle3 import DRAFT_HIDDEN, new_eagle3_head
from ddd.models import load_target
from .common import (DEFAULT_CORPUS, DEFAULT_PROMPTS, Optimiser, Progress, TrainError, add_machine_arguments,
                     epoch_batches, log_record, read_checkpoint, restore, write_checkpoint)
from .resize import deepen, seeded_from_target, shallower, widen, with_draft_hidden, with_features, with_vocab
from .texts import (Batch, Text, cached_texts, collate, draft_vocabulary, grown_vocabulary, is_heldout, make_batches,
                    template_prefix)
from .unrolled import evaluate, teach, unrolled_loss

DRAFT_VOCAB = 16384  # a new head's own vocabulary: 97% of the target's answer tokens (assets/head/README.md)


def _check(args) -> None:
    for name in ("steps", "batch_tokens", "levels", "max_len", "eval_every"):
        if getattr(args, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be at least 1.")
    if min(args.run_steps, args.eval_levels, args.head_layers, args.head_mlp, args.draft_vocab) < 0:
        raise TrainError("--run-steps, --eval-levels, --head-layers, --head-mlp and --draft-vocab must be 0 (no limit "
                         "/ as trained / as the --init head, else the default) or positive.")
    if args.lr <= 0 or args.minutes <= 0 or not 0 < args.decay <= 1 or not 0 < args.score_share <= 1:
        raise TrainError("--lr and --minutes must be positive, --decay and --score-share in (0, 1].")
    if args.layers_lr < 0 or args.lm_lr < 0:
        raise TrainError("--layers-lr and --lm-lr must be positive (or 0: the same as --lr).")
    if not 0 <= args.confidence_weight <= 4:
        raise TrainError("--confidence-weight must be in [0, 4] (0: every position counts the same).")
    if not 0.05 <= args.label_temperature <= 1:
        raise TrainError("--label-temperature must be in [0.05, 1].")
    if args.from_target and args.init:
        raise TrainError("--from-target seeds a new head; an --init head is trained as it is.")
    for directory in args.answers:
        if not (Path(directory) / "meta.json").is_file():
            raise TrainError(f"--answers {directory} is not a directory written by `python -m ddd.train data`.")


@dataclass
class Stage:
    """What a distillation run works on, once its texts, target and head are ready."""

    target: object
    head: torch.nn.Module
    train: list[Text]
    held: list[Batch]
    prefix: int
    summary: dict


def _head(args, target, train: list[Text], state: dict | None):
    """The head to train: the checkpoint's, the --init head (deepened or cut to --head-layers, widened to
    --head-mlp, reading the added --feature-layers too), or a new one over the training texts' vocabulary
    (seeded from the target's top layers with --from-target)."""
    if state is None and args.init:
        head = load_head(args.init, target)
        if head.kind != "eagle3":
            raise TrainError(f"--init {args.init} is an {head.kind} head; distillation trains EAGLE-3 heads.")
        if head.config.hidden_size != target.hidden_size:
            raise TrainError(f"--init {args.init} is {head.config.hidden_size} wide and {target.name} "
                             f"{target.hidden_size}: distillation trains heads of their target's width.")
        try:
            if args.head_layers and args.head_layers < head.config.num_hidden_layers:
                head = shallower(head, args.head_layers)
            elif args.head_layers:
                head = deepen(head, args.head_layers, seed=args.seed)
            if args.head_mlp:
                head = widen(head, args.head_mlp, seed=args.seed)
            if args.feature_layers:
                head = with_features(head, _feature_layers(args))
            if args.draft_hidden:
                head = with_draft_hidden(head, args.draft_hidden)
            if args.draft_vocab:
                if args.draft_vocab < head.draft_vocab_size:
                    raise ValueError(f"the head drafts over {head.draft_vocab_size} tokens: it can grow, not shrink "
                                     f"to {args.draft_vocab}")
                grown = grown_vocabulary(train, head.draft_to_target(), args.draft_vocab, target.vocab_size)
                head = with_vocab(head, grown, target.lm_weight)
        except ValueError as err:
            raise TrainError(f"--head-layers / --head-mlp / --feature-layers / --draft-hidden / --draft-vocab: {err}") \
                from None
        return head.float().requires_grad_(True)
    if state is not None:
        vocab, layers, depth = state["draft_vocab"], state["layers"], state.get("head_layers", 1)
        mlp = state.get("head_mlp")
        # The wiring may change on resume (the weights stay): --draft-hidden says so explicitly.
        trained = state.get("draft_hidden", "output")
        draft_hidden = args.draft_hidden or trained
        if draft_hidden != trained:
            print(f"draft hidden: {trained} until now, {draft_hidden} from here on", flush=True)
    else:
        size = min(args.draft_vocab or DRAFT_VOCAB, target.vocab_size)
        vocab = draft_vocabulary(train, target.vocab_size, size, target.eos_ids())
        layers = _feature_layers(args) if args.feature_layers else None
        depth, mlp = args.head_layers or 1, args.head_mlp or None
        draft_hidden = args.draft_hidden or "output"
    try:
        head = new_eagle3_head(target, draft_vocab=vocab, seed=args.seed, layers=layers, depth=depth, mlp=mlp,
                               draft_hidden=draft_hidden).float()
        # A resumed run takes every weight from its checkpoint: seeding is for the first run alone.
        return seeded_from_target(head, target) if args.from_target and state is None else head
    except ValueError as err:
        raise TrainError(f"--feature-layers / --head-layers / --head-mlp / --from-target / --draft-hidden: {err}") \
            from None


def _feature_layers(args) -> tuple[int, ...]:
    try:
        return tuple(int(i) for i in args.feature_layers.split(","))
    except ValueError:
        raise TrainError(f"--feature-layers takes comma-separated numbers, not {args.feature_layers!r}.") from None


def _stage(args, state: dict | None) -> Stage:
    target = load_target(args.model, device=args.device)
    texts = cached_texts(args, target, Path(args.ckpt_dir))
    train = [t for t in texts if not is_heldout(t.key)]
    held = [t for t in texts if is_heldout(t.key)][: args.eval_texts]
    prefix = template_prefix(target.tokenizer)
    tokens = sum(len(t.ids) for t in train)
    print(f"{len(texts)} texts: {len(train)} for training ({tokens} tokens), {len(held)} held out for "
          f"evaluation; the first {prefix} tokens of each (the fixed system turn) are not scored.", flush=True)
    head = _head(args, target, train, state).train()
    vocab = head.draft_to_target()
    covered = sum(int(torch.isin(torch.tensor(t.ids), vocab).sum()) for t in held) / max(1, sum(len(t.ids) for t in held))
    print(f"draft vocabulary: {vocab.numel()} tokens, {covered:.4f} of held-out tokens", flush=True)
    pad = target.tokenizer.pad_token_id or 0
    held_batches = [collate(b, pad) for b in make_batches(held, args.batch_tokens, random.Random(0))]
    summary = {"stage": "distill", "corpus": list(args.corpus), "prompts": args.prompts, "answers": list(args.answers),
               "texts_train": len(train), "tokens_train": tokens, "texts_heldout": len(held), "draft_vocab": vocab.numel(),
               "draft_vocab_coverage_heldout": round(covered, 4), "levels": args.levels, "decay": args.decay,
               "score_share": args.score_share, "answers_only": args.answers_only,
               "label_temperature": args.label_temperature, "confidence_weight": args.confidence_weight,
               "lr": args.lr,
               "layers_lr": args.layers_lr or args.lr, "lm_lr": args.lm_lr or args.lr,
               "batch_tokens": args.batch_tokens, "max_len": args.max_len, "bf16": args.bf16, "init": args.init,
               "head_layers": head.config.num_hidden_layers, "head_mlp": head.config.intermediate_size,
               "from_target": args.from_target, "draft_hidden": head.draft_hidden}
    return Stage(target, head, train, held_batches, prefix, summary)


def cmd_distill(args) -> int:
    _check(args)
    began = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    state = read_checkpoint(args.ckpt_dir, args.resume)
    stage = _stage(args, state)
    head, target = stage.head, stage.target
    optimiser = Optimiser(head, args.lr, args.steps, max(1, args.steps // 50), args.clip,
                          prefix_lr={prefix: rate for prefix, rate in (("layers.", args.layers_lr), ("lm_head.", args.lm_lr))
                                     if rate})
    # Which positions each level scores: the checkpoint keeps the generator's state, so that a resumed run
    # draws what the whole run would have.
    generator = torch.Generator().manual_seed(args.seed)
    progress = restore(state, head, optimiser, generator) if state is not None else Progress()
    pad = target.tokenizer.pad_token_id or 0
    batches = epoch_batches(progress, lambda epoch: make_batches(stage.train, args.batch_tokens,
                                                                 random.Random(args.seed * 7919 + epoch)))
    embed = target.model.get_input_embeddings()
    scored = args.eval_levels or args.levels

    def save(final: bool) -> None:
        write_checkpoint(args.ckpt_dir, head, optimiser, progress, generator, draft_vocab=head.draft_to_target(),
                         layers=head.aux_layers, head_layers=head.config.num_hidden_layers,
                         head_mlp=head.config.intermediate_size, draft_hidden=head.draft_hidden)
        save_head(head, args.out, extra={"training": stage.summary | {
            "steps": progress.step, "train_s": round(progress.elapsed), "final": final, "last": progress.history[-1:]}})

    if state is None and args.init:  # where the stage starts from, on its own held-out texts
        record = {"step": 0} | {f"heldout_{k}": round(v, 4) for k, v in
                                evaluate(target, head, stage.held, scored, stage.prefix, args.bf16).items()}
        progress.history.append(record)
        log_record(record)
    deadline = began + args.minutes * 60
    stop_at = min(args.steps, progress.step + args.run_steps) if args.run_steps else args.steps
    last_save, seen, busy, window = time.time(), 0, 0.0, []
    while progress.step < stop_at and time.time() < deadline:
        started = time.time()
        batch = collate(next(batches), pad)
        teacher = teach(target, head, batch, args.bf16, temperature=args.label_temperature,
                        answers_only=args.answers_only)
        loss, stats = unrolled_loss(head, embed, batch, teacher, args.levels, args.decay, stage.prefix, args.bf16,
                                    args.score_share, args.answers_only, args.confidence_weight, generator)
        if loss is None:
            continue
        optimiser.step(loss)
        progress.step += 1
        seen, busy = seen + int(batch.lengths.sum()), busy + time.time() - started
        progress.elapsed += time.time() - started
        window.append((float(loss.detach()), stats.agree[0]))
        if progress.step % args.eval_every == 0 or progress.step == args.steps:
            record = {"step": progress.step, "epoch": progress.epoch, "lr": optimiser.lr,
                      "train_loss": sum(w[0] for w in window) / len(window),
                      "train_agree1": sum(w[1] for w in window) / len(window),
                      "train_tokens_per_s": round(seen / busy, 1), "train_s": round(progress.elapsed)}
            record |= {f"heldout_{k}": round(v, 4) for k, v in
                       evaluate(target, head, stage.held, scored, stage.prefix, args.bf16).items()}
            progress.history.append(record)
            log_record(record)
            seen, busy, window = 0, 0.0, []
        if time.time() - last_save > args.ckpt_minutes * 60:
            save(final=False)
            last_save = time.time()
    save(final=progress.step >= args.steps)
    print(f"Saved the head to {args.out} at step {progress.step} of {args.steps} ({progress.elapsed:.0f} s of "
          f"training in all, {time.time() - began:.0f} s this run).", flush=True)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("distill", help="stage one: train an EAGLE-3 head on texts read by the target, teacher-forced")
    p.add_argument("--out", required=True, help="where the head goes (config.json + model.safetensors)")
    p.add_argument("--corpus", nargs="*", default=list(DEFAULT_CORPUS),
                   help="JSONL files of {prompt, response} rows (default: the shared corpus)")
    p.add_argument("--prompts", default=DEFAULT_PROMPTS,
                   help="JSONL of prompts, read as user turns alone ('' for none)")
    p.add_argument("--answers", nargs="*", default=[],
                   help="directories written by `python -m ddd.train data`: the target's own answers (stage two)")
    p.add_argument("--init", default=None, help="start from this EAGLE-3 head (a directory) instead of a new one")
    p.add_argument("--steps", type=int, default=3000, help="length of the learning-rate schedule, over all stages")
    p.add_argument("--minutes", type=float, default=110, help="this run stops, saved, after this many minutes")
    p.add_argument("--run-steps", type=int, default=0, help="this run stops, saved, after this many steps (0: no limit)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch")
    p.add_argument("--max-len", type=int, default=512, help="longer texts are cut")
    p.add_argument("--levels", type=int, default=5, help="draft levels unrolled in training-time test")
    p.add_argument("--eval-levels", type=int, default=0,
                   help="draft levels scored at each evaluation (0: as many as --levels); for comparing runs")
    p.add_argument("--decay", type=float, default=0.8, help="weight of level j is decay**j")
    p.add_argument("--score-share", type=float, default=0.5,
                   help="share of positions scored at each level (the draft LM head is most of the cost)")
    p.add_argument("--answers-only", action="store_true",
                   help="score answer tokens alone (every level after the first then runs over the answers alone, "
                        "which is cheaper where prompts are long); evaluation still scores every position")
    p.add_argument("--label-temperature", type=float, default=1.0,
                   help="train on the target's distribution at this temperature (below 1: sharper; evaluation "
                        "always scores the distribution itself)")
    p.add_argument("--confidence-weight", type=float, default=0.0,
                   help="weight each scored position by the target's top-1 probability there to this power "
                        "(0: every position counts the same); the logged losses stay unweighted")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--layers-lr", type=float, default=0,
                   help="peak learning rate of the decoder layers after the first (--head-layers), 0: --lr")
    p.add_argument("--lm-lr", type=float, default=0,
                   help="peak learning rate of the head's LM head, 0: --lr (the new rows of a grown --draft-vocab start "
                        "far from their place)")
    p.add_argument("--clip", type=float, default=0.5, help="gradient-norm clip")
    p.add_argument("--draft-vocab", type=int, default=0,
                   help=f"size of the head's own vocabulary (0: {DRAFT_VOCAB} for a new head, an --init head's own); an "
                        "--init head grows to this many, adding the training texts' most frequent other tokens")
    p.add_argument("--feature-layers", default=None,
                   help="comma-separated hidden-state indices the head reads (default: inputs of layers 2, L//2, L-3); "
                        "an --init head keeps its own and reads the added ones too, drafting as before until "
                        "training moves them")
    p.add_argument("--head-layers", type=int, default=0,
                   help="decoder layers of the head (0: as the --init head, else 1); an --init head grows to this "
                        "many, drafting as before until training moves the new ones, or is cut to it, keeping "
                        "its first and its top stacked layers")
    p.add_argument("--head-mlp", type=int, default=0,
                   help="MLP channels of the head's decoder layers (0: as the --init head, else the target's); an "
                        "--init head grows to this many, drafting as before until training moves the new ones")
    p.add_argument("--from-target", action="store_true",
                   help="a new head's stacked layers, norm and LM head start as copies of the target's top layers, "
                        "final norm and LM head (needs --head-layers 2 or more)")
    p.add_argument("--draft-hidden", choices=DRAFT_HIDDEN, default=None,
                   help="what deeper draft levels read: the head's final output (default) or its first layer's "
                        "output (needs two decoder layers or more; docs/training.md); given with --resume or "
                        "--init, it rewires the head and keeps its weights")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                   help="run the target and the head's products in bfloat16 autocast (weights stay float32)")
    p.add_argument("--eval-texts", type=int, default=96, help="held-out texts scored at each evaluation")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--ckpt-minutes", type=float, default=10, help="save a checkpoint and the head this often")
    p.add_argument("--ckpt-dir", default="runs/distill-ckpt", help="checkpoint (and tokenised texts) for --resume")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --ckpt-dir")
    add_machine_arguments(p)
    p.set_defaults(func=cmd_distill)
