"""The what-if panel: DDD's threshold and checks and the cost rule's costs replayed on the race shown (ddd.whatif);
no model runs. Each callback returns {component: value}."""
from __future__ import annotations

import math
from typing import Any

import gradio as gr

from components import Race
from components.inputs import InputError, checked, input_error
from components.race import METHOD_LABELS
from components.whatif import TITLE, whatif_figure, whatif_summary
from ddd.bench.projection import BAND, zerogpu_costs
from components.widgets import CheckedSlider
from ddd.costs import StepCosts
from ddd.settings import CHECK_STEPS, COST_SETTINGS, MAX_DRAFT_CALLS, THRESHOLD, VERIFY_COST, Setting, SettingsError
from ddd.trace import RunTrace
from ddd.whatif import DYNAMIC_METHODS, WhatIf, cost_whatif, ddd_whatif, own_costs, replayable

from .layout import WIDGET_WIDTH, Ui, slider_minimum
from .viewing import message

THRESHOLD_STEP = 0.05
# Fine enough to hold the GPU's verify cost, which the declared step (0.005) would round away.
VERIFY_STEP = 0.001
PANEL = """Replays the race shown with other depth settings, without a model: under greedy decoding the record holds
what any part of each step's draft tree would have accepted. A hollow marker is a bound: the rule would have drafted
deeper than the run did, so its depth is at least and its accepted tokens at most what is drawn. Times come from each
step's measured draft, verify and other times."""
COSTS_NOTE = ("**this CPU**: the costs the race's cost rule priced its last step with, measured as it decoded (its "
              "settings where it measured none; the declared ones when the race has no cost-rule run). "
              "**a GPU**: the costs the project's GPU projection gives this race's model pair on ZeroGPU's GPU (half "
              "an RTX PRO 6000): each part of a step takes the longer of reading its bytes from memory and launching "
              "its operations, in plain steps (docs/results.md, \"GPU projection\"); projected, not measured, "
              f"within ±{BAND:.0%} of published GPU measurements, and only for the pairs of the model menu. Predicted "
              "times use this race's own costs either way.")
NO_GPU_PROJECTION = ("The GPU projection covers the model menu's pairs only (docs/results.md, \"GPU projection\"): "
                     "this race's pair has none, so the costs stay as they were.")
COST_WIDGETS = [f"whatif_{s.name}" for s in COST_SETTINGS]
WIDGETS = ["whatif_source", "whatif_threshold", "whatif_checks", *COST_WIDGETS]
OUTPUTS = ["whatif_chart", "whatif_note"]


def gpu_costs_words(costs: StepCosts) -> str:
    """The note's words for the projected costs "a GPU" put on the sliders, with the projection's band."""
    return (f"A GPU's costs, projected for this race's pair on ZeroGPU's card (each ±{BAND:.0%}, the projection's "
            f"leave-one-out error against published GPU measurements): a draft call {costs.draft_cost:.3f}, a tree "
            f"forward {costs.verify_base:.3f} more than a one-token one, each verified token {costs.verify_cost:.4f} "
            "plain steps.")


def _slider(setting: Setting, value: float, step: float, elem_id: str) -> CheckedSlider:
    """A slider over the setting's app range, starting a step above its low end where that end is not allowed."""
    return CheckedSlider(slider_minimum(setting, step), setting.bounds(ui=True)[1], value=value, step=step,
                         label=f"{setting.label} (what if)", info=setting.help, elem_id=elem_id, min_width=WIDGET_WIDTH)


