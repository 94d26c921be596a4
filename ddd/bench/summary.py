"""A benchmark's report as plain data: per-question rows, summaries per method and category, the greedy
identity check against plain decoding, and the sweep table. ddd/bench/report.py renders it."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ddd import metrics
from ddd.settings import settings_dict
from .args import REFERENCE, RunSpec, parse_sweep_target

SCHEMA = 1


def build_report(args, specs: list[RunSpec], questions: list[dict[str, Any]],
                 runs: dict[tuple[str, str], list[dict[str, Any]]], sampling) -> dict[str, Any]:
    rows = []
    outputs: dict[tuple[str, str], list[int]] = {}
    for q in questions:
        for spec in specs:
            repeats = runs[(q["question_id"], spec.label)]
            chosen = metrics.median_run([r["counts"] for r in repeats])
            pick = next(r for r in repeats if r["counts"] is chosen)
            outputs[(q["question_id"], spec.label)] = pick["token_ids"]
            rows.append({
                "question_id": q["question_id"], "category": q["category"], "method": spec.label,
                "base_method": spec.method, "prompt_tokens": len(q["prompt_ids"]),
                **metrics.derived(pick["counts"]),
                "target_forwards": pick["counts"]["target_forwards"], "new_tokens": pick["counts"]["new_tokens"],
                "prefill_ms": pick["counts"]["prefill_ms"], "total_ms": pick["counts"]["total_ms"],
                "repeats_tokens_per_s": [metrics.tokens_per_s(r["counts"]) for r in repeats],
                "stop_reason": pick["stop_reason"], "counts": pick["counts"], "text": pick["text"],
                **({"costs": pick["costs"]} if "costs" in pick else {}),  # the cost rule's at its last step
            })
    reference = {r["question_id"]: r["tokens_per_s"] for r in rows if r["method"] == REFERENCE}
    for row in rows:
        ref = reference.get(row["question_id"])
        row["speedup"] = row["tokens_per_s"] / ref if ref and row["tokens_per_s"] is not None else None
    labels = [s.label for s in specs]
    categories = list(OrderedDict.fromkeys(q["category"] for q in questions))
    overall = {label: metrics.summarize_group([r for r in rows if r["method"] == label], reference)
               for label in labels}
    by_category = {cat: {label: metrics.summarize_group(
        [r for r in rows if r["method"] == label and r["category"] == cat], reference) for label in labels}
        for cat in categories}
    return {
        "schema": SCHEMA,
        "command": None,
        "settings": {
            "questions_file": str(args.questions), "limit": args.limit, "questions": len(questions),
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "sampling": settings_dict(sampling),
            "dtype": args.dtype, "device": args.device, "reference": REFERENCE,
            "runs": [{"label": s.label, "method": s.method, "settings": s.settings(), "swept": s.swept} for s in specs],
            "sweep": args.sweep, "count_ops": getattr(args, "count_ops", False),
        },
        "categories": categories,
        "methods": labels,
        "overall": overall,
        "by_category": by_category,
        "identity": identity_check(specs, questions, outputs, sampling.greedy),
        "sweep": sweep_table(args.sweep, specs, overall),
        "rows": rows,
    }


def identity_check(specs: list[RunSpec], questions: list[dict[str, Any]], outputs: dict[tuple[str, str], list[int]],
                   greedy: bool) -> dict[str, Any]:
    """Greedy decoding is deterministic: every method must reproduce plain's tokens exactly."""
    if not greedy:
        return {"checked": False, "reason": "sampling (temperature > 0): outputs are random, not compared",
                "compared": [], "mismatches": []}
    compared = [s.label for s in specs if s.label != REFERENCE]
    mismatches = []
    for q in questions:
        ref = outputs[(q["question_id"], REFERENCE)]
        for label in compared:
            got = outputs[(q["question_id"], label)]
            at = metrics.first_difference(ref, got)
            if at is not None:
                mismatches.append({"question_id": q["question_id"], "category": q["category"], "method": label,
                                   "first_difference": at, "reference_tokens": len(ref), "tokens": len(got)})
    return {"checked": True, "reference": REFERENCE, "compared": compared, "mismatches": mismatches}


def sweep_table(sweep: str | None, specs: list[RunSpec], overall: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    if not sweep:
        return None
    method, name = parse_sweep_target(sweep)
    points = []
    for spec in specs:
        if spec.swept is None:
            continue
        s = overall[spec.label]
        points.append({"value": spec.swept, "label": spec.label, **{k: s.get(k) for k in (
            "tokens_per_s", "speedup", "tau", "acceptance_rate", "mean_draft_depth", "target_forwards",
            "draft_share", "verify_share", "other_share")}})
    return {"method": method, "setting": name, "reference_tokens_per_s": overall[REFERENCE]["tokens_per_s"],
            "points": points}
