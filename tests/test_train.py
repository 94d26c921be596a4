"""End-to-end tests of `python -m ddd.train` (data + fit) on the tiny random Llama (tests/tiny.py)."""
from __future__ import annotations

import json

import pytest
import torch

from ddd.checkpoint import load_head
from ddd.head import new_head
from ddd.train import answers, decoding, eagle_loss, fit, cli as train, common as training


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": f"Question {i}: " + "why is the sky blue? " * (1 + i % 4)} for i in range(12)]
    rows.append({"id": "long", "prompt": "x" * 500})  # longer than --max-prompt-tokens: must be cut
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _data_args(model, prompts, out, *extra):
    return ["data", "--model", str(model), "--prompts", str(prompts), "--out", str(out),
            "--max-new-tokens", "10", "--batch-size", "4", "--shard-size", "5", "--max-prompt-tokens", "96",
            "--sampled-fraction", "0.3", *extra]


@pytest.fixture(scope="module")
def six_dir(tiny_llama_dir, prompts, tmp_path_factory):
    """The target's answers to six of the prompts, with their features, as `data` stores them."""
    data_dir = tmp_path_factory.mktemp("six")
    assert train.main(_data_args(tiny_llama_dir, prompts, data_dir, "--limit", "6")) == 0
    return data_dir


@pytest.fixture(scope="module")
def six_samples(six_dir):
    return answers.load_samples(six_dir)[0]


