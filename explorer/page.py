"""The page: the layout, with each component's events wired to the callbacks that serve it."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse
from gradio.processing_utils import get_upload_folder
from gradio.route_utils import FnIndexInferError
from gradio.utils import is_in_or_equal
from gradio_client.utils import is_http_url_like

from components.exports import CACHE_CLEANUP
from components.inputs import COST_SWITCH
from components.race import TREE_METHODS
from components.tokens import escape
from components.jsonfile import is_text

from .choosing import ModelMenu, menu_items
from .examples import ExampleShelf
from .gputime import GpuTime, call_start_s, space_races
from .layout import COLUMNS, COST_PARTS, RACE_OUTPUTS, SETTINGS, STEP_OUTPUTS, Ui, layout
from .lesson import LINK_OUTPUTS, LessonPanel, wire as wire_lesson
from .models import ModelChoice, Models
from .presets import PRESET_FIELDS, opening_preset
from .racing import device_measure, device_race, zero_gpu
from .queueing import QUEUE_POLL_S, QUEUE_SIZE, SWITCH_INTERVAL_S
from .running import Runner
from .sessions import Session, Sessions
from .viewing import Viewer
from .whatif import WhatIfPanel, place as place_whatif, wire as wire_whatif

# Every race goes straight into the app's own line (explorer.queueing: one decodes, the others wait there, told their
# place and wait from the first second; Stop reaches them at once, API calls included): Gradio's queue holds none.
# Each waiting race holds one of Gradio's worker threads, so the pool has room for a full line beside the rest.
RACE_SLOTS = QUEUE_SIZE + 1
WORKER_THREADS = 40 + RACE_SLOTS


class CheckedBlocks(gr.Blocks):
    """gr.Blocks that answers a malformed call with a message, where Gradio itself would answer a bare "Error": too
    few values for an event, or a file input that is not a file uploaded to this app (a path on the server, a URL:
    never read, never fetched)."""

    def validate_inputs(self, block_fn: Any, inputs: list[Any]) -> None:
        if len(inputs) < len(block_fn.inputs):
            names = ", ".join("null (the session)" if getattr(c, "stateful", False) else
                              str(getattr(c, "label", None) or getattr(c, "elem_id", None) or type(c).__name__)
                              for c in block_fn.inputs)
            raise gr.Error(f"{_endpoint(block_fn)} takes {len(block_fn.inputs)} values, in this order: {names}; this "
                           f"call sent {len(inputs)}.")

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        """Launched as gr.Blocks is, with a sentence for a route or an endpoint that does not exist (404)."""
        app_kwargs = dict(kwargs.pop("app_kwargs", None) or {})
        app_kwargs["exception_handlers"] = {**app_kwargs.get("exception_handlers", {}), 404: _not_found,
                                            FnIndexInferError: _no_endpoint}
        kwargs.setdefault("max_threads", WORKER_THREADS)
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # the process is the app's: its races keep their pace
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)

    async def preprocess_data(self, block_fn: Any, inputs: list[Any], state: Any, explicit_call: bool = False) -> Any:
        self.validate_inputs(block_fn, inputs)
        inputs = [*(_as_choice(block, value) for block, value in zip(block_fn.inputs, inputs)),
                  *inputs[len(block_fn.inputs):]]
        for block, value in zip(block_fn.inputs, inputs):
            if isinstance(block, (gr.UploadButton, gr.File)) and value is not None:
                _check_upload(value, _endpoint(block_fn))
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error:
            raise
        except Exception as err:  # noqa: BLE001 - whatever Gradio raised on a value it could not read
            raise gr.Error(f"{_endpoint(block_fn)} could not read the values it was sent ({type(err).__name__}): "
                           "see the API page for what each one takes.") from None


async def _not_found(request: Request, err: Exception) -> JSONResponse:
    detail = getattr(err, "detail", None)
    if detail in (None, "Not Found"):  # Starlette's words for a route it does not have
        detail = (f"This app has nothing at {request.url.path}: its page is / and its API endpoints are listed at "
                  "/?view=api.")
    return JSONResponse({"detail": detail}, status_code=404)


async def _no_endpoint(request: Request, err: Exception) -> JSONResponse:
    return JSONResponse({"detail": f"This app has no endpoint at {request.url.path}: its API endpoints are listed at "
                                   "/?view=api."}, status_code=404)


def _as_choice(block: Any, value: Any) -> Any:
    """A radio's value as its choices hold it: a chapter the API page lists as 3 may come as "3" (or 3.0)."""
    if not isinstance(block, gr.Radio) or not isinstance(value, str):
        return value
    for _, choice in block.choices:
        try:
            if not isinstance(choice, (bool, str)) and float(value) == choice:
                return choice
        except ValueError:
            return value
    return value


