"""How far each precision mode drifts from float32, next to its speed.

`python -m ddd.bench.drift --questions ../shared/data/dev_questions.jsonl --limit 40 --precisions float32,bfloat16,int8`

For every question, plain greedy decoding runs in each mode. Against float32's answer it reports: how many
answers are identical, how many leading tokens agree (as a share of the answer), and float32's own mean
log-likelihood per token of each mode's answer (teacher-forced). A mode whose answers float32 finds less
likely has moved away from the model float32 defines. Speed is plain decoding's median tokens/s per mode.
Speculative decoding does not change any of this: in every mode it reproduces that mode's plain decoding.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .questions import QuestionError, load_questions, select_questions
from ddd.engine import encode_prompt, generate
from ddd.models import ModelLoadError, Target, load_target
from ddd.settings import PRECISIONS


@dataclass
class Answer:
    question_id: str
    token_ids: list[int]
    tokens_per_s: float
    loglik: float = 0.0  # float32's mean log-probability per answer token
    agree: int = 0  # leading tokens equal to float32's answer


@dataclass
class ModeDrift:
    precision: str
    answers: list[Answer] = field(default_factory=list)

    def summary(self, reference: "ModeDrift") -> dict:
        ref = {a.question_id: a for a in reference.answers}
        same = [a.token_ids == ref[a.question_id].token_ids for a in self.answers]
        return {
            "precision": self.precision,
            "questions": len(self.answers),
            "identical_answers": sum(same) / len(same),
            "agreeing_prefix": statistics.mean(a.agree / max(len(ref[a.question_id].token_ids), 1) for a in self.answers),
            "float32_loglik": statistics.mean(a.loglik for a in self.answers),
            "tokens_per_s": statistics.median(a.tokens_per_s for a in self.answers),
        }


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def mean_loglik(target: Target, prompt_ids: list[int], answer: list[int]) -> float:
    """Mean log-probability per token that `target` gives `answer` after `prompt_ids`."""
    if not answer:
        return 0.0
    ids = torch.tensor([prompt_ids + answer], device=target.device)
    with torch.inference_mode():
        logits = target.model(ids).logits[0, len(prompt_ids) - 1: -1].float()
    logprobs = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt_ids):, None])
    return float(logprobs.mean())


def decode_all(target: Target, questions: list[dict], max_new_tokens: int) -> ModeDrift:
    mode = ModeDrift(target.precision)
    for q in questions:
        run = generate(target, None, q["prompt"], "plain", max_new_tokens=max_new_tokens, record=False)
        list(run)
        mode.answers.append(Answer(q["question_id"], run.token_ids, run.trace.summary["tokens_per_s"]))
        print(f"  {target.precision}: {len(mode.answers)}/{len(questions)}", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return mode


def measure(questions: list[dict], precisions: list[str], max_new_tokens: int, model: str | None = None,
            device: str = "cpu") -> list[ModeDrift]:
    """Decode every question in every mode; score each answer against float32 (loaded first, kept)."""
    reference_target = load_target(model, dtype="float32", device=device)
    prompts = {q["question_id"]: encode_prompt(reference_target, q["prompt"]) for q in questions}
    modes = []
    for precision in precisions:
        target = reference_target if precision == "float32" else load_target(model, dtype=precision, device=device)
        modes.append(decode_all(target, questions, max_new_tokens))
    reference = next(m for m in modes if m.precision == "float32")
    ref = {a.question_id: a.token_ids for a in reference.answers}
    for mode in modes:
        for a in mode.answers:
            a.agree = common_prefix(a.token_ids, ref[a.question_id])
            a.loglik = mean_loglik(reference_target, prompts[a.question_id], a.token_ids)
    return modes


def table(modes: list[ModeDrift]) -> str:
    reference = next(m for m in modes if m.precision == "float32")
    lines = ["| precision | answers identical to float32 | leading tokens agreeing | float32 log-lik / token | "
             "plain tokens/s |", "|---|---|---|---|---|"]
    for mode in modes:
        s = mode.summary(reference)
        lines.append(f"| {s['precision']} | {s['identical_answers']:.0%} | {s['agreeing_prefix']:.0%} | "
                     f"{s['float32_loglik']:.3f} | {s['tokens_per_s']:.2f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddd.bench.drift", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", required=True, help="MT-bench style JSONL (first turns are used)")
    parser.add_argument("--limit", type=int, default=None, help="N questions, round-robin over categories")
    parser.add_argument("--precisions", default="float32,bfloat16,int8",
                        help=f"comma-separated, from {','.join(PRECISIONS)}; float32 is always included")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", default=None, help="local directory or hub id (default: the embedded model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="write the per-answer results as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        parser.exit(2, f"error: unknown precision {unknown[0]!r}; choose from {', '.join(PRECISIONS)}\n")
    if "float32" not in precisions:
        precisions.insert(0, "float32")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        questions = select_questions(load_questions(args.questions), args.limit)
        modes = measure(questions, precisions, args.max_new_tokens, args.model, args.device)
    except (QuestionError, ModelLoadError) as err:
        parser.exit(2, f"error: {err}\n")
    print(table(modes))
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(m) for m in modes], indent=1))
        print(f"per-answer results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
