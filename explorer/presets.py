"""The presets of the six tree settings, and the race's three columns built from those settings."""
from __future__ import annotations

from typing import Any

from ddd.turns import Entry

# The papers' values suit 7B targets on a GPU, where verifying 60 tokens costs about what one token costs. On a
# CPU verification grows with the tree; the CPU preset verifies a few more tokens than the fastest settings
# `python -m ddd.bench.budget --dtype int8` finds, so that the trees and DDD's depth choice stay visible
# (README: results on a 2-core CPU).
PRESETS = {
    "papers (GPU)": dict(e_top_k=10, e_calls=6, e_total=60, d_calls=11, d_checks="5,7,9", d_threshold=-0.3),
    "small CPU model": dict(e_top_k=8, e_calls=3, e_total=6, d_calls=8, d_checks="all", d_threshold=-0.3),
}
GPU_PRESET, CPU_PRESET = PRESETS
# A third preset times this machine once (ddd.bench.budget) and fills in the fastest predicted settings.
MEASURED = "measure this machine"
PRESET_NAMES = [*PRESETS, MEASURED]
PRESET_FIELDS = ["e_top_k", "e_calls", "e_total", "d_calls", "d_checks", "d_threshold"]


def default_preset(device: str) -> str:
    return GPU_PRESET if device.startswith("cuda") else CPU_PRESET


def race_entries(e_top_k, e_calls, e_total, d_calls, d_checks, d_threshold) -> dict[str, Entry]:
    """The three columns from the panel's tree settings (both trees verify the same number of tokens)."""
    return {
        "plain": Entry("plain"),
        "eagle2": Entry("eagle2", dict(top_k=int(e_top_k), draft_calls=int(e_calls), total_tokens=int(e_total))),
        "ddd": Entry("ddd", dict(top_k=int(e_top_k), max_draft_calls=int(d_calls), check_steps=str(d_checks).strip(),
                                 threshold=float(d_threshold), total_tokens=int(e_total))),
    }


def measured_preset(report: Any) -> dict[str, Any]:
    """The preset from a ddd.bench.budget report: the fastest EAGLE-2, and the fastest DDD verifying as many tokens."""
    eagle2 = report.best("eagle2")
    ddd = report.best("ddd", total_tokens=eagle2.settings["total_tokens"])
    return dict(e_top_k=eagle2.settings["top_k"], e_calls=eagle2.settings["draft_calls"],
                e_total=eagle2.settings["total_tokens"], d_calls=ddd.settings["max_draft_calls"], d_checks="all",
                d_threshold=ddd.settings["threshold"],
                summary=f"predicted {eagle2.speedup:.2f}x for EAGLE-2 (tau {eagle2.tau:.2f}) and {ddd.speedup:.2f}x "
                        f"for DDD (tau {ddd.tau:.2f}) against plain decoding")
