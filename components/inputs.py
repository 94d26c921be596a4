"""The app's inputs checked before anything runs: every bad value becomes one message that names it.

The UI's widgets keep most values in range, but the same functions answer raw API calls, where a slider can
send NaN, a seed 2**70 and a prompt a lone surrogate. Each check here says what was given and what is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .tokens import excerpt

MAX_PROMPT_CHARS = 20_000  # checked before tokenizing: tokenizing megabytes is itself slow
SEED_LIMIT = 2**63  # torch seeds are 64-bit; the top half would wrap to negative numbers
DEFAULT_SPEED = 1.0


class InputError(ValueError):
    """A value the app cannot run with; the message says which value and what is allowed."""


@dataclass(frozen=True)
class Range:
    """The values a numeric input may take (the widget's own range, so the API cannot go past the UI)."""

    label: str
    low: float
    high: float
    whole: bool = True


# The Settings panel's ranges, down to 1 new token and top-p 0.01 for API callers (both harmless).
RANGES = {
    "max_new_tokens": Range("max new tokens", 1, 512),
    "temperature": Range("temperature", 0, 2, whole=False),
    "top_p": Range("top-p", 0.01, 1, whole=False),
    "e_top_k": Range("top-k", 1, 32),
    "e_calls": Range("EAGLE-2 draft calls", 1, 16),
    "e_total": Range("total tokens verified", 2, 128),
    "d_calls": Range("DDD max draft calls", 1, 24),
}


@dataclass(frozen=True)
class TokenBudget:
    """How many prompt tokens one race may read on a device. On a CPU a prefill's cost grows with the square of
    the prompt and a race reads the prompt three times, so the budget keeps reading below the decoding at the
    default length; a GPU reads thousands of tokens in a fraction of that (README: the app, Limits)."""

    prompt_tokens: int
    why: str


BUDGETS = {
    "cpu": TokenBudget(512, "on a CPU each of the three methods reads the prompt again, and a 1,000-token prompt "
                            "takes tens of seconds to read once"),
    "cuda": TokenBudget(4096, "longer prompts would make a race outlast the time one visitor gets"),
}


@dataclass(frozen=True)
class RaceInputs:
    """The Run button's inputs once checked; the numbers have their proper types."""

    prompt: str
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    precision: str
    e_top_k: int
    e_calls: int
    e_total: int
    d_calls: int
    d_checks: str  # "all" or draft calls such as "5,7,9"
    d_threshold: float


def number(value: Any, name: str, rng: Range | None = None) -> float | int:
    """`value` as a finite number (an int when `rng.whole`) within `rng`."""
    label = rng.label if rng else name
    if isinstance(value, bool) or value is None or value == "":
        raise InputError(f"{label} is empty: type a number.")
    try:
        number_value = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{label} must be a number, not {excerpt(value)}.") from None
    if not math.isfinite(number_value):
        raise InputError(f"{label} must be a finite number, not {value}.")
    if rng is None:
        return number_value
    if rng.whole:
        if number_value != int(number_value):
            raise InputError(f"{label} must be a whole number, not {value}.")
        number_value = int(number_value)
    if not rng.low <= number_value <= rng.high:
        raise InputError(f"{label} must be between {rng.low:g} and {rng.high:g}, not {number_value:g}.")
    return number_value


def text(value: Any, label: str) -> str:
    """`value` as text a tokenizer and a browser can take (no lone surrogates)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{label} must be text, not {type(value).__name__}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InputError(f"{label} holds an invalid character at position {err.start} (a lone surrogate, "
                         "half of an emoji's code): retype or paste it again.") from err
    return value


def seed(value: Any) -> int:
    """A whole number in 0..2**63 - 1 (exact: a float would round a large seed to another one)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"seed must be a whole number from 0 to {SEED_LIMIT - 1}, not {excerpt(value)}.")
    if not 0 <= value < SEED_LIMIT:
        raise InputError(f"seed must be a whole number from 0 to {SEED_LIMIT - 1} (2^63 - 1), not {value}.")
    return value


def check_steps(value: Any, max_calls: int) -> str:
    """DDD's "check after calls": 'all' or a list of draft calls in 1..max_calls, normalised to '5,7,9'."""
    raw = text(value, "DDD check after calls").strip()
    if not raw:
        raise InputError("DDD check after calls is empty: type the draft calls after which DDD checks its "
                         "confidence, such as 5,7,9, or all.")
    if raw.lower() == "all":
        return "all"
    pieces = [p.strip() for p in raw.split(",")]
    if not any(pieces):
        raise InputError(f"DDD check after calls ({excerpt(raw)}) lists no draft calls: type numbers such as "
                         "5,7,9, or all.")
    calls = []
    for piece in pieces:
        if not piece:
            continue
        if not piece.isdigit():
            raise InputError(f"DDD check after calls: {excerpt(piece)} is not a draft call number; type numbers "
                             "such as 5,7,9, or all.")
        call = int(piece)
        if not 1 <= call <= max_calls:
            raise InputError(f"DDD check after calls: {call} is outside 1..{max_calls} (DDD max draft calls).")
        calls.append(call)
    return ",".join(str(c) for c in sorted(set(calls)))


def threshold(value: Any) -> float:
    value = number(value, "DDD threshold on H")
    if value > 0:
        raise InputError(f"DDD threshold on H must be 0 or below, not {value:g}: H is the log of the beam's "
                         "probability and never above 0, so every check would stop.")
    return value


def race_inputs(prompt: Any, max_new_tokens: Any, temperature: Any, top_p: Any, seed_value: Any, precision: Any,
                e_top_k: Any, e_calls: Any, e_total: Any, d_calls: Any, d_checks: Any, d_threshold: Any,
                precisions: list[str]) -> RaceInputs:
    """Every Run input checked, in the order the panel shows them; the first problem raises InputError."""
    prompt = text(prompt, "The prompt").strip()
    if not prompt:
        raise InputError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"The prompt is {len(prompt):,} characters long; the limit here is {MAX_PROMPT_CHARS:,} "
                         "characters: shorten the prompt.")
    values = {name: number(value, name, RANGES[name]) for name, value in (
        ("max_new_tokens", max_new_tokens), ("temperature", temperature), ("top_p", top_p), ("e_top_k", e_top_k),
        ("e_calls", e_calls), ("e_total", e_total), ("d_calls", d_calls))}
    if precision not in precisions:
        raise InputError(f"precision must be one of {', '.join(precisions)}, not {excerpt(precision)}.")
    return RaceInputs(prompt=prompt, seed=seed(seed_value), precision=precision,
                      d_checks=check_steps(d_checks, values["d_calls"]), d_threshold=threshold(d_threshold),
                      **values)


def replay_speed(value: Any) -> float:
    """'2×' (the radio's labels), or a number from the API, as a factor in 0.1..16."""
    raw = str(value if value is not None else "").strip().rstrip("×x").strip()
    return number(raw or DEFAULT_SPEED, "replay speed", Range("replay speed", 0.1, 16, whole=False))


def step_index(value: Any, last: int) -> int:
    """The step slider's value as a step 0..last; what is not a number goes to step 0."""
    try:
        index = float(value or 0)
    except (TypeError, ValueError):
        return 0
    if not math.isfinite(index):
        return 0
    return min(max(int(index), 0), max(last, 0))
