"""`python -m ddd.train distill`: stages one and two of the draft-head recipe, on a tiny model and a tiny corpus:
the texts read, whole and resumed runs, and --init heads reshaped at the start of a stage. The loss itself is
tested in tests/test_unrolled.py."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from ddd.checkpoint import load_head
from ddd.train import answers, texts, cli as train
from ddd.train.common import Optimiser, TrainError
from ddd.train.resize import deepen
from tests.tiny import CORPUS, load_tiny


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    rows = [{"prompt": f"say {i}: {text[:12]}", "response": text} for i, text in enumerate(CORPUS)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def own_answers(tiny_llama_dir, tmp_path_factory):
    """The tiny target's own answers to twelve prompts, two of them on the held-out side of the split."""
    questions = [f"Question {i}: why is the sky blue?" for i in range(400)]
    held = [q for q in questions if texts.is_heldout(q)][:2]
    kept = [q for q in questions if not texts.is_heldout(q)][:10]
    directory = tmp_path_factory.mktemp("answers")
    prompts = directory / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": q}) + "\n" for i, q in enumerate(held + kept)))
    assert train.main(["data", "--model", str(tiny_llama_dir), "--prompts", str(prompts), "--out",
                       str(directory / "data"), "--max-new-tokens", "24", "--batch-size", "6", "--threads", "1"]) == 0
    return directory / "data"


def _distill(tiny_llama_dir, corpus, tmp_path, *extra: str) -> int:
    return _run(tiny_llama_dir, tmp_path, "--corpus", str(corpus), *extra)


def _stage_two(tiny_llama_dir, answers, tmp_path, *extra: str) -> int:
    return _run(tiny_llama_dir, tmp_path, "--corpus", "--answers", str(answers), *extra)


def _run(tiny_llama_dir, tmp_path, *extra: str) -> int:
    return train.main([
        "distill", "--model", str(tiny_llama_dir), "--prompts", "",
        "--out", str(tmp_path / "head"), "--ckpt-dir", str(tmp_path / "ckpt"), "--feature-layers", "0,1,2",
        "--batch-tokens", "256", "--levels", "3", "--draft-vocab", "64", "--lr", "3e-3", "--no-bf16",
        "--eval-texts", "4", "--threads", "1", *extra,
    ])


def test_the_written_head_is_an_eagle3_head_that_the_loader_accepts(tiny_llama_dir, corpus, tmp_path):
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--steps", "2", "--eval-every", "2") == 0
    head = load_head(tmp_path / "head", load_tiny(tiny_llama_dir))
    assert head.kind == "eagle3" and head.draft_vocab_size == 64 and head.aux_layers == (0, 1, 2)


def test_distillation_lowers_the_held_out_loss_at_every_level(tiny_llama_dir, corpus, tmp_path):
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--steps", "30", "--eval-every", "1") == 0
    history = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["history"]
    first, last = history[0], history[-1]
    assert (first["step"], last["step"]) == (1, 30)
    for level in (1, 2, 3):
        assert last[f"heldout_loss{level}"] < 0.9 * first[f"heldout_loss{level}"], (first, last)


def test_an_interrupted_run_resumes_to_the_same_head(tiny_llama_dir, corpus, tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert _distill(tiny_llama_dir, corpus, whole, "--steps", "8", "--eval-every", "100") == 0
    assert _distill(tiny_llama_dir, corpus, split, "--steps", "8", "--eval-every", "100", "--run-steps", "3") == 0
    assert torch.load(split / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["step"] == 3
    assert _distill(tiny_llama_dir, corpus, split, "--steps", "8", "--eval-every", "100", "--resume") == 0
    a, b = load_file(whole / "head" / "model.safetensors"), load_file(split / "head" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def test_corpus_texts_mark_where_the_answer_starts(llama, corpus):
    read = texts.read_texts([str(corpus)], None, llama.tokenizer, max_len=512)
    question = llama.tokenizer.apply_chat_template([{"role": "user", "content": "say 0: " + CORPUS[0][:12]}],
                                                   tokenize=False, add_generation_prompt=True)
    asked = llama.tokenizer(question, add_special_tokens=False)["input_ids"]
    assert read[0].ids[: len(asked)] == asked and read[0].start == len(asked) < len(read[0].ids)


def test_stage_two_reads_the_targets_own_answers_keyed_by_their_prompt(own_answers):
    samples, _ = answers.load_samples(own_answers)
    read = texts.read_answers([str(own_answers)], max_len=512)
    assert len(read) == len(samples) == 12
    assert sum(texts.is_heldout(t.key) for t in read) == 2
    for text, sample in zip(read, samples):
        assert text.ids == sample["ids"].tolist() and text.start == sample["prompt_len"]
        assert text.key.startswith("Question ")


def test_answers_whose_prompt_files_changed_are_refused(own_answers, tmp_path):
    moved = tmp_path / "data"
    shutil.copytree(own_answers, moved)
    meta = json.loads((moved / "meta.json").read_text())
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "0", "prompt": "another question"}) + "\n")
    (moved / "meta.json").write_text(json.dumps(meta | {"prompts": [str(prompts)]}))
    with pytest.raises(TrainError, match="changed since `data` ran"):
        texts.read_answers([str(moved)], max_len=512)


