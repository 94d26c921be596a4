"""The training-time-test loss that distillation trains EAGLE-3 heads with, and its held-out evaluation.

The head trains with training-time test (docs/training.md): level j of the unrolled head reads its own
output of level j-1 and attends to the real context plus its own chain, exactly as a node j+1 deep in a
draft tree does. For tokens x_0..x_{T-1}, target features a_i (after reading x_i) and target distributions
p_i (of x_{i+1}), level j at index i reads (embed(x_{i+1+j}), level j-1's output at i), sits at position
i+j, and is scored against p_{i+1+j}.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from .texts import Batch

SURE = 0.9  # the target's probability of its first choice above which evaluation also counts a position as sure


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
                  confidence_weight: float = 0.0,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor | None, LevelStats]:
    """The training-time-test loss over `levels` draft levels: KL divergence from the target's distribution,
    level j weighted decay**j. With `score_share` < 1 each level scores a random share of its positions:
    the draft LM head over them is most of a step's cost, and neighbouring positions teach much the same.
    With `answers_only` only answer tokens are scored, and every level after the first runs over the answers
    alone: a draft tree guesses answers, and the question is the user's. The loss is None where nothing is
    scored (a batch of prompts cut before their answers, with `answers_only`). With `confidence_weight`
    above 0, each position's divergence counts in proportion to p_max**confidence_weight, p_max being the
    target's probability of its own first choice there (`position_weights`); the losses in the returned stats
    stay unweighted, so that runs compare. The scored share is drawn from `generator` (a CPU generator, so
    that a run draws the same positions on any device), which a `score_share` below 1 needs."""
    if score_share < 1 and generator is None:
        raise ValueError("A score_share below 1 draws the positions each level scores: pass a generator.")
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
            valid &= torch.rand(valid.shape, generator=generator).to(valid.device) < score_share
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
