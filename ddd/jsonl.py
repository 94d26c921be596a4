"""Reading JSON-lines files (prompts, questions) with messages that point at the bad line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; a bad file raises `error` naming the line."""
    try:
        # split on "\n" only: str.splitlines() would also break inside strings holding U+2028 and kin
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise error(f"{path} is not UTF-8 text: {err}.") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{path} line {number} is not valid JSON ({err.msg}, column {err.colno}).") from None
