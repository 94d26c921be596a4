"""Distillation of an EAGLE-3 head from texts read by the target, teacher-forced (stages one and two).

    python -m ddd.train distill --out runs/head-distill --minutes 110            # first run
    python -m ddd.train distill --out runs/head-distill --minutes 110 --resume   # the next job of the stage
    python -m ddd.train distill --out runs/head-2 --init runs/head-distill --corpus --prompts '' \
        --answers runs/answers                                                   # stage two: the target's own answers

The target reads whole texts (a user turn and an answer, through the chat template) in one forward per
batch, so a position of training signal costs a small part of a decoded token. At every position the
target's own next-token distribution over the draft vocabulary is the label, and its features at three
layers are the EAGLE-3 head's input; nothing is stored but checkpoints.

The head trains with training-time test (docs/training.md): level j of the unrolled head reads its own
output of level j-1 and attends to the real context plus its own chain, exactly as a node j+1 deep in a
draft tree does. For tokens x_0..x_{T-1}, target features a_i (after reading x_i) and target distributions
p_i (of x_{i+1}), level j at index i reads (embed(x_{i+1+j}), level j-1's output at i), sits at position
i+j, and is scored against p_{i+1+j}.
"""
from __future__ import annotations

import argparse
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ddd.eagle3 import (DRAFT_HIDDEN, deepen, new_eagle3_head, seeded_from_target, shallower, widen, with_draft_hidden,
                        with_features, with_vocab)
from .common import (DEFAULT_CORPUS, Optimiser, Progress, TrainError, add_machine_arguments, choose_draft_vocab,
                     epoch_batches, length_batches, log_record, read_checkpoint, read_corpus, read_prompts, restore,
                     write_checkpoint)

HELDOUT_EVERY = 50  # one prompt in 50 (by a hash of its text) is held out, with every answer to it
DRAFT_VOCAB = 16384  # a new head's own vocabulary: 97% of the target's answer tokens (assets/head/README.md)
SURE = 0.9  # the target's probability of its first choice above which evaluation also counts a position as sure


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
    from .answers import answered_samples

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


