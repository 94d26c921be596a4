"""The step trace: the one object between the engine and everything that shows or measures it.

Every record is plain data (JSON-serialisable). A run saves to and loads from one JSON file that
carries SCHEMA_VERSION; a file of another version is refused with a clear message.

Each field also declares what a file may hold there (`Spec`: its kind and range); a race file's loader
(components/runfile.py) checks every field by these declarations, and its relations between fields
(components/runcheck.py), so what a record is and what a file of it may say live together (docs/app.md,
"The race-file contract").
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any

from .settings import COST_SETTINGS, current_names

SCHEMA_VERSION = 1
FILE_DECIMALS = 4  # the decimals a saved race keeps of every number (components/race.py)
STATUSES = ("root", "accepted", "rejected", "pruned")  # of a DraftNode
# Why a speculative step's accepted chain ended, i.e. where the target's next token (the bonus) was in the draft:
# no child of the last accepted node was drafted (the tree's depth, or a node the beam did not expand); the
# token was drafted there but dropped by the rerank; it lies outside the head's draft vocabulary; or the
# head's top-K children there missed it.
CHAIN_ENDS = ("tree_end", "pruned", "outside_vocab", "not_drafted")


BIG_INT = 2**31  # token ids, ranks, indices: far beyond any vocabulary or pool
MAX_MS = 1e9  # a step that took eleven days is a broken file, not a slow machine
LOGPROB_HIGH = 1e-3  # a log-probability is at most 0; floats that went through JSON may land just above


@dataclass(frozen=True)
class Spec:
    """What a file may hold in one field. `kind`: int, number, logprob (a number that may also be -Infinity),
    flag, text, ints / logprobs (lists of those), record / records (one or a list of `record`), or data (checked
    by its own rules: settings, sampling, summary, calibration). `low` / `high` bound a value; a bound or `limit`
    given as text names a field of the loader's FileLimits (a list's length, a text's characters).
    `optional`: null is allowed."""

    kind: str
    low: float | str = 0
    high: float | str = BIG_INT
    limit: str = "list_items"
    record: type | None = None
    optional: bool = False


def declared(kind: str, low: float | str = 0, high: float | str = BIG_INT, *, limit: str = "list_items",
             record: type | None = None, optional: bool = False, default: Any = MISSING,
             factory: Any = MISSING) -> Any:
    """A dataclass field with its Spec."""
    spec = Spec(kind, low, high, limit, record, optional)
    return field(default=default, default_factory=factory, metadata={"spec": spec})


def spec_of(f: Any) -> Spec:
    return f.metadata["spec"]


_COST_BOUNDS = {s.name: s.bounds() for s in COST_SETTINGS}


class TraceFileError(ValueError):
    """A trace file is missing, broken or of another schema version."""


@dataclass
class DraftNode:
    """One candidate of a step's draft pool (index 0 is the root: the last token the target produced)."""

    index: int = declared("int")
    token_id: int = declared("int")
    text: str = declared("text", limit="token_text")
    parent: int = declared("int", -1)  # -1 for the root
    depth: int = declared("int", 0, "list_items")
    logprob: float = declared("logprob", -math.inf, LOGPROB_HIGH)  # draft log-probability given its parent
    score: float = declared("logprob", -math.inf, LOGPROB_HIGH)  # cumulative draft log-probability from the root
    rank: int = declared("int")  # rank among its siblings (0 = the draft's best)
    in_beam: bool = declared("flag")  # was expanded by a draft call
    status: str = declared("data")  # root | accepted | rejected (verified, not accepted) | pruned (dropped by rerank)


@dataclass
class DepthCheck:
    """One depth decision. DDD's compares H with its threshold; the cost rule's (ddd/costs.py) also records
    the numbers it weighed: the best tree so far (E accepted tokens expected, T plain steps, verified
    tokens) and the forecast of one more level (dE, dT)."""

    call: int = declared("int", 1, "list_items")  # draft calls made when H was checked
    confidence: float = declared("logprob", -math.inf, LOGPROB_HIGH)  # H = logsumexp of the beam's cumulative scores
    stop: bool = declared("flag")
    # Tokens and plain steps: one step's worth at most.
    expected: float | None = declared("number", "-list_items", "list_items", optional=True, default=None)  # E
    time: float | None = declared("number", "-list_items", "list_items", optional=True, default=None)  # T
    verified: int | None = declared("int", 1, "nodes_per_step", optional=True, default=None)
    gain: float | None = declared("number", "-list_items", "list_items", optional=True, default=None)  # dE
    time_gain: float | None = declared("number", "-list_items", "list_items", optional=True, default=None)  # dT


@dataclass
class CostsUsed:
    """The costs the cost rule priced a step with, in plain steps (ddd/costs.py StepCosts): measured on this
    machine as it decoded, or its settings' where they are pinned or nothing was timed yet."""

    draft_cost: float = declared("number", *_COST_BOUNDS["draft_cost"])
    verify_base: float = declared("number", *_COST_BOUNDS["verify_base"])
    verify_cost: float = declared("number", *_COST_BOUNDS["verify_cost"])
    measured: bool = declared("flag")
    # What the fixed part of a step (a plain step) took here, where measured.
    step_ms: float | None = declared("number", 0, MAX_MS, optional=True, default=None)
    retimed: bool = declared("flag", default=False)  # the step verified a size the meter had not timed lately


