"""The page's components and their places; no behaviour (explorer.page wires the callbacks to them)."""
from __future__ import annotations

import math
from typing import Any

import gradio as gr

from components.answer import LEGEND, answer_html, counters_html
from components.inputs import (COST_SWITCH, COST_SWITCH_LABEL, RUN_SETTINGS, TREE_COLUMNS, TREE_NAMES, TREE_SETTINGS,
                               label)
from components.race import COLUMN_METHODS, COST_METHOD, METHOD_LABELS, RACE_METHODS, TREE_METHODS
from components.verdict import headline_html
from components.views import PLAY
from components.widgets import CheckedNumber, CheckedSlider
from ddd.settings import MAX_NEW_TOKENS, METHOD_DECLARATIONS, Setting

from .examples import EXAMPLE_PROMPTS
from .gputime import SpaceRace
from .lesson import place as place_lesson
from .presets import PRESET_NAMES, Opening, widget_values

INTRO = """# DDD Explorer
**What you are seeing:** one model answers your prompt three ways (four with the cost rule, switched on in Settings).
Plain decoding makes one token per forward pass. **EAGLE-2** drafts a tree of guesses with a small head and lets the model
check them all in one pass; **DDD** does the same but chooses how deep to draft from the draft's own confidence; the
**cost rule** drafts as deep as this machine's costs make pay. The headline says who was faster and whether it was more
than noise."""
PRECISION_INFO = ("int8 (CPU only): verifying a tree costs least, so speculative decoding pays most; its answers "
                  "differ from float32's. bfloat16 runs slower on most CPUs. Every method of the race uses the one "
                  "chosen.")
TREE_MODES = {"verified + best dropped": "shown", "verified only": "verified", "whole candidate pool": "all"}
DEFAULT_MODE = next(iter(TREE_MODES))
REPLAY_SPEEDS = ["0.5×", "1×", "2×", "4×"]
COST_INFO = ("a fourth column, the cost rule (see About): it drafts as deep and verifies as many tokens as this machine's "
             "costs make pay, with the beam width, max draft calls and total tokens above")
# Wide enough that a label and its help text wrap to a few lines: a row of narrower widgets wraps onto the next line.
WIDGET_WIDTH = 380


def column_outputs(methods: tuple[str, ...]) -> list[str]:
    """The race columns' outputs for `methods`: their answers, then their counters."""
    return [f"ans_{m}" for m in methods] + [f"cnt_{m}" for m in methods]


# The outputs of the callbacks that show a whole race, and those that show one step, in the API's order.
COLUMNS = column_outputs(COLUMN_METHODS)
STEP_OUTPUTS = [f"txt_{m}" for m in TREE_METHODS] + [f"tree_{m}" for m in TREE_METHODS] + ["narration", "depth"]
RACE_OUTPUTS = [*COLUMNS, "slider", *STEP_OUTPUTS, "timeline", "summary", "about", "info", "headline", "download", "page",
                "message", "session", COST_SWITCH]
# What the cost column's switch shows and hides: its settings, its race column and its step-through column.
COST_PARTS = ["cost_settings", f"column_{COST_METHOD}", f"steps_{COST_METHOD}"]
# The Run button's settings in the order it sends them (components.inputs.race_inputs takes that order).
SETTINGS = [s.name for s in RUN_SETTINGS] + ["precision"] + TREE_NAMES + [COST_SWITCH]


class Ui(dict):
    """The page's components by name."""

    def of(self, names: list[str]) -> list[Any]:
        return [self[n] for n in names]

    def named(self, values: dict) -> dict[str, Any]:
        """A callback's {component: value} as {name: value} (for reading results in tests and logs)."""
        names = {id(c): n for n, c in self.items()}
        return {names[id(c)]: v for c, v in values.items()}


