"""The page: the layout, with each component's events wired to the callbacks that serve it."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from components.exports import CACHE_CLEANUP

from .choosing import ModelMenu, current_label, menu_labels
from .examples import ExampleShelf
from .layout import COLUMNS, RACE_OUTPUTS, SETTINGS, STEP_OUTPUTS, Ui, layout
from .models import Models
from .presets import PRESET_FIELDS, default_preset
from .racing import device_measure, device_race
from .running import Runner
from .sessions import Session, Sessions
from .viewing import Viewer

QUEUE_SIZE = 64  # visitors waiting at most; past it the page says the queue is full


@dataclass
class Page:
    demo: gr.Blocks
    ui: Ui
    viewer: Viewer
    runner: Runner
    menu: ModelMenu


def build_page(models: Models, shelf: ExampleShelf, sessions: Sessions | None = None) -> Page:
    sessions = sessions or Sessions()
    with gr.Blocks(title="DDD Explorer", delete_cache=CACHE_CLEANUP) as demo:
        ui = layout(list(shelf.files()), models.precisions(), models.default_precision(),
                    default_preset(models.device()), models.describe(), menu_labels(models.device()),
                    current_label(models), not models.pinned, Session, sessions.close)
        viewer = Viewer(ui, sessions, shelf)
        runner = Runner(ui, models, sessions, viewer, device_race(models), device_measure(models))
        _wire_viewing(demo, ui, viewer)
        _wire_running(ui, runner, models)
        menu = ModelMenu(ui, models)
        ui["choose"].click(menu.choose, ui.of(["model_menu", "model_id", "head_id"]),
                           ui.of(["model_info", "message", "preset", *PRESET_FIELDS]), api_name="choose_model",
                           concurrency_id="model", concurrency_limit=1)
    demo.queue(default_concurrency_limit=4, max_size=QUEUE_SIZE)
    return Page(demo, ui, viewer, runner, menu)


def _wire_viewing(demo: gr.Blocks, ui: Ui, viewer: Viewer) -> None:
    view_inputs = ui.of(["shade", "mode", "session"])
    race_outputs, step_outputs = ui.of(RACE_OUTPUTS), ui.of(STEP_OUTPUTS)
    play_outputs = ui.of(["playing", "timer", "play", "slider"])
    demo.load(viewer.load_example, [ui["example"], *view_inputs], race_outputs, api_name="open_example")
    ui["example"].input(viewer.load_example, [ui["example"], *view_inputs], race_outputs, api_name=False)
    ui["upload"].upload(viewer.load_file, [ui["upload"], *view_inputs], race_outputs, api_name="load_file")
    ui["shade"].input(viewer.reshade, ui.of(["shade", "slider", "session"]),
                      ui.of([*COLUMNS, "txt_eagle2", "txt_ddd"]), api_name=False)
    ui["mode"].input(viewer.show_step, [ui["slider"], *view_inputs], step_outputs, api_name=False)
    ui["slider"].change(viewer.show_step, [ui["slider"], *view_inputs], step_outputs, api_name="show_step",
                        show_progress="hidden", trigger_mode="always_last")
    for where in ("first", "prev", "next", "last"):
        ui[where].click(lambda i, s, w=where: viewer.move(w, i, s), ui.of(["slider", "session"]), ui["slider"],
                        api_name=False, show_progress="hidden")
    ui["play"].click(viewer.toggle_play, ui.of(["playing", "slider", "session"]), play_outputs, api_name=False)
    ui["timer"].tick(viewer.tick, ui.of(["playing", "slider", "session"]), play_outputs, api_name=False,
                     show_progress="hidden")


def _wire_running(ui: Ui, runner: Runner, models: Models) -> None:
    ui["preset"].input(runner.apply_preset, ui.of(["preset", "precision"]), ui.of(PRESET_FIELDS), api_name=False)
    run_inputs = ui.of(["prompt", *SETTINGS, "shade", "mode", "session"])
    replay_inputs, replay_outputs = ui.of(["shade", "speed", "session"]), ui.of([*COLUMNS, "message"])
    race_outputs = ui.of(RACE_OUTPUTS)
    for trigger, api_name in ((ui["run"].click, "run"), (ui["prompt"].submit, False)):
        event = trigger(runner.mark_queued, [ui["session"]], None, queue=False, api_name=False).then(
            runner.run_race, run_inputs, race_outputs, api_name=api_name, concurrency_id="model", concurrency_limit=1)
        event.then(models.describe, None, ui["model_info"], api_name=False)
        event.then(runner.replay_finished_race, replay_inputs, replay_outputs, api_name=False, concurrency_limit=None)
    ui["replay"].click(runner.replay, replay_inputs, replay_outputs, api_name="replay", concurrency_limit=None)
    ui["stop"].click(runner.request_stop, [ui["session"]], ui["message"], api_name="stop", concurrency_limit=None,
                     queue=False)