def test_data_then_fit_end_to_end(tiny_llama_dir, llama, prompts, tmp_path, capsys):
    data_dir = tmp_path / "data"
    assert train.main(_data_args(tiny_llama_dir, prompts, data_dir)) == 0
    shards = sorted(data_dir.glob("shard_*.pt"))
    assert len(shards) == 3  # 13 prompts, 5 per shard
    samples, meta = answers.load_samples(data_dir)
    assert len(samples) == 13 and meta["hidden_size"] == 64
    assert any(s["sampled"] for s in samples) and not all(s["sampled"] for s in samples)
    for sample in samples:
        assert sample["prompt_len"] <= 96
        assert sample["features"].dtype == torch.float16
        assert sample["features"].shape == (len(sample["ids"]) - 1, 64)
    # Each row of a left-padded batch is what the target says about that text alone: its features agree
    # with a plain forward, a greedy answer is the greedy continuation (the prompts come in four lengths,
    # so the batches mix them).
    assert len({s["prompt_len"] for s in samples}) >= 4
    for sample in samples:
        with torch.no_grad():
            plain = llama.model.model(input_ids=sample["ids"][None, :-1].long()).last_hidden_state[0]
        assert torch.allclose(plain, sample["features"].float(), atol=2e-2)
        if sample["sampled"]:
            continue
        prompt = sample["ids"][: sample["prompt_len"]][None].long()
        with torch.no_grad():
            again = llama.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10,
                                         do_sample=False, pad_token_id=llama.tokenizer.pad_token_id)[0]
        answer = sample["ids"][sample["prompt_len"]:].tolist()
        assert again[sample["prompt_len"]:][: len(answer)].tolist() == answer

    # Rerunning skips the finished shards.
    before = [p.stat().st_mtime_ns for p in shards]
    capsys.readouterr()
    assert train.main(_data_args(tiny_llama_dir, prompts, data_dir)) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in shards] == before

    head_dir, ckpt = tmp_path / "head", tmp_path / "ckpt"
    fit_args = ["fit", "--data", str(data_dir), "--out", str(head_dir), "--ckpt-dir", str(ckpt), "--draft-vocab", "40",
           "--batch-tokens", "400", "--lr", "3e-3", "--eval-every", "20", "--ckpt-every", "20", "--heldout", "0.2"]
    assert train.main(fit_args + ["--steps", "40"]) == 0
    history = torch.load(ckpt / "checkpoint.pt", weights_only=False)["progress"]["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert "heldout_acc" in history[-1] and "heldout_acc_level2" in history[-1]
    out = capsys.readouterr().out
    assert "coverage" in out

    head = load_head(head_dir, llama)
    assert head.draft_vocab_size == 40
    assert llama.tokenizer.eos_token_id in head.draft_to_target().tolist()
    config = json.loads((head_dir / "config.json").read_text())
    assert config["training"]["steps"] == 40 and config["training"]["final"]

    # Resume continues from the checkpoint and keeps the history.
    assert train.main(fit_args + ["--steps", "60", "--resume"]) == 0
    resumed = torch.load(ckpt / "checkpoint.pt", weights_only=False)
    assert resumed["progress"]["step"] == 60 and len(resumed["progress"]["history"]) == 3
    assert "resumed from" in capsys.readouterr().out


@pytest.mark.parametrize("soft", [False, True], ids=["next-token", "target-distribution"])
def test_loss_goes_down_with_the_trainer(llama, six_samples, soft):
    head = new_head(llama).train().requires_grad_(True)
    trainer = eagle_loss.HeadTrainer(llama, head, soft=soft)
    batch = fit.collate(six_samples, max_len=512)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss, parts = trainer.loss(batch, noise=False)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = float(loss.detach()) if first is None else first
    assert float(loss.detach()) < 0.7 * first  # soft targets: the CE term cannot fall below their entropy
    assert parts["acc"] > 0.5
    # Target embeddings and LM head stay frozen: the trainer never hands them to the optimizer.
    assert not llama.model.lm_head.weight.requires_grad


def test_collate_mask_covers_answer_positions_only():
    sample = {"ids": torch.arange(10, dtype=torch.int32), "prompt_len": 4,
              "features": torch.zeros(9, 8, dtype=torch.float16)}
    batch = fit.collate([sample], max_len=64)
    # Outputs h_t (t = 0..7) predict x_{t+2}; answer tokens are x_4..x_9, so t = 2..7.
    assert batch["mask"][0].nonzero().flatten().tolist() == [2, 3, 4, 5, 6, 7]


def test_collate_with_a_prefix_learns_from_question_tokens_too():
    sample = {"ids": torch.arange(10, dtype=torch.int32), "prompt_len": 4,
              "features": torch.zeros(9, 8, dtype=torch.float16)}
    batch = fit.collate([sample], max_len=64, prefix=3)
    # Every token after the 3 shared ones: x_3..x_9 are predicted by h_1..h_7.
    assert batch["mask"][0].nonzero().flatten().tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_shared_prefix_is_the_prompts_common_start():
    samples = [{"ids": torch.tensor(ids), "prompt_len": n} for ids, n in
               [([5, 6, 7, 8, 9], 4), ([5, 6, 7, 1, 2, 3], 5), ([5, 6, 7, 8], 3)]]
    assert fit.shared_prefix(samples) == 3


def test_level_two_sees_what_a_second_draft_call_sees(llama):
    """Level two at position t reads the head's own guess for f_t and attends to the real-feature context
    before t: the same output as running the head on that context and then the one guessed position."""
    from transformers import DynamicCache

    head = new_head(llama).eval()
    trainer = eagle_loss.HeadTrainer(llama, head)
    torch.manual_seed(0)
    width, hidden = 7, llama.hidden_size
    embeds, feats, guesses = (torch.randn(1, width, hidden) for _ in range(3))
    positions = torch.arange(width)[None]
    cache = DynamicCache(config=head.config)
    with torch.no_grad():
        head(embeds=embeds, features=feats, position_ids=positions, cache=cache)
        deep = trainer.deeper(embeds, guesses, torch.tensor([1, 4, 6]), cache)
        for column, out in zip([1, 4, 6], deep[0]):
            inputs = feats[:, : column + 1].clone()
            inputs[:, column] = guesses[:, column - 1]
            alone = head(embeds=embeds[:, : column + 1], features=inputs, position_ids=positions[:, : column + 1])
            torch.testing.assert_close(out, alone[0, -1], rtol=1e-4, atol=1e-5)


def test_level_two_training_lowers_the_deeper_loss(llama, six_samples):
    head = new_head(llama).train().requires_grad_(True)
    trainer = eagle_loss.HeadTrainer(llama, head, level2=0.5)
    batch = fit.collate(six_samples, max_len=512)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    before = trainer.evaluate([batch])["acc_self"]
    for _ in range(30):
        loss, parts = trainer.loss(batch, noise=False)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert parts["tokens2"] > 0
    assert trainer.evaluate([batch])["acc_self"] > before + 0.3


def test_bad_arguments(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert train.main(["data", "--prompts", str(missing), "--out", str(tmp_path / "d")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    assert train.main(["data", "--prompts", str(bad), "--out", str(tmp_path / "d")]) == 2
    assert "no `prompt`" in capsys.readouterr().err
    assert train.main(["data", "--prompts", str(bad), "--out", str(tmp_path / "d"), "--sampled-fraction", "2"]) == 2
    assert "--sampled-fraction" in capsys.readouterr().err
    assert train.main(["fit", "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "h")]) == 2
    assert "meta.json is missing" in capsys.readouterr().err
    assert train.main(["fit", "--data", str(tmp_path), "--out", str(tmp_path / "h"), "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["fit", "--data", str(tmp_path)])  # --out is required: argparse exits
    with pytest.raises(SystemExit):
        train.main(["frobnicate"])


def test_prompts_may_hold_unicode_line_separators(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"id": "a", "prompt": "one\\u2028two\u2028three"}\n{"id": "b", "prompt": "x"}\n', encoding="utf-8")
    assert [row["id"] for row in training.read_prompts(path)] == ["a", "b"]


def test_soft_cross_entropy_is_smallest_at_the_target_distribution():
    """With soft targets the CE term compares the draft's logits with the target's distribution read from the
    true next feature: a head that predicts that feature exactly has the lowest possible CE (the entropy)."""
    torch.manual_seed(0)
    hidden, vocab = 8, 12


    trainer = eagle_loss.HeadTrainer.__new__(eagle_loss.HeadTrainer)
    trainer.soft, trainer.ce_weight, trainer.rows = True, 1.0, None
    trainer.lm_weight = torch.randn(vocab, hidden)
    want = torch.randn(5, hidden)
    exact = trainer.soft_ce(want @ trainer.lm_weight.T, want)
    assert exact < trainer.soft_ce((want + 0.5 * torch.randn(5, hidden)) @ trainer.lm_weight.T, want)
    p = torch.softmax(want @ trainer.lm_weight.T, -1)
    assert torch.isclose(exact, -(p * p.log()).sum(-1).mean(), atol=1e-5)


def test_the_data_stage_reads_several_prompt_files_and_keeps_a_repeated_prompt_once(tmp_path):
    from ddd.train.common import read_prompt_files

    arena, corpus = tmp_path / "arena.jsonl", tmp_path / "corpus.jsonl"
    arena.write_text('{"id": "a1", "prompt": "Sum 2 and 3."}\n{"id": "a2", "prompt": "Name a colour."}\n')
    corpus.write_text('{"prompt": "Sum 2 and 3.", "response": "5"}\n{"prompt": "Translate: chat", "response": "cat"}\n')
    rows = read_prompt_files([str(arena), str(corpus)])
    assert [r["prompt"] for r in rows] == ["Sum 2 and 3.", "Name a colour.", "Translate: chat"]
    assert [r["id"] for r in rows] == ["arena/a1", "arena/a2", "corpus/2"]


def test_data_can_skip_the_prompts_another_directory_answered(tiny_llama_dir, prompts, six_dir, tmp_path, capsys):
    assert train.main(_data_args(tiny_llama_dir, prompts, tmp_path, "--skip", str(six_dir))) == 0
    before = {prompt for _, prompt in answers.answered_samples(six_dir)}
    after = {prompt for _, prompt in answers.answered_samples(tmp_path)}
    assert len(before) == 6 and len(after) == 7 and not before & after
    assert train.main(_data_args(tiny_llama_dir, prompts, tmp_path, "--skip", str(six_dir))) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert train.main(_data_args(tiny_llama_dir, prompts, tmp_path)) == 2
    assert "different settings (skip)" in capsys.readouterr().err


def test_data_can_skip_only_the_prompts_another_directory_answered_greedily(tiny_llama_dir, prompts, six_dir, tmp_path):
    greedy = {prompt for sample, prompt in answers.answered_samples(six_dir) if not sample["sampled"]}
    sampled = {prompt for sample, prompt in answers.answered_samples(six_dir) if sample["sampled"]}
    assert greedy and sampled
    assert train.main(_data_args(tiny_llama_dir, prompts, tmp_path, "--skip-greedy", str(six_dir))) == 0
    after = {prompt for _, prompt in answers.answered_samples(tmp_path)}
    assert len(after) == 13 - len(greedy) and not greedy & after and sampled <= after


def test_a_data_directory_moves_with_the_files_it_names(tiny_llama_dir, prompts, tmp_path, capsys):
    import shutil

    old = tmp_path / "old"
    (old / "data").mkdir(parents=True)
    shutil.copy(prompts, old / "data" / "prompts.jsonl")
    first, rest = old / "first", old / "rest"
    assert train.main(_data_args(tiny_llama_dir, old / "data" / "prompts.jsonl", first, "--limit", "6")) == 0
    assert train.main(_data_args(tiny_llama_dir, old / "data" / "prompts.jsonl", rest, "--skip", str(first))) == 0
    meta = json.loads((rest / "meta.json").read_text())
    assert meta["prompts"] == ["../data/prompts.jsonl"] and meta["skip"] == ["../first"]
    new = tmp_path / "new"
    shutil.move(old, new)  # another checkout: the same layout under another path
    assert len(answers.answered_samples(new / "rest")) == 7
    assert train.main(_data_args(tiny_llama_dir, new / "data" / "prompts.jsonl", new / "rest",
                                 "--skip", str(new / "first"))) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_a_data_directory_with_absolute_paths_still_loads(six_dir, prompts, tmp_path):
    import shutil

    older = tmp_path / "older"
    shutil.copytree(six_dir, older)
    meta = json.loads((older / "meta.json").read_text())
    meta["prompts"] = [str(prompts.resolve())]  # as directories made before paths were stored relative
    (older / "meta.json").write_text(json.dumps(meta))
    assert [s["id"] for s, _ in answers.answered_samples(older)] == [s["id"] for s, _ in answers.answered_samples(six_dir)]


def test_bf16_data_stores_token_ids_only_and_fit_refuses_it(tiny_llama_dir, prompts, tmp_path, capsys):
    data_dir = tmp_path / "bf16"
    assert train.main(_data_args(tiny_llama_dir, prompts, data_dir, "--limit", "4", "--bf16")) == 0
    samples, meta = answers.load_samples(data_dir)
    assert meta["bf16"] is True and len(samples) == 4
    assert all(s["features"] is None and len(s["ids"]) > s["prompt_len"] for s in samples)
    assert train.main(_data_args(tiny_llama_dir, prompts, data_dir, "--limit", "4")) == 2
    assert "different settings (bf16)" in capsys.readouterr().err
    assert train.main(["fit", "--data", str(data_dir), "--out", str(tmp_path / "head")]) == 2
    assert "token ids only" in capsys.readouterr().err


def test_a_row_whose_answer_ends_takes_the_next_prompt(llama):
    """Two rows, five prompts of different lengths: each answer is the prompt's own greedy continuation,
    whichever row it was decoded in and whatever that row held before."""
    import types

    lengths = (3, 11, 6, 17, 8)
    items = [decoding.Item(i, f"p{i}", [(7 * i + j) % 90 + 5 for j in range(n)], False, False)
             for i, n in enumerate(lengths)]
    args = types.SimpleNamespace(max_new_tokens=6, temperature=0.7, bf16=False, batch_size=2)
    done = list(decoding.decode_answers(llama, items, args, torch.Generator().manual_seed(0)))
    assert sorted(s["index"] for s in done) == list(range(5))
    for sample in done:
        prompt = torch.tensor([items[sample["index"]].ids])
        with torch.no_grad():
            again = llama.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                         do_sample=False, pad_token_id=llama.tokenizer.pad_token_id)[0]
        answer = sample["ids"][sample["prompt_len"]:].tolist()
        assert again[prompt.shape[1]:][: len(answer)].tolist() == answer
        assert sample["features"].shape[0] == len(sample["ids"]) - 1
