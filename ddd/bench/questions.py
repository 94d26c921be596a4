"""Benchmark questions: MT-bench style JSONL files (question_id, category, turns), picked round robin over
categories. The benchmark and the drift measurement read them the same way."""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from ddd.jsonl import read_jsonl


class QuestionError(ValueError):
    """A question file that cannot be used; the message says which line and why."""


def load_questions(path: str | Path) -> list[dict[str, Any]]:
    """Questions of an MT-bench style JSONL file (question_id, category, turns); the first turn is used."""
    path = Path(path)
    if not path.is_file():
        raise QuestionError(f"Question file {path} not found." if not path.exists() else f"{path} is not a file.")
    questions = []
    for number, item in read_jsonl(path, QuestionError):
        if not isinstance(item, dict):
            raise QuestionError(f"{path} line {number} is a JSON {type(item).__name__}, not an object with "
                             "question_id, category and turns.")
        turns = item.get("turns")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise QuestionError(f"{path} line {number} needs `turns`: a list whose first item is the question text.")
        if "question_id" not in item:
            raise QuestionError(f"{path} line {number} has no `question_id`.")
        questions.append({"question_id": str(item["question_id"]), "category": str(item.get("category") or "none"),
                          "prompt": turns[0]})
    if not questions:
        raise QuestionError(f"{path} holds no questions.")
    ids = [q["question_id"] for q in questions]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise QuestionError(f"{path} repeats question_id {dup!r}; ids must be unique.")
    return questions


def select_questions(questions: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """Round-robin over categories (in order of first appearance): any prefix covers as many categories as
    it can, and consecutive questions change category, so slow drift of the machine is spread out."""
    groups: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for q in questions:
        groups.setdefault(q["category"], []).append(q)
    picked: list[dict[str, Any]] = []
    depth = 0
    while len(picked) < len(questions):
        for items in groups.values():
            if depth < len(items):
                picked.append(items[depth])
        depth += 1
    return picked[:limit] if limit else picked
