"""The metrics, defined once (docs/trace.md): small pure functions over step traces and per-question rows.

A run is first reduced to `counts` (plain sums: tokens, forwards, milliseconds), which can be pooled
across questions by adding them up; every reported figure is derived from counts, for a run's own summary
(the trace, the CLI, the app) and for the benchmark's tables alike.
Pooled ratios (tau, acceptance rate, time shares) weigh every step alike; per-question figures
(tokens/s, speedup) are summarised by their median, so one long answer cannot dominate.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .trace import CHAIN_ENDS, PHASES, Step

# Sums that make up a run's counts; None marks a quantity the decoder cannot report (e.g. draft time of
# a transformers peer), and stays None when pooled with anything.
COUNT_FIELDS = (
    "new_tokens",  # every emitted token, the prefill's included
    "decode_tokens",  # tokens emitted by decode steps (all but the prefill's one)
    "decode_steps",  # target forwards after the prefill
    "target_forwards",
    "drafted",  # draft nodes sent to the target for verification (root excluded)
    "accepted",  # of those, accepted
    "draft_calls",  # head forwards summed over speculative steps
    "speculative_steps",  # steps that drafted anything
    "prefill_ms",
    "draft_ms",  # decode steps only
    "verify_ms",
    "other_ms",
    "total_ms",  # prefill included: the wall time of the whole answer
    # speculative steps by why their accepted chain ended (trace.CHAIN_ENDS)
    *(f"chain_end_{reason}" for reason in CHAIN_ENDS),
    # operations dispatched by decode steps (ddd/ops.py), where the run counted them
    *(f"ops_{phase}" for phase in PHASES),
)


def counts_from_steps(steps: Sequence[Step]) -> dict[str, float]:
    """Counts of one engine run from its steps."""
    decode = [s for s in steps if not s.prefill]
    speculative = [s for s in decode if s.draft_calls]
    return {
        "new_tokens": sum(len(s.token_ids) for s in steps),
        "decode_tokens": sum(len(s.token_ids) for s in decode),
        "decode_steps": len(decode),
        "target_forwards": len(steps),
        "drafted": sum(max(s.verified - 1, 0) for s in decode),
        "accepted": sum(s.accepted for s in decode),
        "draft_calls": sum(s.draft_calls for s in speculative),
        "speculative_steps": len(speculative),
        "prefill_ms": sum(s.ms for s in steps if s.prefill),
        "draft_ms": sum(s.draft_ms for s in decode),
        "verify_ms": sum(s.verify_ms for s in decode),
        "other_ms": sum(s.other_ms for s in decode),
        "total_ms": sum(s.ms for s in steps),
        **{f"chain_end_{reason}": sum(s.chain_end == reason for s in decode) for reason in CHAIN_ENDS},
        **{f"ops_{phase}": (sum(getattr(s.ops, phase) for s in decode)
                            if decode and all(s.ops is not None for s in decode) else None) for phase in PHASES},
        "depths": dict(sorted(Counter(str(s.draft_calls) for s in speculative).items(), key=lambda kv: int(kv[0]))),
    }


def counts_from_wall(new_tokens: int, total_ms: float, forwards: int | None = None,
                     prefill_ms: float | None = None) -> dict[str, float | None]:
    """Counts of a decoder seen from outside (a transformers `generate` call): tokens, wall time and, when
    known, the number of target forwards; the prefill forward emits the first token."""
    known = forwards is not None and forwards >= 1
    return {
        "new_tokens": new_tokens,
        "decode_tokens": new_tokens - 1 if known else None,
        "decode_steps": forwards - 1 if known else None,
        "target_forwards": forwards if known else None,
        "drafted": None,
        "accepted": None,
        "draft_calls": None,
        "speculative_steps": None,
        "prefill_ms": prefill_ms,
        "draft_ms": None,
        "verify_ms": None,
        "other_ms": None,
        "total_ms": total_ms,
        **{f"chain_end_{reason}": None for reason in CHAIN_ENDS},
        **{f"ops_{phase}": None for phase in PHASES},
        "depths": None,
    }


def pool_counts(runs: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Field-wise sums; a field unknown (None) in any run is unknown in the pool."""
    out: dict[str, float | None] = {k: 0 for k in COUNT_FIELDS}
    empty = True
    for run in runs:
        empty = False
        for key in COUNT_FIELDS:
            value = run.get(key)
            out[key] = None if value is None or out[key] is None else out[key] + value
    return {k: None for k in COUNT_FIELDS} if empty else out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def tokens_per_s(counts: Mapping[str, Any]) -> float | None:
    """New tokens per second of wall time, prefill included."""
    ms = counts.get("total_ms")
    return _ratio(counts.get("new_tokens"), ms / 1000 if ms is not None else None)


