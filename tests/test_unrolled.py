"""Distillation's training-time-test loss (ddd/train/unrolled.py) on the tiny model: the target's labels,
each level's attention mask, inputs and scored positions, answers-only scoring, and confidence weights."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from ddd import new_eagle3_head
from ddd.train import texts, unrolled


def test_sharpened_labels_keep_the_targets_choice_and_give_it_more_weight(llama):
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    batch = texts.Batch(torch.tensor([[5, 9, 17, 23, 31, 40, 8]]), torch.tensor([7]), torch.tensor([0]))
    plain = unrolled.teach(llama, head, batch, bf16=False)
    sharp = unrolled.teach(llama, head, batch, bf16=False, temperature=0.5)
    assert sharp.label_best.equal(plain.label_best)
    assert (sharp.label_p.max(-1).values > plain.label_p.max(-1).values).all()
    torch.testing.assert_close(sharp.label_p, torch.softmax(2 * plain.label_p.log(), dim=-1))


def test_training_time_test_level_masks_show_each_level_its_own_chain_only():
    mask = unrolled.level_mask(torch.arange(3)[None], 3, 2)[0, 0]
    assert mask.shape == (3, 9)
    assert mask[:, :3].equal(torch.ones(3, 3, dtype=torch.bool).tril())
    assert mask[:, 3:6].equal(torch.eye(3, dtype=torch.bool)) and mask[:, 6:].equal(torch.eye(3, dtype=torch.bool))


@pytest.mark.parametrize("depth, draft_hidden", [(1, "output"), (2, "first_layer")])
def test_level_one_of_the_unrolled_loss_is_the_head_run_on_its_own_guess(llama, depth, draft_hidden):
    """Level 1 at index i must equal a draft-tree node: the head run over the context up to i, then over
    (the next token, what its output at i hands on) one position further, attending to that context and
    itself."""
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3, depth=depth, draft_hidden=draft_hidden).float()
    ids = torch.tensor([[5, 9, 17, 23, 31, 40, 8]])
    batch = texts.Batch(ids, torch.tensor([7]), torch.tensor([0]))
    teacher = unrolled.teach(llama, head, batch, bf16=False)
    embed = llama.model.get_input_embeddings()
    captured = []
    original = head.logits
    head.logits = lambda out: captured.append(out) or original(out)
    unrolled.unrolled_loss(head, embed, batch, teacher, levels=2, decay=1.0, prefix=0, bf16=False)
    level1 = captured[1]  # scored positions of level 1, in order: indices 0..4
    i = 2
    cache = DynamicCache(config=head.config)
    context = head(embed(ids[:, 1 : i + 2]), head.fuse(teacher.aux[:, : i + 1]), torch.arange(i + 1)[None], None, cache)
    node = head(embed(ids[:, i + 2 : i + 3]), head.next_hidden(context[:, -1:]), torch.tensor([[i + 1]]), None, cache)
    torch.testing.assert_close(level1[i], node[0, 0], rtol=1e-4, atol=1e-5)


def _two_rows_with_captured_logits(llama):
    """A new head, a batch of two rows of different lengths, its teacher, and the list the head's logits go
    to at each level."""
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    ids = torch.tensor([[5, 9, 17, 23, 31, 40, 8], [7, 11, 13, 19, 0, 0, 0]])
    batch = texts.Batch(ids, torch.tensor([7, 4]), torch.tensor([0, 0]))
    teacher = unrolled.teach(llama, head, batch, bf16=False)
    captured = []
    original = head.logits
    head.logits = lambda out: captured.append(original(out)) or captured[-1]
    return head, batch, teacher, captured


def test_each_level_scores_the_kl_divergence_from_the_targets_distribution_at_its_own_positions(llama):
    """Level j at index i predicts the target's distribution at i + 1 + j, for every index whose label lies
    inside its row (rows of different lengths: padding is never scored)."""
    head, batch, teacher, captured = _two_rows_with_captured_logits(llama)
    logp = teacher.label_p.log()
    _, stats = unrolled.unrolled_loss(head, llama.model.get_input_embeddings(), batch, teacher, levels=2, decay=1.0,
                                     prefix=0, bf16=False)
    for level, logits in enumerate(captured):
        labels = torch.cat([logp[teacher.label_row[row, 1 + level : length]]
                            for row, length in enumerate(batch.lengths.tolist())])
        logq = torch.log_softmax(logits, dim=-1)
        assert stats.count[level] == labels.shape[0] == 6 + 3 - 2 * level
        expected = (labels.exp() * (labels - logq)).sum(-1).mean()
        assert abs(stats.loss[level] - float(expected.detach())) < 1e-5


def test_evaluation_also_scores_agreement_where_the_target_is_sure_of_its_first_choice(llama, monkeypatch):
    """`sure_agree` counts the answer tokens whose label gives the target's first choice at least SURE of its
    whole vocabulary's probability; moving the bar moves which positions count."""
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    batch = texts.Batch(torch.tensor([[5, 9, 17, 23, 31, 40, 8]]), torch.tensor([7]), torch.tensor([0]))
    embed = llama.model.get_input_embeddings()
    for bar, expected in ((0.0, "all"), (1.01, "none")):
        monkeypatch.setattr(unrolled, "SURE", bar)
        teacher = unrolled.teach(llama, head, batch, bf16=False, argmax=True)
        _, stats = unrolled.unrolled_loss(head, embed, batch, teacher, levels=1, decay=1.0, prefix=0, bf16=False)
        assert stats.sure_count[0] == (stats.answer_count[0] if expected == "all" else 0)
        assert stats.sure_agree[0] == (stats.answer_agree[0] if expected == "all" else 0.0)
    train_teacher = unrolled.teach(llama, head, batch, bf16=False)
    _, train_stats = unrolled.unrolled_loss(head, embed, batch, train_teacher, levels=1, decay=1.0, prefix=0,
                                           bf16=False)
    assert train_stats.sure_count == []  # training batches carry no whole-vocabulary labels