def test_stage_two_lowers_the_held_out_loss_on_the_targets_own_answers(tiny_llama_dir, own_answers, tmp_path):
    assert _stage_two(tiny_llama_dir, own_answers, tmp_path, "--steps", "30", "--eval-every", "1") == 0
    history = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["history"]
    first, last = history[0], history[-1]
    assert last["heldout_loss1"] < 0.9 * first["heldout_loss1"], (first, last)
    assert 0 <= last["heldout_answer_agree1"] <= 1


def test_stage_two_starts_from_the_head_before_it_and_resumes(tiny_llama_dir, corpus, own_answers, tmp_path):
    assert _distill(tiny_llama_dir, corpus, tmp_path / "one", "--steps", "4", "--eval-every", "100") == 0
    init = ("--init", str(tmp_path / "one" / "head"), "--steps", "6", "--eval-every", "100")
    assert _stage_two(tiny_llama_dir, own_answers, tmp_path / "whole", *init) == 0
    assert _stage_two(tiny_llama_dir, own_answers, tmp_path / "split", *init, "--run-steps", "2") == 0
    assert _stage_two(tiny_llama_dir, own_answers, tmp_path / "split", *init, "--resume") == 0
    history = torch.load(tmp_path / "whole" / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["history"]
    assert history[0]["step"] == 0 and "heldout_answer_agree1" in history[0]  # the starting point, measured
    a = load_file(tmp_path / "whole" / "head" / "model.safetensors")
    b = load_file(tmp_path / "split" / "head" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def test_a_head_deepened_at_the_start_of_a_stage_starts_where_its_init_stood(tiny_llama_dir, corpus, tmp_path):
    assert _distill(tiny_llama_dir, corpus, tmp_path / "one", "--steps", "4", "--eval-every", "100") == 0
    init = ("--init", str(tmp_path / "one" / "head"), "--eval-every", "100")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "same", *init, "--steps", "2") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path / "deep", *init, "--steps", "2", "--head-layers", "2") == 0
    same, deep = (torch.load(tmp_path / name / "ckpt" / "checkpoint.pt", weights_only=False) for name in ("same", "deep"))
    assert same["progress"]["history"][0] == deep["progress"]["history"][0]  # step 0: the same drafts
    assert deep["head_layers"] == 2
    assert _distill(tiny_llama_dir, corpus, tmp_path / "deep", *init, "--steps", "3", "--head-layers", "2", "--resume") == 0
    assert load_head(tmp_path / "deep" / "head", load_tiny(tiny_llama_dir)).config.num_hidden_layers == 2


def test_a_head_cut_at_the_start_of_a_stage_trains_with_fewer_layers(tiny_llama_dir, corpus, tmp_path):
    deep = ("--steps", "2", "--eval-every", "100", "--head-layers", "3")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "deep", *deep) == 0
    init = ("--init", str(tmp_path / "deep" / "head"), "--eval-every", "100", "--head-layers", "2")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "cut", *init, "--steps", "2") == 0
    assert torch.load(tmp_path / "cut" / "ckpt" / "checkpoint.pt", weights_only=False)["head_layers"] == 2
    assert load_head(tmp_path / "cut" / "head", load_tiny(tiny_llama_dir)).config.num_hidden_layers == 2