def _endpoint(block_fn: Any) -> str:
    return f"/{block_fn.api_name}" if block_fn.api_name else "This event"


def _check_upload(value: Any, endpoint: str) -> None:
    """A file input must name a file uploaded to this app: its path inside Gradio's upload folder."""
    path = value.get("path") if isinstance(value, dict) else None
    if isinstance(path, str) and not is_text(path):
        raise gr.Error(f"{endpoint} was sent a file name that holds a lone surrogate (half of a UTF-16 pair), which no "
                       "file system can store: rename the file and upload it again.")
    uploaded = (isinstance(path, str) and not is_http_url_like(path)
                and value.get("meta", {}).get("_type") == "gradio.FileData"
                and is_in_or_equal(path, get_upload_folder()))
    if not uploaded:
        raise gr.Error(f"{endpoint} reads a run file uploaded to this app (upload it first, as gradio_client's "
                       "handle_file does); it never reads a path on the server or fetches a URL.")


def start_up_html(models: Models) -> str:
    """The start-up's sentence as a note under the intro ("" when there is none to say)."""
    words = models.start_up_words()
    return f"<div class='note-box' role='status'>{escape(words)}</div>" if words else ""


@dataclass
class Page:
    demo: gr.Blocks
    ui: Ui
    viewer: Viewer
    runner: Runner
    menu: ModelMenu
    lesson: LessonPanel


def build_page(models: Models, shelf: ExampleShelf, sessions: Sessions | None = None, preset: str | None = None) -> Page:
    """The page over `models`; `preset`: the tree settings it opens on (explorer.presets.opening_preset)."""
    sessions = sessions or Sessions()
    # On ZeroGPU: each held pair's default race as the GPU projection has it, until this Space times one; the intro
    # says why the Space opens on its own pair, beside the small default pair (the quick one) where it holds both.
    races = space_races(models) if zero_gpu() else {}
    own, small = models.key(None), models.key(ModelChoice(None, None))
    with CheckedBlocks(title="DDD Explorer", delete_cache=CACHE_CLEANUP) as demo:
        items = menu_items(models)
        ui = layout(list(shelf.files()), models.precisions(), models.default_precision(),
                    opening_preset(models, preset), models.describe(), items.labels, items.chosen, items.shown,
                    items.typed, Session, sessions.close, races.get(own), races.get(small) if small != own else None,
                    start_up_html(models))
        place_whatif(ui)  # under the race, the page's last part
        viewer = Viewer(ui, sessions, shelf)
        gpu = GpuTime({key: race.pace for key, race in races.items()},
                      call_start_s(models.loaded_bytes())) if zero_gpu() else None
        runner = Runner(ui, models, sessions, viewer, device_race(models), device_measure(models), gpu)
        lesson = LessonPanel(ui, shelf)
        _wire_viewing(demo, ui, viewer, lesson)
        wire_lesson(ui, lesson)
        menu = ModelMenu(ui, models)
        # A choice only reads the model's config (to check it fits): it never waits behind a race.
        ui["choose"].click(menu.choose, ui.of(["model_menu", "model_id", "head_id", "session"]),
                           ui.of(["model_info", "message", "preset", *PRESET_FIELDS, "session"]),
                           api_name="choose_model", concurrency_id="menu", concurrency_limit=2)
        _wire_running(ui, runner, menu)
        wire_whatif(ui, WhatIfPanel(ui))
    demo.queue(default_concurrency_limit=4, max_size=QUEUE_SIZE)
    demo._queue.sleep_when_free = QUEUE_POLL_S  # Gradio has no public setting for it (tests/test_app.py checks it)
    return Page(demo, ui, viewer, runner, menu, lesson)