def test_answers_only_scores_the_answer_tokens_exactly_as_the_whole_texts_pass_does(llama):
    """Levels 2 and deeper then run over each row's answer alone, rows whose answers start at different
    places and end at different lengths; every answer position must come out as it does when every position
    is run."""
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    ids = torch.tensor([[5, 9, 17, 23, 31, 40, 8, 12, 14, 3], [7, 11, 13, 19, 21, 25, 27, 0, 0, 0]])
    batch = texts.Batch(ids, torch.tensor([10, 7]), torch.tensor([7, 3]))
    teacher = unrolled.teach(llama, head, batch, bf16=False)
    embed = llama.model.get_input_embeddings()
    original = head.logits

    def scored(answers_only):
        captured = []
        head.logits = lambda out: captured.append(original(out)) or captured[-1]
        _, stats = unrolled.unrolled_loss(head, embed, batch, teacher, levels=3, decay=1.0, prefix=0, bf16=False,
                                         answers_only=answers_only)
        return captured, stats

    whole, whole_stats = scored(False)
    answers, answer_stats = scored(True)
    for level in range(3):
        on_answer = torch.cat([torch.arange(1 + level, length) >= start
                               for length, start in zip(batch.lengths.tolist(), batch.starts.tolist())])
        torch.testing.assert_close(answers[level], whole[level][on_answer], rtol=1e-4, atol=1e-5)
        assert answer_stats.count[level] == whole_stats.answer_count[level] == int(on_answer.sum())
        assert answer_stats.agree[level] == whole_stats.answer_agree[level]
        assert abs(answer_stats.loss[level] - whole_stats.answer_loss[level]) < 1e-5


def test_a_batch_with_no_answer_token_has_nothing_to_score_with_answers_only(llama):
    """Prompts cut to the length limit before their answer begin: such a batch is skipped, not a step."""
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    batch = texts.Batch(torch.tensor([[5, 9, 17, 23, 31, 40, 8]]), torch.tensor([7]), torch.tensor([7]))
    teacher = unrolled.teach(llama, head, batch, bf16=False)
    loss, stats = unrolled.unrolled_loss(head, llama.model.get_input_embeddings(), batch, teacher, levels=2,
                                        decay=1.0, prefix=0, bf16=False, answers_only=True)
    assert loss is None and stats.count == []


def test_a_teacher_for_answers_alone_labels_them_only_and_scores_them_as_the_whole_texts_teacher(llama):
    head = new_eagle3_head(llama, layers=(0, 1, 2), seed=3).float()
    ids = torch.tensor([[5, 9, 17, 23, 31, 40, 8, 12, 14, 3], [7, 11, 13, 19, 21, 25, 27, 0, 0, 0]])
    batch = texts.Batch(ids, torch.tensor([10, 7]), torch.tensor([7, 3]))
    whole = unrolled.teach(llama, head, batch, bf16=False)
    answer = unrolled.teach(llama, head, batch, bf16=False, answers_only=True)
    assert whole.label_p.shape[0] == 17 and answer.label_p.shape[0] == 3 + 4  # padding is never labelled
    embed = llama.model.get_input_embeddings()

    def loss(teacher, answers_only):
        return unrolled.unrolled_loss(head, embed, batch, teacher, levels=3, decay=0.8, prefix=0, bf16=False,
                                     answers_only=answers_only)

    (a, a_stats), (w, w_stats) = loss(answer, True), loss(whole, True)
    assert abs(float(a) - float(w)) < 1e-6 and a_stats.agree == w_stats.agree
    with pytest.raises(ValueError, match="no label"):
        loss(answer, False)  # the whole-text pass scores prompt positions, which this teacher left out


def test_confidence_weights_favour_positions_where_the_target_is_sure():
    label_p = torch.tensor([[0.9, 0.05, 0.05], [0.4, 0.3, 0.3]])
    torch.testing.assert_close(unrolled.position_weights(label_p, 1.0), torch.tensor([0.9, 0.4]))
    torch.testing.assert_close(unrolled.position_weights(label_p, 2.0), torch.tensor([0.81, 0.16]))
    torch.testing.assert_close(unrolled.position_weights(label_p, 0.0), torch.ones(2))


def test_a_confidence_weighted_loss_averages_each_level_by_the_targets_top_probability(llama):
    """The loss that trains is the weighted mean of the divergences; the one the stats report is the plain
    mean, the same as an unweighted run's."""
    head, batch, teacher, captured = _two_rows_with_captured_logits(llama)
    embed = llama.model.get_input_embeddings()
    weighted, weighted_stats = unrolled.unrolled_loss(head, embed, batch, teacher, levels=1, decay=1.0, prefix=0,
                                                     bf16=False, confidence_weight=2.0)
    plain, plain_stats = unrolled.unrolled_loss(head, embed, batch, teacher, levels=1, decay=1.0, prefix=0,
                                               bf16=False)
    rows = torch.cat([teacher.label_row[row, 1:length] for row, length in enumerate(batch.lengths.tolist())])
    p = teacher.label_p[rows]
    divergence = teacher.label_plogp[rows] - (p * torch.log_softmax(captured[0], dim=-1)).sum(-1)
    weight = p.max(-1).values ** 2
    assert abs(float(weighted) - float((weight * divergence).sum() / weight.sum())) < 1e-5
    assert abs(float(plain) - float(divergence.mean())) < 1e-5
    assert abs(float(weighted) - float(plain)) > 1e-4
    assert weighted_stats.loss == plain_stats.loss