def layout(examples: list[str], precisions: list[str], precision: str, preset: Opening, model_info: str,
           menu: list[str], chosen: str | None, menu_on: bool, typed: bool, new_session, close_session,
           space: SpaceRace | None = None, quick: SpaceRace | None = None, start_up: str = "") -> Ui:
    """Place every component (inside an open gr.Blocks). `space`: on a ZeroGPU Space, its default race (the intro
    says why that pair, and max new tokens starts at its tokens); `quick`: the small pair offered beside it;
    `start_up`: what the start-up could not load, as HTML (explorer.models.Models.start_up_words)."""
    ui = Ui()
    ui["session"] = gr.State(new_session, delete_callback=close_session)
    ui["playing"] = gr.State(False)
    gr.Markdown(INTRO + (f"\n\n{space.words(quick)}" if space else ""), elem_id="intro")
    gr.HTML(start_up, visible=bool(start_up), elem_id="start-up")
    place_lesson(ui)  # the lesson: a button here, its panel closed until asked for
    with gr.Row(equal_height=False, elem_id="ask"):
        with gr.Column(scale=3):
            ui["prompt"] = gr.Textbox(label="Prompt", lines=3, max_lines=8, elem_id="prompt",
                                      placeholder="Ask something, or pick an example below.")
            gr.Examples(examples=[[p] for p in EXAMPLE_PROMPTS], inputs=[ui["prompt"]], label="Example prompts")
            with gr.Row():
                ui["run"] = gr.Button("Run the race", variant="primary", elem_id="run")
                ui["stop"] = gr.Button("Stop", variant="stop", elem_id="stop")
                ui["replay"] = gr.Button("Replay race", elem_id="replay")
        with gr.Column(scale=2):
            gr.Markdown("**Recorded runs** — replay without a model")
            ui["example"] = gr.Dropdown(examples, value=next(iter(examples), None), label="Example run",
                                        elem_id="example")
            with gr.Row():
                ui["upload"] = gr.UploadButton("Load a run file", file_types=[".json", ".gz"], size="sm")
                ui["download"] = gr.DownloadButton("Save this run", size="sm", interactive=False)
                ui["save_page"] = gr.Button("Save as a page", size="sm", elem_id="save-page")
            # The race as a page of its own (components/static_page.py), made when asked: it carries plotly (5 MB).
            ui["page"] = gr.File(label="This race as a page to share (opens in any browser, offline)", visible=False,
                                 elem_id="page-file")
            ui["info"] = gr.HTML(elem_classes="race-info")
    with gr.Accordion("Settings", open=False, elem_id="settings"):
        _settings(ui, precisions, precision, preset, model_info, menu, chosen, menu_on, typed,
                  space.tokens if space else None)
    ui["message"] = gr.HTML(visible=False, elem_id="message")
    ui["headline"] = gr.HTML(headline_html({}), elem_id="headline")
    with gr.Row(equal_height=False, elem_id="race-columns"):
        for method in COLUMN_METHODS:
            with gr.Column(min_width=260, visible=method in RACE_METHODS) as ui[f"column_{method}"]:
                ui[f"cnt_{method}"] = gr.HTML(counters_html(method, []), elem_id=f"cnt-{method}")
                ui[f"ans_{method}"] = gr.HTML(answer_html(None, placeholder="(no run yet)"), elem_id=f"ans-{method}")
    gr.HTML(f"<div class='legend-line'>Shading: {LEGEND}. Plain decoding makes every token with the target.</div>")
    with gr.Tabs():
        with gr.Tab("Step through", id="steps"):
            _step_through(ui)
        with gr.Tab("Summary", id="timeline"):
            ui["summary"] = gr.Dataframe(label="Summary", interactive=False, elem_id="summary", wrap=True)
            ui["timeline"] = gr.Plot(label="Timeline", elem_id="timeline")
        with gr.Tab("About", id="about"):
            ui["about"] = gr.Markdown()
    ui["timer"] = gr.Timer(1.2, active=False)
    return ui