def _wire_viewing(demo: gr.Blocks, ui: Ui, viewer: Viewer, lesson: LessonPanel) -> None:
    view_inputs = ui.of(["shade", "mode", "session"])
    race_outputs, step_outputs = ui.of(RACE_OUTPUTS), ui.of(STEP_OUTPUTS)
    play_outputs = ui.of(["playing", "timer", "play", "slider"])
    # A link may name a lesson chapter, an example, its prompt and threshold (explorer/lesson.py): read first.
    opened = demo.load(lesson.from_link, None, ui.of(LINK_OUTPUTS), api_name=False, show_progress="hidden")
    opened.then(viewer.load_example, [ui["example"], *view_inputs], race_outputs, api_name="open_example")
    ui["example"].input(viewer.load_example, [ui["example"], *view_inputs], race_outputs, api_name=False)
    ui["upload"].upload(viewer.load_file, [ui["upload"], *view_inputs], race_outputs, api_name="load_file")
    ui["save_page"].click(viewer.save_page, ui["session"], ui.of(["page", "message"]), api_name="save_page",
                          concurrency_id="page", concurrency_limit=1)

    def closed(request: gr.Request) -> None:
        viewer.sessions.closed_tab(request.session_hash)

    demo.unload(closed)
    ui["shade"].input(viewer.reshade, ui.of(["shade", "slider", "session"]),
                      ui.of([*COLUMNS, *(f"txt_{m}" for m in TREE_METHODS)]), api_name=False)
    # .change, not .input: a loaded race with the cost rule's run switches it on too.
    ui[COST_SWITCH].change(viewer.show_cost, ui[COST_SWITCH], ui.of(COST_PARTS), api_name=False, queue=False)
    ui["mode"].input(viewer.show_step, [ui["slider"], *view_inputs], step_outputs, api_name=False)
    ui["slider"].change(viewer.show_step, [ui["slider"], *view_inputs], step_outputs, api_name="show_step",
                        show_progress="hidden", trigger_mode="always_last")
    for where in ("first", "prev", "next", "last"):
        ui[where].click(lambda i, s, w=where: viewer.move(w, i, s), ui.of(["slider", "session"]), ui["slider"],
                        api_name=False, show_progress="hidden")
    ui["play"].click(viewer.toggle_play, ui.of(["playing", "slider", "session"]), play_outputs, api_name=False)
    ui["timer"].tick(viewer.tick, ui.of(["playing", "slider", "session"]), play_outputs, api_name=False,
                     show_progress="hidden")


def _wire_running(ui: Ui, runner: Runner, menu: ModelMenu) -> None:
    ui["preset"].input(runner.apply_preset, ui.of(["preset", "precision", "session"]), ui.of(PRESET_FIELDS),
                       api_name=False)
    run_inputs = ui.of(["prompt", *SETTINGS, "shade", "mode", "session"])
    replay_inputs, replay_outputs = ui.of(["shade", "speed", "session"]), ui.of([*COLUMNS, "message"])
    race_outputs = ui.of(RACE_OUTPUTS)
    for trigger, api_name in ((ui["run"].click, "run"), (ui["prompt"].submit, False)):
        event = trigger(runner.mark_queued, [ui["session"]], None, queue=False, api_name=False).then(
            runner.run_race, run_inputs, race_outputs, api_name=api_name, concurrency_id="race",
            concurrency_limit=RACE_SLOTS)
        event.then(menu.describe, [ui["session"]], ui["model_info"], api_name=False)
        event.then(runner.replay_finished_race, replay_inputs, replay_outputs, api_name=False, concurrency_limit=None)
    ui["replay"].click(runner.replay, replay_inputs, replay_outputs, api_name="replay", concurrency_limit=None)
    ui["stop"].click(runner.on_stop, [ui["session"]], ui["message"], api_name="stop", concurrency_limit=None,
                     queue=False)