def place(ui: Ui) -> None:
    """The closed "What if" accordion and its widgets (inside an open gr.Blocks, under the race)."""
    with gr.Accordion("What if", open=False, elem_id="whatif") as accordion:
        gr.Markdown(PANEL)
        with gr.Row():
            ui["whatif_source"] = gr.Radio([], label="recorded run replayed", elem_id="whatif-source")
            ui["whatif_threshold"] = _slider(THRESHOLD, THRESHOLD.default, THRESHOLD_STEP, "whatif-threshold")
            ui["whatif_checks"] = gr.Textbox(CHECK_STEPS.ui_value(CHECK_STEPS.default), max_lines=1,
                                             label=f"{CHECK_STEPS.label} (what if)", info=CHECK_STEPS.help,
                                             elem_id="whatif-checks")
        with gr.Row():
            for setting, name in zip(COST_SETTINGS, COST_WIDGETS):
                ui[name] = _slider(setting, setting.default, VERIFY_STEP if setting is VERIFY_COST else setting.step,
                                   name.replace("_", "-"))
            with gr.Column(min_width=140, scale=0):
                ui["whatif_cpu"] = gr.Button("this CPU", size="sm", elem_id="whatif-cpu")
                ui["whatif_gpu"] = gr.Button("a GPU", size="sm", elem_id="whatif-gpu")
        gr.Markdown(COSTS_NOTE)
        ui["whatif_note"] = gr.HTML(elem_id="whatif-note")
        ui["whatif_chart"] = gr.Plot(label=TITLE, elem_id="whatif-chart")
    ui["whatif"] = accordion


def wire(ui: Ui, panel: WhatIfPanel) -> None:
    """A race shown (its summary table changes) sets the widgets to its settings; moving one replays it."""
    widgets, outputs = ui.of([*WIDGETS, "session"]), ui.of(OUTPUTS)
    ui["summary"].change(panel.show, [ui["session"]], ui.of([*WIDGETS, *OUTPUTS]), api_name=False,
                         show_progress="hidden")
    for name in WIDGETS:
        ui[name].input(panel.replay, widgets, outputs, api_name=False, show_progress="hidden",
                       trigger_mode="always_last")
    for name, which in (("whatif_cpu", "cpu"), ("whatif_gpu", "gpu")):
        ui[name].click(lambda *values, w=which: panel.preset(w, *values), widgets,
                       ui.of([*COST_WIDGETS, *OUTPUTS]), api_name=False,
                       show_progress="hidden")


def _sources(race: Race | None) -> list[str]:
    return [m for m in DYNAMIC_METHODS if race is not None and m in race.traces]


def _race_costs(race: Race | None, source: RunTrace | None) -> StepCosts:
    """The race's own costs: its cost-rule run's settings, or the declared ones."""
    return own_costs(race.get("cost") if race is not None and race.get("cost") else source)


def _costs(costs: StepCosts) -> list[float]:
    """The cost sliders' values, in COST_SETTINGS' order."""
    return [getattr(costs, s.name) for s in COST_SETTINGS]


def _max_calls(race: Race, trace: RunTrace) -> int:
    """The deepest tree a rule may draft: the run's own limit, or (for EAGLE-2) its race's DDD or cost rule's."""
    for run in (trace, race.get("ddd"), race.get("cost")):
        if run is not None and MAX_DRAFT_CALLS.name in run.settings:
            return int(run.settings[MAX_DRAFT_CALLS.name])
    return MAX_DRAFT_CALLS.default


