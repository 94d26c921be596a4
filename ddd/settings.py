"""Settings of every decoding method, validated up front so that a bad value becomes a clear message."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# Precision modes for target and head (int8: CPU only, see ddd/precision.py).
PRECISIONS = ("float32", "bfloat16", "float16", "int8")

METHODS = ("plain", "eagle", "eagle2", "ddd")

# EAGLE-1's tree for 7B targets: each path lists top-k ranks from the root (25 draft nodes, depth 5).
EAGLE_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)


class SettingsError(ValueError):
    """An impossible or unknown setting; the message names it and the allowed values."""


@dataclass
class Sampling:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def validate(self) -> None:
        if not 0 <= self.temperature <= 10:
            raise SettingsError(f"temperature must be between 0 (greedy) and 10, not {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise SettingsError(f"top_p must be in (0, 1], not {self.top_p}.")
        if self.top_k < 0:
            raise SettingsError(f"top_k (sampling) must be 0 (off) or positive, not {self.top_k}.")


@dataclass
class PlainSettings:
    def validate(self, draft_vocab: int) -> None:
        pass


@dataclass
class EagleSettings:
    tree: tuple[tuple[int, ...], ...] = EAGLE_TREE

    def validate(self, draft_vocab: int) -> None:
        paths = {tuple(p) for p in self.tree}
        if not paths or any(len(p) == 0 for p in paths):
            raise SettingsError("eagle.tree must be a non-empty list of non-empty rank paths, e.g. [[0], [1], [0, 0]].")
        for path in paths:
            if path[:-1] and path[:-1] not in paths:
                raise SettingsError(f"eagle.tree path {list(path)} has no parent path {list(path[:-1])}.")
            if min(path) < 0 or max(path) >= draft_vocab:
                raise SettingsError(f"eagle.tree path {list(path)} uses a rank outside 0..{draft_vocab - 1}.")


@dataclass
class Eagle2Settings:
    top_k: int = 10
    draft_calls: int = 6  # counts the root call: a tree of depth 6
    total_tokens: int = 60  # verified tokens, root included

    def validate(self, draft_vocab: int) -> None:
        _check_tree_budget(self.top_k, self.total_tokens, draft_vocab)
        if not 1 <= self.draft_calls <= 64:
            raise SettingsError(f"draft_calls must be between 1 and 64, not {self.draft_calls}.")


@dataclass
class DDDSettings:
    top_k: int = 10
    max_draft_calls: int = 11
    check_steps: tuple[int, ...] | str = (5, 7, 9)  # or "all": check H after every draft call
    threshold: float = -0.3
    total_tokens: int = 60

    def checks(self) -> set[int]:
        if self.check_steps == "all":
            return set(range(1, self.max_draft_calls + 1))
        return set(self.check_steps)

    def validate(self, draft_vocab: int) -> None:
        _check_tree_budget(self.top_k, self.total_tokens, draft_vocab)
        if not 1 <= self.max_draft_calls <= 64:
            raise SettingsError(f"max_draft_calls must be between 1 and 64, not {self.max_draft_calls}.")
        if self.check_steps != "all":
            bad = [c for c in self.check_steps if not 1 <= c <= self.max_draft_calls]
            if bad or isinstance(self.check_steps, str):
                raise SettingsError(
                    f"check_steps must be 'all' or draft calls between 1 and max_draft_calls "
                    f"({self.max_draft_calls}); got {self.check_steps}."
                )
        if self.threshold > 0:
            raise SettingsError(
                f"threshold {self.threshold} is above 0, but the beam confidence H = log(total beam probability) "
                "is never above 0: every check would stop. Use a value <= 0 (paper: -0.3)."
            )


def _check_tree_budget(top_k: int, total_tokens: int, draft_vocab: int) -> None:
    if not 1 <= top_k <= draft_vocab:
        raise SettingsError(f"top_k must be between 1 and the draft vocabulary size ({draft_vocab}), not {top_k}.")
    if total_tokens < 2:
        raise SettingsError(f"total_tokens must be at least 2 (the root plus one draft token), not {total_tokens}.")


SETTINGS_CLASSES: dict[str, type] = {
    "plain": PlainSettings,
    "eagle": EagleSettings,
    "eagle2": Eagle2Settings,
    "ddd": DDDSettings,
}


def method_settings(method: str, **overrides: Any):
    """The settings object of `method` with `overrides` applied (unknown names are refused)."""
    if method not in SETTINGS_CLASSES:
        raise SettingsError(f"Unknown method {method!r}; choose one of {', '.join(METHODS)}.")
    cls = SETTINGS_CLASSES[method]
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        allowed = ", ".join(sorted(names)) or "none"
        raise SettingsError(f"Unknown setting(s) {', '.join(unknown)} for {method}; allowed: {allowed}.")
    return replace(cls(), **{k: _coerce(cls, k, v) for k, v in overrides.items()})


def _coerce(cls: type, name: str, value: Any) -> Any:
    """Accept command-line strings ("5,7,9", "-0.3", "all") as well as Python values."""
    default = getattr(cls(), name)
    if not isinstance(value, str) or isinstance(default, str):
        return tuple(tuple(p) for p in value) if name == "tree" else value
    try:
        if name == "check_steps":
            return "all" if value.strip() == "all" else tuple(int(v) for v in value.split(",") if v.strip())
        if name == "tree":
            import json

            return tuple(tuple(p) for p in json.loads(value))
        return type(default)(value)
    except ValueError as err:
        raise SettingsError(f"Setting {name}={value!r} is not a valid {type(default).__name__}.") from err


def settings_dict(settings: Any) -> dict[str, Any]:
    out = asdict(settings)
    return {k: ([list(p) for p in v] if k == "tree" else list(v) if isinstance(v, tuple) else v) for k, v in out.items()}
