"""`python -m ddd.train reading`: summarising and passage-question prompts built from corpus answers."""
from __future__ import annotations

import json

from ddd.train import reading, cli as train

ROWS = [(f"Question number {i}?", f"Answer {i} begins here. It goes on for a while. " * (i % 3 + 2)) for i in range(12)]


def test_a_text_is_clipped_at_the_last_sentence_end_that_fits():
    assert reading.clip_text("One. Two two. Three three three.", 16) == "One. Two two."
    assert reading.clip_text("Short.", 100) == "Short."


def test_half_the_prompts_ask_for_a_summary_of_one_answer():
    prompts = reading.reading_prompts(ROWS, 8, 200, seed=1)
    summaries = [p for p in prompts if p["category"] == "summarization"]
    assert len(summaries) == 4
    for p in summaries:
        text = p["prompt"].removeprefix("Summarize: ")
        assert p["prompt"].startswith("Summarize: ") and len(text) <= 200
        assert any(answer.startswith(text) for _, answer in ROWS)


def test_a_passage_question_ends_with_the_question_and_holds_the_passage_that_answers_it():
    prompts = [p for p in reading.reading_prompts(ROWS, 8, 200, seed=1) if p["category"] == "rag"]
    assert len(prompts) == 4
    for p in prompts:
        *passages, question = p["prompt"].split("\n")
        answer = dict(ROWS)[question]
        assert 2 <= len(passages) <= 3
        assert sum(answer.startswith(passage) for passage in passages) >= 1
        assert len(p["prompt"]) <= 200 + len(passages)


def test_the_command_writes_a_prompt_file_the_data_stage_reads(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"prompt": q, "response": a}) + "\n" for q, a in ROWS))
    out = tmp_path / "reading.jsonl"
    assert train.main(["reading", "--corpus", str(corpus), "--out", str(out), "--count", "6", "--max-chars", "200"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all({"id", "category", "prompt"} <= row.keys() for row in rows)


def test_a_corpus_without_long_answers_is_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"prompt": "q", "response": "too short"}) + "\n")
    assert train.main(["reading", "--corpus", str(corpus), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert "at least 3 are needed" in capsys.readouterr().err