def _settings(ui: Ui, precisions: list[str], precision: str, opening: Opening, model_info: str,
              menu: list[str], chosen: str | None, menu_on: bool, typed: bool, new_tokens: int | None) -> None:
    ui["model_info"] = gr.Markdown(model_info, elem_id="model-info")
    with gr.Row(visible=menu_on):
        ui["model_menu"] = gr.Dropdown(menu, value=chosen, label="model and draft head (for your races only)", scale=3,
                                       elem_id="model-menu")
        ui["model_id"] = gr.Textbox(label="model's hub id", max_lines=1, scale=2, elem_id="model-id", visible=typed)
        ui["head_id"] = gr.Textbox(label="draft head's hub id (or 'random')", max_lines=1, scale=2, elem_id="head-id",
                                   visible=typed)
        ui["choose"] = gr.Button("Use this model", size="sm", scale=1, elem_id="choose")
    with gr.Row():
        for setting in RUN_SETTINGS:
            start = new_tokens if setting is MAX_NEW_TOKENS and new_tokens else setting.start(ui=True)
            ui[setting.name] = widget(setting, start)
        ui["precision"] = gr.Radio(precisions, value=precision, label="precision (target and head, every method)",
                                   info=PRECISION_INFO, min_width=2 * WIDGET_WIDTH)
    preset = widget_values(opening.values)
    ui["preset"] = gr.Radio(PRESET_NAMES, value=opening.name, label="preset for the settings below",
                            info=opening.why or None, elem_id="preset")
    shared = METHOD_DECLARATIONS[TREE_COLUMNS[0]]  # EAGLE-2's settings, then what only DDD has, then the cost rule's
    raced = {s for m in TREE_COLUMNS if m in RACE_METHODS for s in METHOD_DECLARATIONS[m]}
    with gr.Row():
        for setting in shared:
            ui[setting.name] = widget(setting, preset[setting.name])
    with gr.Row():
        for setting in [s for s in TREE_SETTINGS if s in raced and s not in shared]:
            ui[setting.name] = widget(setting, preset[setting.name])
    ui[COST_SWITCH] = gr.Checkbox(False, label=COST_SWITCH_LABEL, info=COST_INFO, elem_id="race-cost")
    cost_only = [s for s in TREE_SETTINGS if s not in raced]
    with gr.Column(visible=False, elem_id="cost-settings") as ui["cost_settings"]:
        # A switch takes a row of its own: beside the sliders it was squeezed to a word per line.
        for row in ([s for s in cost_only if s.kind == "bool"], [s for s in cost_only if s.kind != "bool"]):
            with gr.Row():
                for setting in row:
                    ui[setting.name] = widget(setting, preset[setting.name])
    with gr.Row():
        ui["shade"] = gr.Checkbox(True, label="shade tokens by how they were made")
        ui["mode"] = gr.Radio(list(TREE_MODES), value=DEFAULT_MODE, label="tree nodes shown")
        ui["speed"] = gr.Radio(REPLAY_SPEEDS, value="1×", label="replay speed")


def widget(setting: Setting, value: Any) -> Any:
    """The input for a declared setting, within the app's range: a slider where it has a step, a number box
    otherwise, a text box for DDD's list of checks. A slider counts its values from its minimum, so it starts at
    the first multiple of its step: max new tokens go 8, 16, ... while the API may still ask for 1."""
    options = dict(label=label(setting), info=setting.help, min_width=WIDGET_WIDTH)
    if setting.kind == "calls":
        return gr.Textbox(setting.ui_value(value), **options)
    if setting.kind == "bool":
        return gr.Checkbox(value, **options)
    if setting.step is None:
        return CheckedNumber(value, precision=0 if setting.kind == "int" else None, **options)
    return CheckedSlider(slider_minimum(setting, setting.step), setting.bounds(ui=True)[1], value=value,
                         step=setting.step, **options)


def slider_minimum(setting: Setting, step: float) -> float:
    """A slider's first value: the first multiple of its step in the app's range, one step above a low end the
    setting refuses (a draft call always costs something)."""
    low = setting.bounds(ui=True)[0]
    first = math.ceil(round(low / step, 9)) * step
    refused = setting.above_low and setting.ui_low is None
    return first + step if refused and first <= low else first


def _step_through(ui: Ui) -> None:
    with gr.Row():
        ui["first"] = gr.Button("« First", size="sm", min_width=60)
        ui["prev"] = gr.Button("‹ Prev", size="sm", min_width=60)
        ui["play"] = gr.Button(PLAY, size="sm", min_width=60, elem_id="play")
        ui["next"] = gr.Button("Next ›", size="sm", min_width=60, elem_id="next")
        ui["last"] = gr.Button("Last »", size="sm", min_width=60)
    ui["slider"] = CheckedSlider(0, 1, value=0, step=1, label="step (0 = prefill)", elem_id="step-slider")
    with gr.Row(equal_height=False):
        for method in TREE_METHODS:
            title = METHOD_LABELS[method]
            with gr.Column(visible=method in RACE_METHODS) as ui[f"steps_{method}"]:
                gr.Markdown(f"**{title}** — text so far (current step outlined)")
                ui[f"txt_{method}"] = gr.HTML(elem_classes="small")
                ui[f"tree_{method}"] = gr.Plot(label=f"{title} draft tree", elem_id=f"tree-{method}")
    ui["narration"] = gr.Markdown(elem_id="narration")
    ui["depth"] = gr.Plot(label="Depth & confidence", elem_id="depth")
