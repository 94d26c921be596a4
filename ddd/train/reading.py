"""Reading prompts (`python -m ddd.train reading`): questions that hand the target a text to work from.

Summarising an article and answering from retrieved passages are the categories where the head drafts
worst (assets/head/README.md), and the training prompts barely ask for them. Answers there mostly copy from the
prompt, a skill the head can only learn from such answers. This builds both kinds from the corpus's own
answers, in the dev set's layouts: "Summarize: <text>", and passages followed by a question one of them
answers. The target's answers to them come from `python -m ddd.train data --prompts <this file>`.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

from .common import DEFAULT_CORPUS, TrainError, read_corpus

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def clip_text(text: str, limit: int) -> str:
    """The text's first sentences that fit in `limit` characters (cut at `limit` when none ends within it)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    ends = [m.start() for m in _SENTENCE_END.finditer(text) if m.start() <= limit]
    return text[: ends[-1] if ends else limit].strip()


def reading_prompts(rows: list[tuple[str, str]], count: int, max_chars: int, seed: int) -> list[dict]:
    """`count` prompts, half summaries and half passage questions, over distinct corpus rows.

    A passage question puts the passage that answers it among one or two that do not (answers to other
    questions), in a random place, as retrieval does."""
    rng = random.Random(seed)
    # Texts long enough to summarise; questions short enough to leave the passages room.
    long_enough = [row for row in rows if len(row[1]) >= max_chars // 3 and len(row[0]) <= max_chars // 4]
    if len(long_enough) < 3:
        raise TrainError(f"The corpus has {len(long_enough)} rows with answers of {max_chars // 3}+ characters and "
                         f"questions of at most {max_chars // 4}; at least 3 are needed.")
    order = rng.sample(range(len(long_enough)), len(long_enough))
    out = []
    for number in range(count):
        question, answer = long_enough[order[number % len(order)]]
        if number % 2 == 0:
            text = clip_text(answer, max_chars)
            out.append({"id": f"summarize/{number}", "category": "summarization", "prompt": f"Summarize: {text}"})
            continue
        others = [long_enough[i][1] for i in rng.sample(range(len(long_enough)), 3)
                  if long_enough[i][0] != question][: rng.randint(1, 2)]
        share = (max_chars - len(question)) // (len(others) + 1)  # at least max_chars / 4
        passages = [clip_text(p, share) for p in others]
        passages.insert(rng.randint(0, len(passages)), clip_text(answer, share))
        out.append({"id": f"passages/{number}", "category": "rag", "prompt": "\n".join(passages + [question])})
    return out


def cmd_reading(args) -> int:
    if args.count < 1 or args.max_chars < 200:
        raise TrainError("--count must be at least 1 and --max-chars at least 200.")
    rows = [(q.strip(), a.strip()) for path in args.corpus for q, a in read_corpus(path)]
    prompts = reading_prompts(rows, args.count, args.max_chars, args.seed)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts), encoding="utf-8")
    print(f"Wrote {len(prompts)} reading prompts to {path}.")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("reading", help="build summarising and passage-question prompts from the corpus's answers")
    p.add_argument("--out", required=True, help="the JSONL prompt file to write")
    p.add_argument("--corpus", nargs="+", default=[DEFAULT_CORPUS[0]],
                   help="corpus JSONL files whose answers become the texts (default: the AlpacaEval answers)")
    p.add_argument("--count", type=int, default=1600, help="how many prompts")
    p.add_argument("--max-chars", type=int, default=1100,
                   help="characters of text per prompt (about 4 per token: keep prompt and answer within "
                        "distill's --max-len)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_reading)