def test_a_wider_head_trains_from_the_start_and_resumes_at_its_width(tiny_llama_dir, corpus, tmp_path):
    target = load_tiny(tiny_llama_dir)
    wide = 2 * target.model.config.intermediate_size
    args = ("--steps", "3", "--eval-every", "100", "--head-mlp", str(wide))
    assert _distill(tiny_llama_dir, corpus, tmp_path / "wide", *args, "--run-steps", "2") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path / "wide", *args, "--resume") == 0
    state = torch.load(tmp_path / "wide" / "ckpt" / "checkpoint.pt", weights_only=False)
    assert state["head_mlp"] == wide and state["progress"]["step"] == 3
    assert load_head(tmp_path / "wide" / "head", target).config.intermediate_size == wide


def test_a_head_grown_to_a_larger_draft_vocabulary_trains_and_resumes_at_its_size(tiny_llama_dir, corpus, tmp_path,
                                                                                   capsys):
    assert _distill(tiny_llama_dir, corpus, tmp_path / "one", "--steps", "2", "--eval-every", "100") == 0
    target = load_tiny(tiny_llama_dir)
    before = load_head(tmp_path / "one" / "head", target).draft_to_target()
    init = ("--init", str(tmp_path / "one" / "head"), "--eval-every", "100", "--steps", "3", "--lm-lr", "3e-2")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "cut", *init, "--draft-vocab", "32") == 2
    assert "over 64 tokens: it can grow, not shrink to 32" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path / "grown", *init, "--draft-vocab", "96", "--run-steps", "2") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path / "grown", *init, "--draft-vocab", "96", "--resume") == 0
    state = torch.load(tmp_path / "grown" / "ckpt" / "checkpoint.pt", weights_only=False)
    assert state["draft_vocab"].numel() == 96 and state["progress"]["step"] == 3
    # the LM head, new rows and all, trains at its own peak rate (--lm-lr), the rest at --lr
    assert sorted(g["initial_lr"] for g in state["optimiser"]["optimizer"]["param_groups"]) == [3e-3, 3e-2]
    after = load_head(tmp_path / "grown" / "head", target).draft_to_target()
    assert after.numel() == 96 and bool(torch.isin(before, after).all())


def test_a_head_seeded_from_the_target_trains_and_resumes_with_its_trained_weights(tiny_llama_dir, corpus, tmp_path):
    args = ("--steps", "12", "--eval-every", "4", "--head-layers", "2", "--from-target")
    assert _distill(tiny_llama_dir, corpus, tmp_path, *args, "--run-steps", "4") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path, *args, "--resume") == 0
    state = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)
    first, last = state["progress"]["history"][0], state["progress"]["history"][-1]
    assert (first["step"], last["step"]) == (4, 12)
    assert last["heldout_loss1"] < first["heldout_loss1"], (first, last)
    target = load_tiny(tiny_llama_dir)
    stacked = load_head(tmp_path / "head", target).layers[0].mlp.down_proj.weight
    assert not torch.allclose(stacked, target.model.model.layers[1].mlp.down_proj.weight)  # the copied layers train too


def test_a_resumed_run_can_rewire_what_deeper_levels_read_and_keeps_its_weights(tiny_llama_dir, corpus, tmp_path):
    args = ("--steps", "8", "--eval-every", "4", "--head-layers", "2", "--from-target")
    assert _distill(tiny_llama_dir, corpus, tmp_path, *args, "--run-steps", "4") == 0
    before = load_head(tmp_path / "head", load_tiny(tiny_llama_dir))
    assert _distill(tiny_llama_dir, corpus, tmp_path, *args, "--resume", "--run-steps", "0", "--draft-hidden",
                    "first_layer", "--steps", "4") == 0  # nothing left to train: the head is only rewired
    state = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)
    assert state["draft_hidden"] == "first_layer" and state["progress"]["step"] == 4
    after = load_head(tmp_path / "head", load_tiny(tiny_llama_dir))
    assert after.draft_hidden == "first_layer"
    assert all(torch.equal(a, b) for a, b in zip(after.state_dict().values(), before.state_dict().values()))
    assert _distill(tiny_llama_dir, corpus, tmp_path, *args, "--resume") == 0  # the rewiring stays
    assert torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["draft_hidden"] == "first_layer"


