"""The presets of the tree settings, and the race's columns built from those settings. Both speak in the
settings' declared names (ddd.settings; components.inputs.TREE_SETTINGS lists the panel's)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from components.inputs import TREE_COLUMNS, TREE_NAMES, TREE_SETTINGS
from components.race import RACE_METHODS
from ddd.bench.budget import BudgetReport
from ddd.settings import COST_SETTINGS, METHOD_DECLARATIONS, PIN_COSTS, Setting
from ddd.turns import Entry

if TYPE_CHECKING:
    from .models import Models

# The papers' values (the declared defaults) suit 7B targets on a GPU, where verifying 60 tokens costs about
# what one token costs. On a CPU verification grows with the tree; the CPU preset verifies a few more tokens
# than the fastest settings `python -m ddd.bench.budget --dtype int8` finds, so that the trees and DDD's depth
# choice stay visible (docs/benchmark.md). Neither carries a machine's costs: the cost rule measures
# its own as it decodes (ddd/costs.py CostMeter), starting from the declared ones; "measure this machine" starts
# it from this machine's.
PRESETS = {
    "papers (GPU)": {s.name: s.default for s in TREE_SETTINGS},
    "small CPU model": dict(beam_width=8, draft_calls=3, total_tokens=6, max_draft_calls=8, check_steps="all",
                            threshold=-0.3, **{s.name: s.default for s in (PIN_COSTS, *COST_SETTINGS)}),
}
GPU_PRESET, CPU_PRESET = PRESETS
# A third preset times this machine once (ddd.bench.budget) and fills in the fastest predicted settings.
MEASURED = "measure this machine"
PRESET_NAMES = [*PRESETS, MEASURED]
PRESET_FIELDS = TREE_NAMES


@dataclass(frozen=True)
class Opening:
    """The preset a page opens on, its values, and why it was picked (the panel's note)."""
    name: str
    values: Mapping[str, Any]
    why: str = ""


def opening_preset(models: "Models", asked: str | None = None) -> Opening:
    """The preset named on the command line, else: on a GPU the papers'; on a CPU this machine's pick where it was
    measured (explorer.machine), else the fixed CPU preset."""
    measured = models.measured.get(models.key(None))
    if asked is None:
        asked = GPU_PRESET if models.device().startswith("cuda") else MEASURED if measured else CPU_PRESET
    if asked == MEASURED and measured:
        return Opening(MEASURED, measured, f"This machine's pick: {measured['summary']}.")
    return Opening(asked if asked in PRESETS else CPU_PRESET, PRESETS.get(asked, PRESETS[CPU_PRESET]))


def widget_values(preset: Mapping[str, Any]) -> dict[str, Any]:
    """A preset's tree settings as the panel's widgets show them (DDD's checks as text)."""
    return {s.name: s.ui_value(preset[s.name]) for s in TREE_SETTINGS}


def race_entries(tree: Mapping[str, Any], methods: tuple[str, ...] = RACE_METHODS) -> dict[str, Entry]:
    """The race's columns `methods` from the panel's tree settings (by declared name): each drafting column takes
    the settings its method declares."""
    return {m: Entry(m, {s.name: tree[s.name] for s in METHOD_DECLARATIONS[m]} if m in TREE_COLUMNS else {})
            for m in methods}


def _on_widget(setting: Setting, value: float) -> float:
    """A measured value on its widget: within the app's range, on the slider's step (at least one step up where the
    range's low end itself is not allowed)."""
    low, high = setting.bounds(ui=True)
    steps = round(value / setting.step)
    if setting.above_low and steps * setting.step <= low:
        steps = round(low / setting.step) + 1
    return round(min(max(steps * setting.step, low), high), 6)


def measured_preset(report: BudgetReport) -> dict[str, Any]:
    """The preset from a ddd.bench.budget report: the fastest EAGLE-2, and the fastest DDD verifying as many
    tokens (with the same beam width, so the two share the panel's settings); the cost rule measuring its own costs
    as it decodes, starting from those measured here."""
    eagle2 = report.best("eagle2")
    ddd = report.best("ddd", total_tokens=eagle2.settings["total_tokens"])
    costs = report.costs.step_costs(eagle2.settings["total_tokens"])
    return {**ddd.settings, **eagle2.settings, PIN_COSTS.name: False,
            **{s.name: _on_widget(s, getattr(costs, s.name)) for s in COST_SETTINGS},
            "summary": f"predicted {eagle2.speedup:.2f}x for EAGLE-2 (tau {eagle2.tau:.2f}) and {ddd.speedup:.2f}x "
                       f"for DDD (tau {ddd.tau:.2f}) against plain decoding; a draft call costs "
                       f"{costs.draft_cost:.3f} plain steps, a tree forward {costs.verify_base:.3f} more than a "
                       f"one-token one, each verified token {costs.verify_cost:.3f}"}
