"""The step trace: the one object between the engine and everything that shows or measures it.

Every record is plain data (JSON-serialisable). A run saves to and loads from one JSON file that
carries SCHEMA_VERSION; a file of another version is refused with a clear message.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .settings import current_names

SCHEMA_VERSION = 1
FILE_DECIMALS = 4  # the decimals a saved race keeps of every number (components/race.py)
STATUSES = ("root", "accepted", "rejected", "pruned")  # of a DraftNode
# Why a speculative step's accepted chain ended, i.e. where the target's next token (the bonus) was in the draft:
# no child of the last accepted node was drafted (the tree's depth, or a node the beam did not expand); the
# token was drafted there but dropped by the rerank; it lies outside the head's draft vocabulary; or the
# head's top-K children there missed it.
CHAIN_ENDS = ("tree_end", "pruned", "outside_vocab", "not_drafted")


class TraceFileError(ValueError):
    """A trace file is missing, broken or of another schema version."""


@dataclass
class DraftNode:
    """One candidate of a step's draft pool (index 0 is the root: the last token the target produced)."""

    index: int
    token_id: int
    text: str
    parent: int  # -1 for the root
    depth: int
    logprob: float  # draft log-probability given its parent
    score: float  # cumulative draft log-probability from the root
    rank: int  # rank among its siblings (0 = the draft's best)
    in_beam: bool  # was expanded by a draft call
    status: str  # root | accepted | rejected (verified, not accepted) | pruned (dropped by rerank)


@dataclass
class DepthCheck:
    """One depth decision. DDD's compares H with its threshold; the cost rule's (ddd/costs.py) also records
    the numbers it weighed: the best tree so far (E accepted tokens expected, T plain steps, verified
    tokens) and the forecast of one more level (dE, dT)."""

    call: int  # draft calls made when H was checked
    confidence: float  # H = logsumexp of the beam's cumulative scores
    stop: bool
    expected: float | None = None  # E
    time: float | None = None  # T
    verified: int | None = None
    gain: float | None = None  # dE
    time_gain: float | None = None  # dT


@dataclass
class CostsUsed:
    """The costs the cost rule priced a step with, in plain steps (ddd/costs.py StepCosts): measured on this
    machine as it decoded, or its settings' where they are pinned or nothing was timed yet."""

    draft_cost: float
    verify_base: float
    verify_cost: float
    measured: bool
    step_ms: float | None = None  # what the fixed part of a step (a plain step) took here, where measured
    retimed: bool = False  # the step verified a size the meter had not timed lately, not its best tree


PHASES = ("draft", "verify", "other")  # a step's parts, as its timings split it


@dataclass
class StepOps:
    """The operations one step dispatched (ddd/ops.py): drafting (the head's calls and the tree's scores),
    verification (the target's forward over the tree and the acceptance walk), and the rest (the KV cache kept,
    the step's record, the text)."""

    draft: int = 0
    verify: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.draft + self.verify + self.other


@dataclass
class Step:
    index: int
    token_ids: list[int]  # tokens emitted this step (accepted drafts, then the bonus)
    text: str  # the text they added
    accepted: int  # draft tokens accepted (0 for plain decoding and the prefill)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    prefill: bool = False
    pool: list[DraftNode] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)  # H after every draft call
    checks: list[DepthCheck] = field(default_factory=list)
    draft_calls: int = 0
    max_draft_calls: int = 0
    verified: int = 0  # tree nodes sent to the target, root included
    accepted_path: list[int] = field(default_factory=list)  # pool indices from the root
    bonus_id: int | None = None
    bonus_text: str = ""
    chain_end: str = ""  # one of CHAIN_ENDS for a speculative step
    costs: CostsUsed | None = None  # the cost rule's
    ops: StepOps | None = None  # operations dispatched, where the run counted them (ddd/ops.py)

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
