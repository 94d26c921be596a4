"""`python -m ddd.bench.drift` end to end on the tiny model: what it reports of each precision mode against float32."""
import json

import pytest
import torch

from ddd.bench import drift
from ddd import encode_prompt
from tests.tiny import PROMPTS

QUESTIONS = [{"question_id": f"q{i}", "category": f"c{i % 2}", "turns": [prompt]}
             for i, prompt in enumerate(PROMPTS[:3])]


@pytest.fixture
def questions_file(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n")
    return path


def test_float32_agrees_with_itself_and_scores_its_answers_by_their_own_log_probability(tiny_llama_dir, llama):
    questions = [{"question_id": q["question_id"], "prompt": q["turns"][0]} for q in QUESTIONS]
    (mode,) = drift.measure(questions, ["float32"], max_new_tokens=8, model=str(tiny_llama_dir))
    summary = mode.summary(mode)
    assert summary["identical_answers"] == summary["agreeing_prefix"] == 1.0
    for question, answer in zip(questions, mode.answers):
        assert answer.agree == len(answer.token_ids) == 8
        # Greedy answers pick each token's largest log-probability: their mean, one forward per token.
        ids = encode_prompt(llama, question["prompt"])
        best = []
        with torch.no_grad():
            for token in answer.token_ids:
                logprobs = llama.model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
                best.append(float(logprobs.max()))
                ids.append(token)
        assert answer.loglik == pytest.approx(sum(best) / len(best), abs=1e-4)


def test_the_command_always_measures_float32_and_writes_every_answer(tiny_llama_dir, questions_file, tmp_path, capsys):
    out = tmp_path / "drift.json"
    assert drift.main(["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--precisions", "int8",
                       "--max-new-tokens", "8", "--out", str(out)]) == 0
    modes = json.loads(out.read_text())
    assert [m["precision"] for m in modes] == ["float32", "int8"]
    reference = {a["question_id"]: a["token_ids"] for a in modes[0]["answers"]}
    assert sorted(reference) == [q["question_id"] for q in QUESTIONS]
    for answer in modes[1]["answers"]:
        assert answer["agree"] == drift.common_prefix(answer["token_ids"], reference[answer["question_id"]])
        assert answer["loglik"] < 0
    table = capsys.readouterr().out
    assert "| float32 | 100% | 100% |" in table and "\n| int8 | " in table


def test_an_unknown_precision_is_refused_before_any_model_loads(questions_file, capsys):
    with pytest.raises(SystemExit) as stop:
        drift.main(["--questions", str(questions_file), "--precisions", "float8"])
    assert stop.value.code == 2 and "unknown precision 'float8'" in capsys.readouterr().err
