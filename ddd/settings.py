"""Every decoding setting, declared once: its name, type, allowed range, default, label and help.

The methods' settings classes, their checks, the command lines' flags and their help, the app's widgets and
checks, its presets and the run-file checks all derive from these declarations, so a rule lives in one place.
Values are parsed here too, from Python values or text alike: whatever comes in (text with other digits than
0-9, a 5,000-digit number, NaN, a list) ends as a SettingsError that names the setting and what it allows.
"""
from __future__ import annotations

import argparse
import json
import math
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import Any, ClassVar

from .values import DECIMAL, EXACT_FLOAT, FLAGS, MAX_DIGITS, WHOLE, SettingsError, kind_of, number_text, shown

# Precision modes for target and head (int8: CPU only, see ddd/precision.py).
PRECISIONS = ("float32", "bfloat16", "float16", "int8")

METHODS = ("plain", "eagle", "eagle2", "ddd", "cost")

# EAGLE-1's tree for 7B targets: each path lists draft ranks from the root (25 draft nodes, depth 5).
EAGLE_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)

@dataclass(frozen=True)
class Setting:
    """One setting. `low`/`high` bound the value (a draft call of check_steps, a rank of tree); `ui_low`,
    `ui_high` and `ui_default` are the app's where it deliberately allows less than the engine (a race there
    must stay watchable), and `step` its slider's step (None: a number box)."""

    name: str
    kind: str  # "int", "float", "bool", "calls" ("all" or draft calls), "tree" (rank paths)
    default: Any
    low: float
    high: float
    label: str
    help: str
    ui_low: float | None = None
    ui_high: float | None = None
    ui_default: Any = None
    step: float | None = None
    above_low: bool = False  # the engine's low itself is not allowed (the app's ui_low is)
    why_high: str = ""  # said when a value is above the range
    old_names: tuple[str, ...] = ()  # what older run files call it

    def bounds(self, ui: bool = False) -> tuple[float, float]:
        if not ui:
            return self.low, self.high
        return (self.low if self.ui_low is None else self.ui_low), (self.high if self.ui_high is None else self.ui_high)

    def start(self, ui: bool = False) -> Any:
        return self.ui_default if ui and self.ui_default is not None else self.default

    def allowed(self, ui: bool = False) -> str:
        if self.kind == "bool":
            return "true or false"
        low, high = self.bounds(ui)
        whole = self.kind != "float"
        lo, hi = number_text(low, whole), number_text(high, whole)
        if self.kind == "calls":
            return f"'all' or draft calls from {lo} to {hi}, such as 5,7,9"
        if self.kind == "tree":
            return f"a list of rank paths such as [[0], [1], [0, 0]], with ranks from {lo} to {hi}"
        if self._open_low(ui):
            return f"a number above {lo} and at most {hi}"
        return f"a whole number from {lo} to {hi}" if whole else f"a number from {lo} to {hi}"

    def _open_low(self, ui: bool) -> bool:
        return self.above_low and not (ui and self.ui_low is not None)

    def error(self, problem: str) -> SettingsError:
        return SettingsError(f"{self.name} {problem}.", self, problem)

    def parse(self, value: Any, ui: bool = False) -> Any:
        """`value` (a Python value or text, as a command line or a form gives it) in this setting's type and
        range (the app's range when `ui`); SettingsError otherwise."""
        if self.kind == "calls":
            return self._calls(value, ui)
        if self.kind == "tree":
            return self._tree(value, ui)
        if self.kind == "bool":
            return self._flag(value)
        return self._number(value, ui)

    def ui_value(self, value: Any) -> Any:
        """A value as the app's widget shows it (draft calls as text: "5,7,9")."""
        if self.kind == "calls" and not isinstance(value, str):
            return ",".join(str(c) for c in value)
        return value

    def to_json(self, value: Any) -> Any:
        if self.kind == "tree":
            return [list(p) for p in value]
        return list(value) if isinstance(value, tuple) else value

    def describe(self) -> str:
        default = self.ui_value(self.default) if self.kind != "tree" else "EAGLE-1's 25-node tree"
        return f"{self.help} ({self.allowed()}; default {default})"

    # -- parsing ---------------------------------------------------------------------------------------

    def _number(self, value: Any, ui: bool, item: bool = False) -> int | float:
        """A finite number in range: the value, or (`item`) one whole number of its list."""
        low, high = self.bounds(ui)
        what = self.allowed(ui)
        whole = item or self.kind != "float"
        if not item and (value is None or (isinstance(value, str) and not value.strip())):
            raise self.error(f"is empty: type {what}")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or value == "":
            raise self.error(f"must be {what}, not {kind_of(value)}")
        if isinstance(value, str):
            value = self._from_text(value.strip(), what, whole)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.error(f"must be {what}, not {shown(value)}")
            if whole and not value.is_integer():
                raise self.error(f"must be {what}, not {shown(value)}: a whole number")
            if whole and abs(value) >= EXACT_FLOAT:
                raise self.error(f"must be {what}, not {value:g}: a number this large must be written out exactly")
        if not ((low < value) if self._open_low(ui) else (low <= value)) or not value <= high:
            why = f": {self.why_high}" if self.why_high and value > high else ""
            raise self.error(f"must be {what}, not {shown(value)}{why}")
        return int(value) if whole else float(value)

    def _from_text(self, text: str, what: str, whole: bool) -> int | float:
        if WHOLE.fullmatch(text):
            if len(text.lstrip("+-")) > MAX_DIGITS:
                raise self.error(f"must be {what}, not {shown(text)}")
            return int(text)
        if DECIMAL.fullmatch(text):
            number = float(text)
            if not math.isfinite(number):
                raise self.error(f"must be {what}, not {shown(text)}")
            return number
        other_digits = any(not c.isascii() and (c.isdigit() or c.isnumeric()) for c in text)
        hint = " (only the digits 0-9 are read)" if other_digits else ""
        raise self.error(f"must be {what}, not {shown(text)}{hint}")

    def _flag(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in FLAGS:
            return FLAGS[value.strip().lower()]
        raise self.error(f"must be {self.allowed()}, not {shown(value)}")

    def _calls(self, value: Any, ui: bool) -> str | tuple[int, ...]:
        what = self.allowed(ui)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise self.error(f"is empty: type {what}")
        if isinstance(value, str):
            if value.strip().lower() == "all":
                return "all"
            items: list[Any] = [p for p in (p.strip() for p in value.split(",")) if p]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise self.error(f"must be {what}, not {kind_of(value)}")
        if not items:
            raise self.error(f"lists no draft calls: type {what}")
        return tuple(sorted({self._number(item, ui, item=True) for item in items}))

    def _tree(self, value: Any, ui: bool) -> tuple[tuple[int, ...], ...]:
        what = self.allowed(ui)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                raise self.error(f"must be {what}, not {shown(value)}") from None
        if not isinstance(value, (list, tuple)) or not value or len(value) > TOTAL_TOKENS.high:
            raise self.error(f"must be {what} (1 to {TOTAL_TOKENS.high:,} paths), not {shown(value)}")
        paths = []
        for path in value:
            if not isinstance(path, (list, tuple)) or not path or len(path) > DRAFT_CALLS.high:
                raise self.error(f"must be {what}; each path 1 to {DRAFT_CALLS.high} ranks long, not {shown(path)}")
            paths.append(tuple(self._number(rank, ui, item=True) for rank in path))
        return tuple(paths)


# -- the declarations ----------------------------------------------------------------------------------

MAX_NEW_TOKENS = Setting("max_new_tokens", "int", 128, 1, 1_000_000, "max new tokens",
                         "the most tokens a run adds to the prompt", ui_high=512, ui_default=64, step=8)
TEMPERATURE = Setting("temperature", "float", 0.0, 0, 10, "temperature",
                      "0 decodes greedily; above 0 samples, each method keeping plain sampling's distribution",
                      ui_high=2, step=0.05)
TOP_P = Setting("top_p", "float", 1.0, 0, 1, "top-p", "sample only from the likeliest tokens that make up this "
                "much probability", ui_low=0.01, step=0.05, above_low=True)
TOP_K = Setting("top_k", "int", 0, 0, 1_000_000, "top-k (sampling)",
                "sample only from the k likeliest tokens (0: no limit); not the tree's beam width")
# torch seeds are 64-bit; the top half would wrap to negative numbers.
SEED = Setting("seed", "int", 0, 0, 2**63 - 1, "seed", "the random seed of sampling (greedy decoding ignores it)")

EAGLE_TREE_SETTING = Setting("tree", "tree", EAGLE_TREE, 0, 1023, "tree",
                             "EAGLE's static tree: draft-rank paths from the root, as JSON")
BEAM_WIDTH = Setting("beam_width", "int", 10, 1, 1024, "beam width",
                     "the K best nodes a draft call expands (at most the draft vocabulary): K tokens at the root "
                     "call, K x K candidates per later call", ui_high=32, step=1, old_names=("top_k",))
DRAFT_CALLS = Setting("draft_calls", "int", 6, 1, 64, "draft calls",
                      "head calls per step, the root call included: the tree's depth", ui_high=16, step=1)
TOTAL_TOKENS = Setting("total_tokens", "int", 60, 2, 4096, "total tokens verified",
                       "the most likely drafted tokens the target verifies in one forward, the root included (the "
                       "cost rule verifies at most this many)",
                       ui_high=128, step=1)
MAX_DRAFT_CALLS = Setting("max_draft_calls", "int", 11, 1, 64, "max draft calls",
                          "the deepest tree DDD (or the cost rule) may draft, in head calls, the root call included",
                          ui_high=24, step=1)
CHECK_STEPS = Setting("check_steps", "calls", (5, 7, 9), 1, 64, "check after calls",
                      "the draft calls after which DDD compares H with the threshold ('all': after every call)",
                      ui_high=MAX_DRAFT_CALLS.ui_high)
THRESHOLD = Setting("threshold", "float", -0.3, -1000, 0, "threshold on H",
                    "DDD stops drafting when H, the log of the beam's total draft probability, falls below this",
                    why_high="H is the log of a probability, never above 0, so every check would stop")

# The cost rule measures its own costs as it decodes (ddd/costs.py CostMeter) unless pinned; the declared values
# are where a pinned rule stays and where a measuring one starts before it has timed anything: `python -m
# ddd.bench.budget --dtype int8` on a 2-core AVX2 CPU (docs/results.md).
PIN_COSTS = Setting("pin_costs", "bool", False, 0, 1, "keep the costs fixed (do not measure them)",
                    "use the three costs below as they are (reproducible trees) instead of measuring this machine's "
                    "as the rule decodes; unpinned, they are only where the measuring starts")
DRAFT_COST = Setting("draft_cost", "float", 0.06, 0, 10, "draft call cost",
                     "what one draft call costs, in plain decoding steps", ui_high=1, step=0.01, above_low=True)
VERIFY_BASE = Setting("verify_base", "float", 0.09, 0, 10, "verify base cost",
                      "what verifying any drafted token adds to the target's one-token forward (a tree forward "
                      "instead of a plain one), in plain decoding steps", ui_high=1, step=0.01)
VERIFY_COST = Setting("verify_cost", "float", 0.025, 0, 10, "verify cost per token",
                      "what each verified token beyond the first adds to the target's forward, in plain decoding "
                      "steps", ui_high=0.5, step=0.005)

COST_SETTINGS = (DRAFT_COST, VERIFY_BASE, VERIFY_COST)  # what a step costs (ddd/costs.py StepCosts)
SAMPLING_SETTINGS = (TEMPERATURE, TOP_P, TOP_K, SEED)
METHOD_DECLARATIONS: dict[str, tuple[Setting, ...]] = {
    "plain": (),
    "eagle": (EAGLE_TREE_SETTING,),
    "eagle2": (BEAM_WIDTH, DRAFT_CALLS, TOTAL_TOKENS),
    "ddd": (BEAM_WIDTH, MAX_DRAFT_CALLS, CHECK_STEPS, THRESHOLD, TOTAL_TOKENS),
    "cost": (BEAM_WIDTH, MAX_DRAFT_CALLS, TOTAL_TOKENS, PIN_COSTS, *COST_SETTINGS),
}


# -- the settings objects ------------------------------------------------------------------------------

class Declared:
    """A settings object: one field per declared setting (DECLARED), each parsed when the object is made."""

    DECLARED: ClassVar[tuple[Setting, ...]] = ()

    def __post_init__(self) -> None:
        for setting in self.DECLARED:
            setattr(self, setting.name, setting.parse(getattr(self, setting.name)))

    def validate(self, draft_vocab: int | None = None) -> None:
        """Every value again (a field may have been set since), then the rules between settings and those
        that need the draft head's vocabulary (skipped while no head is loaded: None)."""
        self.__post_init__()
        self._relations(draft_vocab)

    def _relations(self, draft_vocab: int | None) -> None:
        pass


def _fields(*settings: Setting) -> type:
    return make_dataclass("Fields", [(s.name, Any, field(default=s.default)) for s in settings], bases=(Declared,),
                          namespace={"DECLARED": settings})


def _within_vocab(setting: Setting, value: int, draft_vocab: int | None) -> None:
    if draft_vocab is not None and value > draft_vocab:
        raise setting.error(f"must be at most the draft vocabulary size ({draft_vocab:,}), not {value}")


class Sampling(_fields(*SAMPLING_SETTINGS)):
    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class PlainSettings(_fields()):
    pass


class EagleSettings(_fields(EAGLE_TREE_SETTING)):
    def _relations(self, draft_vocab: int | None) -> None:
        paths = set(self.tree)
        for path in paths:
            if path[:-1] and path[:-1] not in paths:
                raise EAGLE_TREE_SETTING.error(f"path {list(path)} has no parent path {list(path[:-1])}")
            if draft_vocab is not None and max(path) >= draft_vocab:
                raise EAGLE_TREE_SETTING.error(f"path {list(path)} uses a rank outside 0..{draft_vocab - 1} (the "
                                               "draft vocabulary)")


class Eagle2Settings(_fields(*METHOD_DECLARATIONS["eagle2"])):
    def _relations(self, draft_vocab: int | None) -> None:
        _within_vocab(BEAM_WIDTH, self.beam_width, draft_vocab)


class DDDSettings(_fields(*METHOD_DECLARATIONS["ddd"])):
    def checks(self) -> set[int]:
        if self.check_steps == "all":
            return set(range(1, self.max_draft_calls + 1))
        return set(self.check_steps)

    def _relations(self, draft_vocab: int | None) -> None:
        _within_vocab(BEAM_WIDTH, self.beam_width, draft_vocab)
        late = [c for c in self.checks() if c > self.max_draft_calls]
        if late:
            raise CHECK_STEPS.error(f"lists draft call {min(late)}, after the last one DDD may make "
                                    f"({MAX_DRAFT_CALLS.label}: {self.max_draft_calls})")


class CostSettings(_fields(*METHOD_DECLARATIONS["cost"])):
    def _relations(self, draft_vocab: int | None) -> None:
        _within_vocab(BEAM_WIDTH, self.beam_width, draft_vocab)


SETTINGS_CLASSES: dict[str, type] = {
    "plain": PlainSettings, "eagle": EagleSettings, "eagle2": Eagle2Settings, "ddd": DDDSettings,
    "cost": CostSettings,
}


def check_method(method: Any) -> str:
    if not isinstance(method, str) or method not in SETTINGS_CLASSES:
        raise SettingsError(f"Unknown method {shown(method)}; choose one of {', '.join(METHODS)}.")
    return method


def parse_settings(method: str, values: Mapping[str, Any], ui: bool = False) -> Any:
    """The settings object of `method` with `values` (Python values or text) parsed in; unknown names and bad
    values raise SettingsError. `ui`: within the app's ranges."""
    declared = {s.name: s for s in METHOD_DECLARATIONS[check_method(method)]}
    unknown = sorted((str(name) for name in values if name not in declared))
    if unknown:
        renamed = [f"{old} is now {s.name}" for s in declared.values() for old in s.old_names if old in unknown]
        raise SettingsError(f"Unknown setting(s) {', '.join(unknown)} for {method}; allowed: "
                            f"{', '.join(declared) or 'none'}" + (f" ({'; '.join(renamed)})" if renamed else "") + ".")
    return SETTINGS_CLASSES[method](**{name: declared[name].parse(v, ui) for name, v in values.items()})


def method_settings(method: str, **overrides: Any) -> Any:
    """The settings object of `method` with `overrides` applied (unknown names are refused)."""
    return parse_settings(method, overrides)


def current_names(method: str, settings: Any) -> Any:
    """Stored settings with older names renamed (run files before beam_width store it as top_k), in their
    order. The one place old names are read: RunTrace.from_dict and the run-file checks both call it."""
    if not isinstance(settings, dict):
        return settings
    renames = {old: s.name for s in METHOD_DECLARATIONS.get(method, ()) for old in s.old_names}
    return {renames[k] if k in renames and renames[k] not in settings else k: v for k, v in settings.items()}


def settings_dict(settings: Declared) -> dict[str, Any]:
    values = asdict(settings)
    return {s.name: s.to_json(values[s.name]) for s in settings.DECLARED}


# -- command lines -------------------------------------------------------------------------------------

def argument_type(setting: Setting):
    """An argparse type that parses through the declaration (its message names the setting and its range)."""
    def parse(text: str) -> Any:
        try:
            return setting.parse(text)
        except SettingsError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = setting.name
    return parse


def add_argument(parser: argparse.ArgumentParser, setting: Setting, **overrides: Any) -> None:
    """The flag --NAME-WITH-DASHES for a declared setting, with its type, default and help."""
    options = dict(type=argument_type(setting), default=setting.default, help=setting.describe())
    parser.add_argument(f"--{setting.name.replace('_', '-')}", **{**options, **overrides})


def settings_help(qualified: bool) -> str:
    """Every method's settings, one paragraph each (`qualified`: as METHOD.NAME, the benchmark's form)."""
    return "\n".join(textwrap.fill(f"{f'{method}.{s.name}' if qualified else f'{s.name} ({method})'}: {s.describe()}",
                                   100, initial_indent="  ", subsequent_indent="      ")
                     for method, declared in METHOD_DECLARATIONS.items() for s in declared)