@dataclass
class Teacher:
    """What the target says about a batch: the head's input features and, at the positions a level may
    score, the labels."""

    aux: torch.Tensor  # (B, T, 3H) features at the head's three layers
    label_row: torch.Tensor  # (B, T) each position's row in the label tensors below, -1 where it has none
    label_p: torch.Tensor  # (N, V_draft) the target's probabilities, renormalised over the draft vocabulary
    label_plogp: torch.Tensor  # (N,) sum of p log p: the KL divergence's constant part, once per position
    label_best: torch.Tensor  # (N,) the draft-vocabulary row the target ranks first
    argmax: torch.Tensor | None  # (N,) the target's most likely next token over its whole vocabulary (evaluation)
    # (N,) where the target gives its first choice at least SURE of its whole vocabulary's probability (evaluation)
    sure: torch.Tensor | None = None

    def rows(self, batch_rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = self.label_row[batch_rows, positions]
        if bool((rows < 0).any()):
            raise ValueError("A level scores a position the teacher gave no label.")
        return rows


def teach(target, head, batch: Batch, bf16: bool, argmax: bool = False, temperature: float = 1.0,
          answers_only: bool = False) -> Teacher:
    """One teacher-forced target forward; bf16 autocast makes it about three times faster on a CPU.
    Labels are computed where a level may score: every position of a text, or with `answers_only` its answer
    alone (on the target's own answers that saved a quarter of the teacher's time: docs/training.md).
    A `temperature` below 1 sharpens the labels: the head then spends its capacity on the target's first
    choice, which is what greedy verification accepts, while still learning the order of the runners-up."""
    vocab = head.draft_to_target()
    ids = batch.ids.to(target.device)
    columns = torch.arange(ids.shape[1], device=ids.device)[None]
    labelled = columns < batch.lengths.to(ids.device)[:, None]
    if answers_only:
        labelled &= columns >= batch.starts.to(ids.device)[:, None]
    label_row = torch.full(ids.shape, -1, dtype=torch.long, device=ids.device)
    label_row[labelled] = torch.arange(int(labelled.sum()), device=ids.device)
    with torch.no_grad(), torch.autocast(target.device.type, dtype=torch.bfloat16, enabled=bf16):
        out = target.model.model(input_ids=ids, output_hidden_states=head.hidden_state_ids)
        aux = head.target_features(out).float()
        last = out.last_hidden_state[labelled]
        if argmax:  # evaluation: the whole vocabulary's logits, of which the draft's are a subset
            logits = last @ target.lm_weight.T
            best, draft_logits = logits.argmax(-1), logits[..., vocab].float()
            sure = logits.float().softmax(-1).amax(-1) >= SURE
        else:
            best, draft_logits, sure = None, (last @ target.lm_weight[vocab].T).float(), None
    logp = F.log_softmax(draft_logits / temperature, dim=-1)
    p = logp.exp()
    return Teacher(aux, label_row, p, (p * logp).sum(-1), logp.argmax(-1), best, sure)


def level_mask(columns: torch.Tensor, n: int, level: int) -> torch.Tensor:
    """Level j's queries, at `columns` (rows x width indices into the n-long context), see the real context
    causally and, for each earlier level and their own, only themselves: the chain of guesses that led to
    them (boolean, True = attend)."""
    rows, width = columns.shape
    causal = torch.arange(n, device=columns.device)[None, None] <= columns[:, :, None]
    eye = torch.eye(width, dtype=torch.bool, device=columns.device).expand(rows, width, width)
    return torch.cat([causal] + [eye] * level, dim=2)[:, None]


def answer_columns(batch: Batch, levels: int, n: int) -> torch.Tensor:
    """Each row's indices whose deeper levels can predict answer tokens: from `levels` before its first
    answer token to its end, padded on the right to the widest row (indices past n - 1 are never scored).
    An answer is at most a few hundred tokens where its prompt may be a thousand, so every level after the
    first runs over these alone."""
    first = (batch.starts - levels).clamp(min=0, max=n - 1)
    width = int((batch.lengths - 1 - first).clamp(min=1).max())
    return first[:, None] + torch.arange(width)[None]


@dataclass
class LevelStats:
    loss: list[float] = field(default_factory=list)
    agree: list[float] = field(default_factory=list)  # top-1 agreement with the target's whole-vocabulary argmax
    count: list[int] = field(default_factory=list)
    # The same over answer tokens alone: what a draft tree guesses at, where the question is the user's.
    answer_loss: list[float] = field(default_factory=list)
    answer_agree: list[float] = field(default_factory=list)
    answer_count: list[int] = field(default_factory=list)
    # Agreement on answer tokens where the target is sure of its first choice (evaluation): a head that misses
    # these lacks what the target knows, not a coin flip the target itself barely decides.
    sure_agree: list[float] = field(default_factory=list)
    sure_count: list[int] = field(default_factory=list)


def position_weights(label_p: torch.Tensor, power: float) -> torch.Tensor:
    """Each position's weight, p_max**power: greedy verification accepts a draft token only where it is the
    target's first choice, and a chain of accepted tokens runs through positions where the target is sure of
    it. Where the target spreads its bets, even a head that matched its distribution exactly would guess its
    first choice seldom, yet the divergence there is largest; these weights move the head's capacity toward
    the positions that can be accepted."""
    return label_p.max(-1).values.pow(power)


def unrolled_loss(head, embed, batch: Batch, teacher: Teacher, levels: int, decay: float, prefix: int,
                  bf16: bool, score_share: float = 1.0, answers_only: bool = False,
                  confidence_weight: float = 0.0) -> tuple[torch.Tensor | None, LevelStats]:
    """The training-time-test loss over `levels` draft levels: KL divergence from the target's distribution,
    level j weighted decay**j. With `score_share` < 1 each level scores a random share of its positions:
    the draft LM head over them is most of a step's cost, and neighbouring positions teach much the same.
    With `answers_only` only answer tokens are scored, and every level after the first runs over the answers
    alone: a draft tree guesses answers, and the question is the user's. The loss is None where nothing is
    scored (a batch of prompts cut before their answers, with `answers_only`). With `confidence_weight`
    above 0, each position's divergence counts in proportion to p_max**confidence_weight, p_max being the
    target's probability of its own first choice there (`position_weights`); the losses in the returned stats
    stay unweighted, so that runs compare."""
    ids = batch.ids.to(teacher.aux.device)
    n = ids.shape[1] - 1
    everything = torch.arange(n, device=ids.device)[None]
    deeper = answer_columns(batch, levels, n).to(ids.device) if answers_only else everything
    lengths, starts = batch.lengths.to(ids.device)[:, None], batch.starts.to(ids.device)[:, None]
    cache = DynamicCache(config=head.config)
    vocab = head.draft_to_target()
    total, weights, stats = 0.0, 0.0, LevelStats()
    hidden = None
    for level in range(levels):
        columns = everything if level == 0 else deeper
        clamped = columns.clamp(max=n - 1)  # one row in the whole-text pass: its mask broadcasts over the batch
        inside = clamped.expand(ids.shape[0], -1)
        label_at = columns + 1 + level  # the position whose distribution this level predicts
        valid = (label_at <= lengths - 1) & (label_at >= prefix)
        answer = (label_at >= starts).expand_as(valid)
        if answers_only:
            valid &= answer
        if score_share < 1:
            valid &= torch.rand(valid.shape, device=valid.device) < score_share
        if not valid.any():
            break
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            if level == 0:
                hidden = head.fuse(teacher.aux[:, :n])
            elif level == 1 and deeper is not everything:
                hidden = hidden.gather(1, inside[..., None].expand(-1, -1, hidden.shape[-1]))
            # Columns past a row's end read the batch's last column: never scored, and no scored query sees them.
            tokens = ids.gather(1, (inside + 1 + level).clamp(max=n))
            out = head(embed(tokens), hidden, inside + level, level_mask(clamped, n, level), cache)
            logits = head.logits(out[valid])
        logq = F.log_softmax(logits.float(), dim=-1)
        rows, at = valid.nonzero(as_tuple=True)
        label = teacher.rows(rows, inside[rows, at] + 1 + level)
        # KL rather than cross-entropy: the same gradient, and 0 means the head matches the target exactly.
        divergence = teacher.label_plogp[label] - (teacher.label_p[label] * logq).sum(-1)
        loss = divergence.mean()
        if confidence_weight:
            weight = position_weights(teacher.label_p[label], confidence_weight)
            total = total + decay**level * (weight * divergence).sum() / weight.sum()
        else:
            total = total + decay**level * loss
        weights += decay**level
        guess = vocab[logq.argmax(-1)]
        agree = guess == (vocab[teacher.label_best[label]] if teacher.argmax is None else teacher.argmax[label])
        stats.loss.append(float(loss.detach()))
        stats.agree.append(float(agree.float().mean()))
        stats.count.append(rows.numel())
        on_answer = answer[valid]
        stats.answer_count.append(int(on_answer.sum()))
        stats.answer_loss.append(float(divergence[on_answer].detach().mean()) if on_answer.any() else 0.0)
        stats.answer_agree.append(float(agree[on_answer].float().mean()) if on_answer.any() else 0.0)
        if teacher.sure is not None:
            on_sure = on_answer & teacher.sure[label]
            stats.sure_count.append(int(on_sure.sum()))
            stats.sure_agree.append(float(agree[on_sure].float().mean()) if on_sure.any() else 0.0)
        hidden = head.next_hidden(out)
    return (total / weights if weights else None), stats


def evaluate(target, head, batches: list[Batch], levels: int, prefix: int, bf16: bool) -> dict[str, float]:
    """Held-out loss and top-1 agreement at each level, averaged over positions, both over answer tokens
    alone, and agreement over the answer tokens where the target is sure (`sure_agree`)."""
    loss, agree, count = [0.0] * levels, [0.0] * levels, [0] * levels
    answer_loss, answer_agree, answer_count = [0.0] * levels, [0.0] * levels, [0] * levels
    sure_agree, sure_count = [0.0] * levels, [0] * levels
    head.eval()
    with torch.no_grad():
        for batch in batches:
            teacher = teach(target, head, batch, bf16, argmax=True)
            _, stats = unrolled_loss(head, target.model.get_input_embeddings(), batch, teacher, levels, 1.0,
                                     prefix, bf16)
            for level, n in enumerate(stats.count):
                loss[level] += stats.loss[level] * n
                agree[level] += stats.agree[level] * n
                count[level] += n
                answer_loss[level] += stats.answer_loss[level] * stats.answer_count[level]
                answer_agree[level] += stats.answer_agree[level] * stats.answer_count[level]
                answer_count[level] += stats.answer_count[level]
                sure_agree[level] += stats.sure_agree[level] * stats.sure_count[level]
                sure_count[level] += stats.sure_count[level]
    head.train()
    out = {}
    for level in range(levels):
        if count[level]:
            out[f"loss{level + 1}"] = loss[level] / count[level]
            out[f"agree{level + 1}"] = agree[level] / count[level]
        if answer_count[level]:
            out[f"answer_loss{level + 1}"] = answer_loss[level] / answer_count[level]
            out[f"answer_agree{level + 1}"] = answer_agree[level] / answer_count[level]
        if sure_count[level]:
            out[f"sure_agree{level + 1}"] = sure_agree[level] / sure_count[level]
    return out


def _texts(args, target, cache_dir: Path) -> list[Text]:
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
    from ddd.head import load_head

    if state is None and args.init:
        head = load_head(args.init, target)
        if head.kind != "eagle3":
            raise TrainError(f"--init {args.init} is an {head.kind} head; distillation trains EAGLE-3 heads.")
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
    from ddd.models import load_target

    target = load_target(args.model, device=args.device)
    texts = _texts(args, target, Path(args.ckpt_dir))
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
    from ddd.head import save_head

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
    if state is None:
        torch.manual_seed(args.seed)  # which positions each level scores: the same draws whole or resumed
    progress = restore(state, head, optimiser) if state is not None else Progress()
    pad = target.tokenizer.pad_token_id or 0
    batches = epoch_batches(progress, lambda epoch: make_batches(stage.train, args.batch_tokens,
                                                                 random.Random(args.seed * 7919 + epoch)))
    embed = target.model.get_input_embeddings()
    scored = args.eval_levels or args.levels

    def save(final: bool) -> None:
        write_checkpoint(args.ckpt_dir, head, optimiser, progress, draft_vocab=head.draft_to_target(),
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
                                    args.score_share, args.answers_only, args.confidence_weight)
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
    p.add_argument("--prompts", default="../shared/data/train_prompts.jsonl",
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
