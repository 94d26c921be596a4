"""Reading a file a user gives: within size limits, plain or gzipped, UTF-8 JSON; every failure a RaceFileError
that says what is wrong with the file. components/runfile.py checks what it holds."""
from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .race import RaceFileError
from .tokens import excerpt

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class FileLimits:
    """What one run file may hold: the app's own largest race (512 new tokens, the widest tree the settings
    allow; docs/app.md, Limits) with room to spare, while a crafted file's memory and checking time stay
    bounded."""

    file_bytes: int = 24 * 2**20  # as stored: gzipped or plain
    json_bytes: int = 64 * 2**20  # after decompression (parsed, about ten times that in memory)
    steps: int = 4096  # per run
    nodes_per_step: int = 40_000
    nodes: int = 1_000_000  # in the whole file
    long_text: int = 200_000  # prompt and answer (characters)
    token_text: int = 2_000  # one token's text
    step_text: int = 16_000  # the text one step added
    label: int = 2_000  # title, note, model and head names, stop reason
    list_items: int = 4_096  # token ids of a step, confidences, checks, accepted path
    summary_keys: int = 64


LIMITS = FileLimits()


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def read_json(path: Path, limits: FileLimits = LIMITS) -> Any:
    """The JSON value in `path` (plain or gzipped), read within the size limits."""
    name = path.name
    if not is_text(str(path)):  # a lone surrogate ("\ud800.json") names no file any system can open
        raise RaceFileError(f"{excerpt(name)} is not a file name this server can open: it holds an invalid character "
                            "(a lone surrogate). Rename the file and load it again.")
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise RaceFileError(f"{name} is not a file.")
        if size > limits.file_bytes:
            raise RaceFileError(f"{name} is {size / 2**20:.1f} MB; run files may be at most {_size(limits.file_bytes)} "
                                "(gzip a larger one: the app reads .json.gz files too).")
        with path.open("rb") as f:
            compressed = f.read(2) == GZIP_MAGIC
        if compressed:
            with gzip.open(path, "rb") as f:
                raw = f.read(limits.json_bytes + 1)  # read at most one byte past the limit: a gzip bomb stops here
        else:
            raw = path.read_bytes()
    except FileNotFoundError as err:
        raise RaceFileError(f"No recorded run at {path}.") from err
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise RaceFileError(f"{name} looks gzipped but cannot be decompressed ({err}).") from err
    except OSError as err:
        raise RaceFileError(f"{name} cannot be read ({err.strerror or err}).") from err
    if len(raw) > limits.json_bytes:
        raise RaceFileError(f"{name} decompresses to more than {_size(limits.json_bytes)} of JSON; "
                            f"run files may hold at most {_size(limits.json_bytes)}.")
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise RaceFileError(f"{name} is not a readable JSON file: it is not UTF-8 text ({err.reason} at byte "
                            f"{err.start}).") from err
    except RecursionError as err:
        raise RaceFileError(f"{name} is not a recorded run: its JSON is nested too deeply.") from err
    except ValueError as err:  # JSONDecodeError, and integers longer than Python's digit limit
        raise RaceFileError(f"{name} is not a readable JSON file: {err}.") from err


def is_text(value: str) -> bool:
    """Whether `value` is text UTF-8 can carry (no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