def tau(counts: Mapping[str, Any]) -> float | None:
    """Mean acceptance length: tokens emitted per decode forward (accepted drafts + the bonus)."""
    return _ratio(counts.get("decode_tokens"), counts.get("decode_steps"))


def acceptance_rate(counts: Mapping[str, Any]) -> float | None:
    """Accepted draft nodes / draft nodes verified."""
    return _ratio(counts.get("accepted"), counts.get("drafted"))


def mean_draft_depth(counts: Mapping[str, Any]) -> float | None:
    """Draft calls per speculative step."""
    return _ratio(counts.get("draft_calls"), counts.get("speculative_steps"))


def time_shares(counts: Mapping[str, Any]) -> dict[str, float | None]:
    """Draft / verify / other shares of the decode steps' time (they add up to 1)."""
    parts = [counts.get(k) for k in ("draft_ms", "verify_ms", "other_ms")]
    if any(p is None for p in parts) or sum(parts) <= 0:
        return {"draft_share": None, "verify_share": None, "other_share": None}
    total = sum(parts)
    return {"draft_share": parts[0] / total, "verify_share": parts[1] / total, "other_share": parts[2] / total}


def chain_end_shares(counts: Mapping[str, Any]) -> dict[str, float | None]:
    """Each reason's share of the speculative steps whose chain end was recorded: which part of the draft
    (its depth, the rerank, its vocabulary, its guesses) stopped the accepted chains."""
    ends = [counts.get(f"chain_end_{reason}") for reason in CHAIN_ENDS]
    total = None if any(n is None for n in ends) else sum(ends)
    return {f"chain_end_{reason}_share": _ratio(n, total) for reason, n in zip(CHAIN_ENDS, ends)}


def op_figures(counts: Mapping[str, Any]) -> dict[str, float | None]:
    """Operations dispatched (ddd/ops.py) per generated token and per decode step; a step's drafting per draft
    call; and the rest of a step (the target's forward over the tree, the acceptance, the cache and the record),
    which a plain step is made of alone. None where the run did not count them."""
    parts = [counts.get(f"ops_{phase}") for phase in PHASES]
    total = None if any(p is None for p in parts) else sum(parts)
    rest = None if total is None else parts[1] + parts[2]
    return {"ops_per_token": _ratio(total, counts.get("decode_tokens")),
            "ops_per_step": _ratio(total, counts.get("decode_steps")),
            "ops_per_draft_call": _ratio(parts[0], counts.get("draft_calls")),
            "ops_rest_per_step": _ratio(rest, counts.get("decode_steps"))}


def derived(counts: Mapping[str, Any]) -> dict[str, float | None]:
    """Every reported figure of one run (or of pooled runs)."""
    return {
        "tokens_per_s": tokens_per_s(counts),
        "tau": tau(counts),
        "acceptance_rate": acceptance_rate(counts),
        "mean_draft_depth": mean_draft_depth(counts),
        **time_shares(counts),
    }


