"""The app's inputs checked before anything runs: every bad value becomes one message that names it.

The UI's widgets keep most values in range, but the same functions answer raw API calls, where a slider can
send NaN, a seed 2**70 and a prompt a lone surrogate. The settings are parsed and checked by the engine's own
declarations (ddd.settings), within the app's ranges; this module only puts the panel's labels on its messages.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddd.settings import (MAX_NEW_TOKENS, METHOD_DECLARATIONS, SEED, TEMPERATURE, TOP_P, Sampling, Setting,
                          SettingsError, parse_settings)

from .race import COLUMN_METHODS, METHOD_LABELS, RACE_METHODS
from .tokens import excerpt

MAX_PROMPT_CHARS = 20_000  # checked before tokenizing: tokenizing megabytes is itself slow
DEFAULT_SPEED = 1.0
REPLAY_SPEED = Setting("replay speed", "float", DEFAULT_SPEED, 0.1, 16, "replay speed",
                       "how much faster than measured the race plays back")

# The panel's settings: first what every column shares, then the drafting columns' tree settings, each once
# (beam_width and total_tokens feed every tree, so that all verify the same number of tokens).
RUN_SETTINGS = (MAX_NEW_TOKENS, TEMPERATURE, TOP_P, SEED)
TREE_COLUMNS = tuple(m for m in COLUMN_METHODS if METHOD_DECLARATIONS[m])
TREE_SETTINGS = tuple(dict.fromkeys(s for m in TREE_COLUMNS for s in METHOD_DECLARATIONS[m]))
TREE_NAMES = [s.name for s in TREE_SETTINGS]
COST_SWITCH = "race_cost"  # the panel's checkbox that adds the cost rule's column
COST_SWITCH_LABEL = "Race the cost rule too"


def _feeds(setting: Setting) -> list[str]:
    """The columns a setting is named after: those of every race that take it. The cost column's own settings
    are named after it; what it shares, its switch says, so the panel reads as before while it is off."""
    columns = [m for m in TREE_COLUMNS if setting in METHOD_DECLARATIONS[m]]
    return [m for m in columns if m in RACE_METHODS] or columns


# The columns' names head the label, set off by a colon: a label may be a phrase ("keep the costs fixed"), which
# the bare names in front of it would turn into a garble.
LABELS = {s.name: " / ".join(METHOD_LABELS[m] for m in _feeds(s)) + ": " + s.label for s in TREE_SETTINGS}


def label(setting: Setting) -> str:
    """The setting's name on the page (a tree setting's says which columns it feeds)."""
    return LABELS.get(setting.name, setting.label)


class InputError(ValueError):
    """A value the app cannot run with; the message says which value and what is allowed."""


def input_error(err: SettingsError) -> InputError:
    """The engine's message about a setting, with the panel's label for it."""
    return InputError(f"{label(err.setting)} {err.problem}." if err.setting is not None else str(err))


def checked(setting: Setting, value: Any) -> Any:
    """`value` parsed by the engine's declaration of `setting`, within the app's range."""
    try:
        return setting.parse(value, ui=True)
    except SettingsError as err:
        raise input_error(err) from None


@dataclass(frozen=True)
class PromptLimit:
    """How many prompt tokens one race may read on a device. On a CPU a prefill's cost grows with the square of
    the prompt and a race reads the prompt once per method, so the limit keeps reading below the decoding at the
    default length; a GPU reads thousands of tokens in a fraction of that (docs/app.md, Limits)."""

    prompt_tokens: int
    why: str


PROMPT_LIMITS = {
    "cpu": PromptLimit(512, "on a CPU each method of the race reads the prompt again, and a 1,000-token prompt "
                            "takes tens of seconds to read once"),
    "cuda": PromptLimit(4096, "longer prompts would make a race outlast the time one visitor gets"),
}


@dataclass(frozen=True)
class RaceInputs:
    """The Run button's inputs once checked; the numbers have their proper types."""

    prompt: str
    max_new_tokens: int
    sampling: Sampling
    precision: str
    tree: dict[str, Any]  # the drafting columns' settings by their declared names (TREE_NAMES)
    methods: tuple[str, ...] = RACE_METHODS  # the race's columns


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


def tree_settings(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The panel's tree settings, each parsed within the app's range, then checked together per column (DDD's
    checks within its max draft calls); the values by name. The cost column's are checked while it is off too:
    its widgets hold them all the same, and a preset fills them."""
    values = {}
    for setting in TREE_SETTINGS:
        raw = tree[setting.name]
        if isinstance(raw, str):
            raw = text(raw, label(setting))  # a lone surrogate gets the prompt's message, not a quoted one
        values[setting.name] = checked(setting, raw)
    try:
        for method in TREE_COLUMNS:
            parse_settings(method, {s.name: values[s.name] for s in METHOD_DECLARATIONS[method]}, ui=True).validate()
    except SettingsError as err:
        raise input_error(err) from None
    return values


def cost_switch(value: Any) -> tuple[str, ...]:
    """The race's columns, from the cost column's checkbox (None, as an API call may send, is off)."""
    if value is None:
        return RACE_METHODS
    if not isinstance(value, bool):
        raise InputError(f"{COST_SWITCH_LABEL} must be true or false, not {excerpt(value)}.")
    return COLUMN_METHODS if value else RACE_METHODS


def race_inputs(prompt: Any, max_new_tokens: Any, temperature: Any, top_p: Any, seed: Any, precision: Any,
                precisions: list[str], race_cost: Any = False, **tree: Any) -> RaceInputs:
    """Every Run input checked, in the order the panel shows them; the first problem raises InputError.
    `race_cost`: whether the cost rule races too; `tree`: the tree settings by their declared names (TREE_NAMES)."""
    prompt = text(prompt, "The prompt").strip()
    if not prompt:
        raise InputError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"The prompt is {len(prompt):,} characters long; the limit here is {MAX_PROMPT_CHARS:,} "
                         "characters: shorten the prompt.")
    if sorted(tree) != sorted(TREE_NAMES):
        raise TypeError(f"race_inputs takes the tree settings {', '.join(TREE_NAMES)}, not {', '.join(tree)}")
    run = {s.name: checked(s, v) for s, v in zip(RUN_SETTINGS, (max_new_tokens, temperature, top_p, seed))}
    if precision not in precisions:
        raise InputError(f"precision must be one of {', '.join(precisions)}, not {excerpt(precision)}.")
    methods = cost_switch(race_cost)
    return RaceInputs(prompt=prompt, max_new_tokens=run.pop("max_new_tokens"), sampling=Sampling(**run),
                      precision=precision, tree=tree_settings(tree), methods=methods)


def replay_speed(value: Any) -> float:
    """'2×' (the radio's labels), or a number from the API, as a factor in 0.1..16."""
    if isinstance(value, str):
        value = value.strip().rstrip("×x").strip()
    return checked(REPLAY_SPEED, DEFAULT_SPEED if value is None or value == "" else value)


def step_index(value: Any, last: int) -> int:
    """The step slider's value as a step 0..last; what is not a number goes to step 0."""
    try:
        index = float(value or 0)
    except (TypeError, ValueError):
        return 0
    if not math.isfinite(index):
        return 0
    return min(max(int(index), 0), max(last, 0))