class WhatIfPanel:
    """Replays the session's race under the panel's settings; never touches a model."""

    def __init__(self, ui: Ui):
        self.ui = ui

    def show(self, session: Any) -> dict:
        """A race was shown: the panel takes its recorded settings (so the replay starts as the race ran) and replays."""
        ui, race = self.ui, getattr(session, "race", None)
        sources = _sources(race)
        source = sources[0] if sources else None
        trace = race.get(source) if source else None
        ddd = race.get("ddd") if race is not None else None
        threshold = float(ddd.settings.get(THRESHOLD.name, THRESHOLD.default)) if ddd else THRESHOLD.default
        checks = CHECK_STEPS.ui_value(ddd.settings.get(CHECK_STEPS.name, CHECK_STEPS.default) if ddd else
                                      CHECK_STEPS.default)
        costs = _costs(_race_costs(race, trace))
        # Below the lowest H the race recorded every threshold replays alike: the slider stops a little under it.
        lowest = min((h for m in sources for s in race.get(m).steps for h in s.confidence), default=threshold)
        low = max(THRESHOLD.bounds(ui=True)[0], math.floor(min(lowest, threshold)) - 1)
        values = {
            ui["whatif_source"]: gr.update(choices=[(METHOD_LABELS.get(m, m), m) for m in sources], value=source),
            ui["whatif_threshold"]: gr.update(minimum=low, value=threshold),
            ui["whatif_checks"]: checks,
            **{ui[name]: value for name, value in zip(COST_WIDGETS, costs)},
        }
        return {**values, **self._replay(race, source, threshold, checks, costs)}

    def replay(self, source: Any, threshold: Any, checks: Any, *rest: Any) -> dict:
        """rest: the cost sliders' values (COST_SETTINGS' order), then the session."""
        *costs, session = rest
        return self._replay(getattr(session, "race", None), source, threshold, checks, costs)

    def preset(self, which: str, source: Any, threshold: Any, checks: Any, *rest: Any) -> dict:
        """"this CPU" (the race's own costs) or "a GPU" (the GPU projection's for the race's pair on ZeroGPU's GPU) on
        the cost sliders, and the replay."""
        race = getattr(rest[-1], "race", None)  # rest: the cost sliders, then the session
        trace = race.get(source) if race and source else None
        if which == "gpu":
            projected = zerogpu_costs(trace) if trace is not None else None
            if projected is None:
                return {**{self.ui[name]: gr.skip() for name in COST_WIDGETS}, self.ui["whatif_chart"]: gr.skip(),
                        self.ui["whatif_note"]: message(NO_GPU_PROJECTION, "note")}
        costs = _costs(projected if which == "gpu" else _race_costs(race, trace))
        lead = gpu_costs_words(projected) if which == "gpu" else ""
        return {**{self.ui[name]: value for name, value in zip(COST_WIDGETS, costs)},
                **self._replay(race, source, threshold, checks, costs, lead)}

    def _replay(self, race: Race | None, source: Any, threshold: Any, checks: Any, costs: list[Any],
                lead: str = "") -> dict:
        """`lead`: what the note says before the replay's summary."""
        ui = self.ui
        sources = _sources(race)
        if race is None:
            why = "Run or load a race first: the what-if replays a recorded race."
        elif not sources:
            why = "This race has no EAGLE-2, DDD or cost-rule run: there is no draft tree to replay."
        elif source not in sources:
            why = f"Choose one of the race's runs to replay: {', '.join(METHOD_LABELS.get(m, m) for m in sources)}."
        else:
            why = replayable(race.get(source))
        if why:
            return {ui["whatif_chart"]: whatif_figure(None, [], why=why), ui["whatif_note"]: message(why, "note")}
        trace = race.get(source)
        try:
            checked_threshold, checked_checks = checked(THRESHOLD, threshold), checked(CHECK_STEPS, checks)
            checked_costs = {s.name: checked(s, v) for s, v in zip(COST_SETTINGS, costs)}
            def replays(run: RunTrace, rules: tuple[str, ...], as_priced: bool = False) -> list[WhatIf]:
                """as_priced: a cost rule that measured its costs replays each step at the costs it recorded."""
                options = dict(max_draft_calls=_max_calls(race, run), time_costs=_race_costs(race, run))
                measured = as_priced and any(s.costs is not None and s.costs.measured for s in run.steps)
                return [ddd_whatif(run, checked_threshold, checked_checks, **options) if rule == "ddd" else
                        cost_whatif(run, None if measured else checked_costs, **options) for rule in rules]
            results = replays(trace, ("ddd", "cost"))
            # A rule the race measured is first replayed on its own run: its prediction beside its measurement says
            # how far to trust the prediction from another run's record.
            own = [r for rule in ("ddd", "cost") if rule != source and race.get(rule) is not None
                   and not replayable(race.get(rule)) for r in replays(race.get(rule), (rule,), as_priced=True)]
        except InputError as err:
            return {ui["whatif_chart"]: gr.skip(), ui["whatif_note"]: message(str(err))}
        except SettingsError as err:
            return {ui["whatif_chart"]: gr.skip(), ui["whatif_note"]: message(str(input_error(err)))}
        return {ui["whatif_chart"]: whatif_figure(trace, results),
                ui["whatif_note"]: message(f"{lead} {whatif_summary(trace, results, own)}".strip(), "note")}
