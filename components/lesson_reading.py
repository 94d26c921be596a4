"""What the lesson (components/lesson.py) reads off a recorded race: a run's decode steps, tau and medians, a
step's verified and accepted tokens, the DDD threshold at which the replayed depth varies most; and the small
words its sentences share."""
from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from ddd.trace import RunTrace, Step
from ddd.whatif import ddd_whatif, own_costs

from .race import Race
from .tokens import markdown_literal, quoted

THRESHOLD_STEP = 0.05  # the what-if panel's threshold slider steps by this much


def decode_steps(trace: RunTrace | None) -> list[Step]:
    return [s for s in trace.steps if not s.prefill] if trace is not None else []


def machine_words(trace: RunTrace) -> str:
    device = trace.device or ""
    return "this CPU" if device.startswith("cpu") else f"this {markdown_literal(device)}"


def counted(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def number_choices(answer: int, values: set[int]) -> tuple[str, ...]:
    """Distinct counts as choices, smallest first, the answer among them."""
    return tuple(str(v) for v in sorted({answer, *(v for v in values if v >= 0)}))


def median_of(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def tau_of(trace: RunTrace) -> float:
    steps = decode_steps(trace)
    return sum(len(s.token_ids) for s in steps) / max(len(steps), 1)


def verified_of(step: Step) -> int:
    return step.verified or sum(1 for n in step.pool if n.status != "pruned")


def accepted_texts(step: Step) -> str:
    nodes = {n.index: n for n in step.pool}
    texts = [nodes[i].text for i in step.accepted_path[1:] if i in nodes][: step.accepted]
    return ", ".join(quoted(t) for t in texts) or "none"


def bonus_words(step: Step) -> str:
    return quoted(step.bonus_text) if step.bonus_id is not None else "a token"


def first_detour(step: Step) -> Any:
    """The shallowest accepted node that was not its parent's first guess, if any."""
    nodes = {n.index: n for n in step.pool}
    path = [nodes[i] for i in step.accepted_path[1:] if i in nodes][: step.accepted]
    return next((n for n in path if n.rank > 0), None)


def varied_threshold(ddd: RunTrace, race: Race) -> float:
    """The threshold, on the what-if slider's steps, at which the replayed DDD's depth varies most from step to
    step (the recorded one's where none varies more)."""
    recorded = float(ddd.settings.get("threshold", 0.0))
    checks = ddd.settings.get("check_steps", "all")
    heights = sorted({round(h / THRESHOLD_STEP) * THRESHOLD_STEP for s in decode_steps(ddd) for h in s.confidence})
    best, spread = recorded, depth_spread(ddd, recorded, checks, race)
    for value in heights:
        varied = depth_spread(ddd, value, checks, race)
        if varied > spread:
            best, spread = round(value, 2), varied
    return best


def depth_spread(ddd: RunTrace, threshold: float, checks: Any, race: Race) -> float:
    calls = [s.calls for s in ddd_whatif(ddd, threshold, checks, time_costs=own_costs(race.get("cost"))).steps
             if s.recorded_calls]
    return statistics.pstdev(calls) if len(calls) > 1 else 0.0