PHASES = ("draft", "verify", "other")  # a step's parts, as its timings split it


@dataclass
class StepOps:
    """The operations one step dispatched (ddd/ops.py): drafting (the head's calls and the tree's scores),
    verification (the target's forward over the tree and the acceptance walk), and the rest (the KV cache kept,
    the step's record, the text)."""

    draft: int = declared("int", default=0)
    verify: int = declared("int", default=0)
    other: int = declared("int", default=0)

    @property
    def total(self) -> int:
        return self.draft + self.verify + self.other


@dataclass
class Step:
    index: int = declared("int")  # its position in the run (checked there)
    token_ids: list[int] = declared("ints")  # tokens emitted this step (accepted drafts, then the bonus)
    text: str = declared("text", limit="step_text")  # the text they added
    accepted: int = declared("int")  # draft tokens accepted (0 for plain decoding and the prefill)
    draft_ms: float = declared("number", 0, MAX_MS, default=0.0)
    verify_ms: float = declared("number", 0, MAX_MS, default=0.0)
    other_ms: float = declared("number", 0, MAX_MS, default=0.0)
    prefill: bool = declared("flag", default=False)
    pool: list[DraftNode] = declared("data", factory=list)  # a tree, checked as one
    confidence: list[float] = declared("logprobs", -math.inf, LOGPROB_HIGH, factory=list)  # H after every draft call
    checks: list[DepthCheck] = declared("records", record=DepthCheck, factory=list)
    draft_calls: int = declared("int", 0, "list_items", default=0)
    max_draft_calls: int = declared("int", 0, "list_items", default=0)
    verified: int = declared("int", 0, "nodes_per_step", default=0)  # tree nodes sent to the target, root included
    accepted_path: list[int] = declared("ints", factory=list)  # pool indices from the root
    bonus_id: int | None = declared("int", optional=True, default=None)
    bonus_text: str = declared("text", limit="token_text", default="")
    chain_end: str = declared("data", default="")  # one of CHAIN_ENDS for a speculative step
    costs: CostsUsed | None = declared("record", record=CostsUsed, optional=True, default=None)  # the cost rule's
    # Operations dispatched, where the run counted them (ddd/ops.py).
    ops: StepOps | None = declared("record", record=StepOps, optional=True, default=None)

    @property
    def ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms

    @property
    def context_cut(self) -> bool:
        """The tree stopped short of its limit with no check stopping it: the model's context had no room left."""
        return self.draft_calls < self.max_draft_calls and not (self.checks and self.checks[-1].stop)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Step":
        data = dict(data)
        data["pool"] = [DraftNode(**n) for n in data.get("pool", [])]
        data["checks"] = [DepthCheck(**c) for c in data.get("checks", [])]
        if data.get("costs") is not None:
            data["costs"] = CostsUsed(**data["costs"])
        if data.get("ops") is not None:
            data["ops"] = StepOps(**data["ops"])
        return cls(**data)


@dataclass
class RunTrace:
    method: str
    settings: dict[str, Any]
    sampling: dict[str, Any]
    model: str
    head: str | None
    prompt: str
    prompt_tokens: int
    steps: list[Step] = field(default_factory=list)
    text: str = ""
    stop_reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    precision: str = "float32"
    device: str = "cpu"
    head_kind: str | None = None  # "eagle" or "eagle3"; None for plain decoding
    # The head's measured acceptance by draft probability (ddd/costs.py), as [probability, rate] pairs; None
    # where the head carries none: the what-if view recomputes the cost rule from it.
    calibration: list[list[float]] | None = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps"] = [s.to_dict() for s in self.steps]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunTrace":
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise TraceFileError(
                f"This trace has schema version {version!r}; this program reads version {SCHEMA_VERSION}."
            )
        data = dict(data)
        data["steps"] = [Step.from_dict(s) for s in data.get("steps", [])]
        data["settings"] = current_names(data.get("method"), data.get("settings"))
        if "head_kind" not in data and data.get("head") is not None:
            data["head_kind"] = "eagle"  # traces from before EAGLE-3 heads were all EAGLE runs
        try:
            return cls(**data)
        except TypeError as err:
            raise TraceFileError(f"The trace does not have the expected fields: {err}.") from err

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), ensure_ascii=False))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "RunTrace":
        path = Path(path)
        if not path.exists():
            raise TraceFileError(f"No trace file at {path}.")
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TraceFileError(f"{path} is not a readable JSON trace: {err}.") from err
        if not isinstance(data, dict):
            raise TraceFileError(f"{path} is not a trace: it holds a JSON {type(data).__name__}, not an object.")
        try:
            return cls.from_dict(data)
        except (TypeError, KeyError) as err:
            raise TraceFileError(f"{path} is not a valid trace: {err}.") from err