def summarize(steps: Sequence[Step]) -> dict[str, float]:
    """A run's summary as the trace stores it: its counts' figures, with 0 where a figure does not apply.
    tau counts decode steps only: the prefill always emits one token."""
    counts = counts_from_steps(steps)
    figures = derived(counts)
    decode_ms = counts["draft_ms"] + counts["verify_ms"] + counts["other_ms"]
    steps_done = counts["decode_steps"]
    return {
        "new_tokens": counts["new_tokens"],
        "tokens_per_s": figures["tokens_per_s"] or 0.0,
        "decode_tokens_per_s": _ratio(counts["decode_tokens"], decode_ms / 1000) or 0.0,
        "prefill_ms": counts["prefill_ms"],
        "total_ms": counts["total_ms"],
        "target_forwards": counts["target_forwards"],
        "tau": figures["tau"] or 0.0,
        "acceptance_rate": figures["acceptance_rate"] or 0.0,
        "mean_draft_depth": figures["mean_draft_depth"] or 0.0,
        **{key: counts[key] for key in ("draft_ms", "verify_ms", "other_ms")},
        **{f"{key}_per_step": _ratio(counts[key], steps_done) or 0.0 for key in ("draft_ms", "verify_ms", "other_ms")},
    }


def median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def median_run(runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Of several repeats of one answer, the one whose wall time is the median (lower median when even):
    a real run, so its parts (draft, verify, other) still add up."""
    ordered = sorted(runs, key=lambda r: r["total_ms"])
    return ordered[(len(ordered) - 1) // 2]


def speedups(method: Mapping[Any, float | None], reference: Mapping[Any, float | None]) -> dict[Any, float]:
    """Per-question speedup: method tokens/s over reference tokens/s, for questions both have."""
    out = {}
    for key, value in method.items():
        ref = reference.get(key)
        if value is not None and ref:
            out[key] = value / ref
    return out


def median_speedup(method: Mapping[Any, float | None], reference: Mapping[Any, float | None]) -> float | None:
    """The median of per-question speedups (not the ratio of medians)."""
    return median(speedups(method, reference).values())


def depth_shares(counts: Iterable[Mapping[str, Any]]) -> dict[str, float] | None:
    """Each depth's (draft calls') share of the speculative steps of some runs; None where none drafted."""
    pooled: Counter[str] = Counter()
    for c in counts:
        pooled.update(c.get("depths") or {})
    total = sum(pooled.values())
    return {d: pooled[d] / total for d in sorted(pooled, key=int)} if total else None


def summarize_group(rows: Sequence[Mapping[str, Any]], reference: Mapping[Any, float | None] | None = None,
                    key: str = "question_id") -> dict[str, Any]:
    """Summary of one method over some questions. Each row has `key`, `counts` and `tokens_per_s`;
    `reference` maps question keys to the reference method's tokens/s (for the speedup)."""
    if not rows:
        return {}
    pooled = pool_counts(r["counts"] for r in rows)
    per_question = {r[key]: r["tokens_per_s"] for r in rows}
    n = len(rows)
    forwards = pooled["target_forwards"]
    return {
        "questions": n,
        "tokens_per_s": median(per_question.values()),
        "speedup": median_speedup(per_question, reference) if reference is not None else None,
        "tau": tau(pooled),
        "acceptance_rate": acceptance_rate(pooled),
        "mean_draft_depth": mean_draft_depth(pooled),
        "depth_shares": depth_shares(r["counts"] for r in rows),
        **time_shares(pooled),
        **chain_end_shares(pooled),
        **op_figures(pooled),
        "target_forwards": forwards / n if forwards is not None else None,
        "new_tokens": pooled["new_tokens"] / n,
        "prefill_ms": median(r["counts"].get("prefill_ms") for r in rows),
        "draft_ms": pooled["draft_ms"],
        "verify_ms": pooled["verify_ms"],
        "other_ms": pooled["other_ms"],
        "total_ms": pooled["total_ms"],
    }


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where two outputs differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
