"""The page's components and their places; no behaviour (explorer.page wires the callbacks to them)."""
from __future__ import annotations

from typing import Any

import gradio as gr

from components.answer import LEGEND, answer_html, counters_html
from components.race import RACE_METHODS
from components.verdict import headline_html
from components.widgets import CheckedNumber, CheckedSlider

from .examples import EXAMPLE_PROMPTS
from .presets import PRESET_NAMES, PRESETS

INTRO = """# DDD Explorer
**What you are seeing:** one model answers your prompt three ways. Plain decoding makes one token per forward pass.
**EAGLE-2** drafts a tree of guesses with a small head and lets the model check them all in one pass; **DDD** does the same
but chooses how deep to draft from the draft's own confidence. The headline says who was faster and whether it was more than noise."""
PRECISION_INFO = ("int8 (CPU only): verifying a tree costs least, so speculative decoding pays most; its answers "
                  "differ from float32's. bfloat16 runs slower on most CPUs. All three methods use the one chosen.")
TREE_MODES = {"verified + best dropped": "shown", "verified only": "verified", "whole candidate pool": "all"}
REPLAY_SPEEDS = ["0.5×", "1×", "2×", "4×"]
# The outputs of the callbacks that show a whole race, and those that show one step, in the API's order.
RACE_OUTPUTS = ["ans_plain", "ans_eagle2", "ans_ddd", "cnt_plain", "cnt_eagle2", "cnt_ddd", "slider",
                "txt_eagle2", "txt_ddd", "tree_eagle2", "tree_ddd", "narration", "depth", "timeline", "summary",
                "about", "info", "headline", "download", "message", "session"]
COLUMNS = RACE_OUTPUTS[:6]
STEP_OUTPUTS = ["txt_eagle2", "txt_ddd", "tree_eagle2", "tree_ddd", "narration", "depth"]
SETTINGS = ["max_new_tokens", "temperature", "top_p", "seed", "precision", "e_top_k", "e_calls", "e_total",
            "d_calls", "d_checks", "d_threshold"]


class Ui(dict):
    """The page's components by name."""

    def of(self, names: list[str]) -> list[Any]:
        return [self[n] for n in names]

    def named(self, values: dict) -> dict[str, Any]:
        """A callback's {component: value} as {name: value} (for reading results in tests and logs)."""
        names = {id(c): n for n, c in self.items()}
        return {names[id(c)]: v for c, v in values.items()}


def layout(examples: list[str], precisions: list[str], precision: str, preset: str, model_info: str,
           menu: list[str], chosen: str, menu_on: bool, new_session, close_session) -> Ui:
    """Place every component (inside an open gr.Blocks)."""
    ui = Ui()
    ui["session"] = gr.State(new_session, delete_callback=close_session)
    ui["playing"] = gr.State(False)
    gr.Markdown(INTRO, elem_id="intro")
    with gr.Row(equal_height=False):
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
            ui["info"] = gr.HTML(elem_classes="race-info")
    with gr.Accordion("Settings", open=False):
        _settings(ui, precisions, precision, preset, model_info, menu, chosen, menu_on)
    ui["message"] = gr.HTML(visible=False, elem_id="message")
    ui["headline"] = gr.HTML(headline_html({}), elem_id="headline")
    with gr.Row(equal_height=False):
        for method in RACE_METHODS:
            with gr.Column(min_width=260):
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


def _settings(ui: Ui, precisions: list[str], precision: str, preset_name: str, model_info: str,
              menu: list[str], chosen: str, menu_on: bool) -> None:
    ui["model_info"] = gr.Markdown(model_info)
    with gr.Row(visible=menu_on):
        ui["model_menu"] = gr.Dropdown(menu, value=chosen, label="model and draft head", scale=3)
        ui["model_id"] = gr.Textbox(label="model's hub id", max_lines=1, scale=2)
        ui["head_id"] = gr.Textbox(label="draft head's hub id (or 'random')", max_lines=1, scale=2)
        ui["choose"] = gr.Button("Use this model", size="sm", scale=1)
    with gr.Row():
        ui["max_new_tokens"] = CheckedSlider(8, 512, value=64, step=8, label="max new tokens")
        ui["temperature"] = CheckedSlider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)")
        ui["top_p"] = CheckedSlider(0.05, 1, value=1, step=0.05, label="top-p")
        ui["seed"] = CheckedNumber(0, precision=0, label="seed")
        ui["precision"] = gr.Radio(precisions, value=precision, label="precision (target and head, all three methods)",
                                   info=PRECISION_INFO)
    preset = PRESETS[preset_name]
    ui["preset"] = gr.Radio(PRESET_NAMES, value=preset_name, label="preset for the settings below")
    with gr.Row():
        ui["e_top_k"] = CheckedSlider(1, 32, value=preset["e_top_k"], step=1, label="EAGLE-2 / DDD top-k (beam width)")
        ui["e_calls"] = CheckedSlider(1, 16, value=preset["e_calls"], step=1, label="EAGLE-2 draft calls (tree depth)")
        ui["e_total"] = CheckedSlider(2, 128, value=preset["e_total"], step=1,
                                      label="total tokens verified (EAGLE-2 / DDD)")
    with gr.Row():
        ui["d_calls"] = CheckedSlider(1, 24, value=preset["d_calls"], step=1, label="DDD max draft calls")
        ui["d_checks"] = gr.Textbox(preset["d_checks"], label="DDD check after calls ('5,7,9' or 'all')")
        ui["d_threshold"] = CheckedNumber(preset["d_threshold"], label="DDD threshold on H (≤ 0)")
    with gr.Row():
        ui["shade"] = gr.Checkbox(True, label="shade tokens by how they were made")
        ui["mode"] = gr.Radio(list(TREE_MODES), value=next(iter(TREE_MODES)), label="tree nodes shown")
        ui["speed"] = gr.Radio(REPLAY_SPEEDS, value="1×", label="replay speed")


def _step_through(ui: Ui) -> None:
    with gr.Row():
        ui["first"] = gr.Button("« First", size="sm", min_width=60)
        ui["prev"] = gr.Button("‹ Prev", size="sm", min_width=60)
        ui["play"] = gr.Button("▶ Play", size="sm", min_width=60, elem_id="play")
        ui["next"] = gr.Button("Next ›", size="sm", min_width=60, elem_id="next")
        ui["last"] = gr.Button("Last »", size="sm", min_width=60)
    ui["slider"] = CheckedSlider(0, 1, value=0, step=1, label="step (0 = prefill)", elem_id="step-slider")
    with gr.Row(equal_height=False):
        for method, label in (("eagle2", "EAGLE-2"), ("ddd", "DDD")):
            with gr.Column():
                gr.Markdown(f"**{label}** — text so far (current step outlined)")
                ui[f"txt_{method}"] = gr.HTML(elem_classes="small")
                ui[f"tree_{method}"] = gr.Plot(label=f"{label} draft tree", elem_id=f"tree-{method}")
    ui["narration"] = gr.Markdown(elem_id="narration")
    ui["depth"] = gr.Plot(label="Depth & confidence", elem_id="depth")