def test_a_head_given_more_features_at_the_start_of_a_stage_starts_where_its_init_stood(tiny_llama_dir, corpus,
                                                                                       tmp_path):
    """The tiny target has hidden states 0 to 2: a head reading 0 and 2 is given 1, between them."""
    assert _distill(tiny_llama_dir, corpus, tmp_path / "one", "--feature-layers", "0,2", "--steps", "4",
                    "--eval-every", "100") == 0
    init = ("--init", str(tmp_path / "one" / "head"), "--steps", "2", "--eval-every", "100")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "same", *init, "--feature-layers", "0,2") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path / "wide", *init, "--feature-layers", "0,1,2") == 0
    same, wide = (torch.load(tmp_path / name / "ckpt" / "checkpoint.pt", weights_only=False) for name in ("same", "wide"))
    assert same["progress"]["history"][0] == wide["progress"]["history"][0]  # step 0: the same drafts
    head = load_head(tmp_path / "wide" / "head", load_tiny(tiny_llama_dir))
    size = head.config.hidden_size
    assert head.aux_layers == (0, 1, 2) and head.fc.weight[:, size : 2 * size].abs().sum() > 0  # trained from zero
    assert _distill(tiny_llama_dir, corpus, tmp_path / "bad", *init, "--feature-layers", "0,1") == 2


def test_bad_settings_are_refused_with_a_message(tiny_llama_dir, corpus, tmp_path, capsys):
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--levels", "0") == 2
    assert "--levels must be at least 1" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--resume") == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--answers", str(tmp_path)) == 2
    assert "not a directory written by `python -m ddd.train data`" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--label-temperature", "0") == 2
    assert "--label-temperature must be in [0.05, 1]" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--confidence-weight", "-1") == 2
    assert "--confidence-weight must be in [0, 4]" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--from-target") == 2
    assert "at least two decoder layers" in capsys.readouterr().err
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--from-target", "--init", str(tmp_path)) == 2
    assert "--from-target seeds a new head" in capsys.readouterr().err


def test_stage_two_on_answer_tokens_alone_lowers_the_held_out_loss(tiny_llama_dir, own_answers, tmp_path):
    assert _stage_two(tiny_llama_dir, own_answers, tmp_path, "--answers-only", "--steps", "30", "--eval-every", "1") == 0
    history = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["history"]
    first, last = history[0], history[-1]
    assert last["heldout_answer_loss1"] < 0.98 * first["heldout_answer_loss1"], (first, last)


def test_a_head_trained_on_one_level_is_still_scored_on_deeper_ones(tiny_llama_dir, corpus, tmp_path):
    assert _distill(tiny_llama_dir, corpus, tmp_path, "--levels", "1", "--eval-levels", "3", "--steps", "2",
                    "--eval-every", "2") == 0
    last = torch.load(tmp_path / "ckpt" / "checkpoint.pt", weights_only=False)["progress"]["history"][-1]
    assert {"heldout_agree1", "heldout_agree3"} <= last.keys() and "heldout_agree4" not in last


def test_added_layers_can_train_at_their_own_learning_rate(tiny_llama_dir, corpus, tmp_path):
    """`--layers-lr` gives the stock layers after the first their own peak rate; the schedule scales both."""
    assert _distill(tiny_llama_dir, corpus, tmp_path / "one", "--steps", "4", "--eval-every", "100") == 0
    head = deepen(load_head(tmp_path / "one" / "head", load_tiny(tiny_llama_dir)).float(), 2)
    optimiser = Optimiser(head, 1e-4, steps=10, warmup=1, clip=0.5, prefix_lr={"layers.": 1e-2})
    rates = {id(p): group["lr"] for group in optimiser.optimizer.param_groups for p in group["params"]}
    for name, p in head.named_parameters():
        assert rates[id(p)] == pytest.approx(1e-2 if name.startswith("layers.") else 1e-4), name
    assert optimiser.lr == pytest.approx(1e-4)
    added = head.layers[0].mlp.down_proj.weight
    before = added.detach().clone()
    optimiser.step((head.fc.weight.sum() + sum(p.sum() for p in head.layers.parameters())) ** 2)
    assert (added.detach() - before).abs().max() > 50 * optimiser.lr  # moved at its own rate, not the head's
    init = ("--init", str(tmp_path / "one" / "head"), "--eval-every", "100", "--head-layers", "2")
    assert _distill(tiny_llama_dir, corpus, tmp_path / "deep", *init, "--steps", "2", "--layers-lr", "1e-2") == 0
    assert _distill(tiny_llama_dir, corpus, tmp_path / "bad", *init, "--layers-lr", "-1") == 2
