"""Callbacks that show a race: an example, a loaded file, one step, the step-through controls. Each returns
{component: value} for the components it changes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import get_upload_folder, is_in_or_equal

from components import RaceFileError, load_race
from components.answer import answer_html
from components.inputs import COST_SWITCH, step_index
from components.race import COST_METHOD, RACE_METHODS, TREE_METHODS
from components.tokens import escape
from components.views import PAUSE, PLAY, column_views, race_views, step_view

from .examples import ExampleShelf
from .layout import COLUMNS, COST_PARTS, STEP_OUTPUTS, TREE_MODES, Ui, column_outputs
from .sessions import Session, Sessions


def message(text: str = "", kind: str = "error") -> dict[str, Any]:
    """The message line: hidden when empty; `kind` (error or note) picks its box."""
    if not text:
        return gr.update(value="", visible=False)
    return gr.update(value=f"<div class='{kind}-box'>{escape(text)}</div>", visible=True)


def warn(text: str) -> None:
    """A warning toast; Gradio renders its message as HTML, and the text may quote a file or a setting."""
    gr.Warning(escape(text))


def last_step(session: Session | None) -> int:
    return max((session.race.decode_steps() if session and session.race else 1) - 1, 0)


class Viewer:
    """Shows the session's race; never touches a model."""

    def __init__(self, ui: Ui, sessions: Sessions, shelf: ExampleShelf):
        self.ui, self.sessions, self.shelf = ui, sessions, shelf

    def show_race(self, session: Session, shade: bool, mode: str, text: str = "", kind: str = "note",
                  loaded: bool = False) -> dict:
        """Every race output for the session's race, positioned at step 1. A `loaded` race (a file, an example) sets
        the cost column's switch to whether it holds the cost rule's run."""
        ui, race = self.ui, session.race
        has_cost = race is not None and COST_METHOD in race.traces
        views = race_views(race, shade)
        count = views["steps"]
        start = 1 if count > 1 else 0
        step = step_view(race, start, shade, TREE_MODES.get(mode, "shown"))
        return {
            **dict(zip(ui.of(COLUMNS), views["columns"])),
            # Gradio refuses a slider whose minimum equals its maximum: a one-step race keeps 0..1, inactive.
            ui["slider"]: gr.update(minimum=0, maximum=max(count - 1, 1), value=start, step=1, interactive=count > 1),
            **self._step_values(step),
            ui["timeline"]: views["timeline"], ui["summary"]: views["summary"], ui["about"]: views["about"],
            ui["info"]: views["info"], ui["headline"]: views["headline"],
            ui["download"]: gr.update(value=self.sessions.export(session), interactive=race is not None),
            ui["page"]: gr.update(value=None, visible=False),
            ui["message"]: message(text, kind),
            ui["session"]: session,
            # A race with the cost rule's run switches its column on; a loaded one without it switches it off (its
            # column would show "not run"), a raced one (stopped before the rule's first step) leaves it as it was.
            ui[COST_SWITCH]: has_cost if has_cost or loaded else gr.skip(),
        }

    def save_page(self, session: Session | None, request: gr.Request) -> dict:
        """The session's race as a page of its own, offered for download; or the message line says why not."""
        saved = self.sessions.export_page(session or Session(), request.session_hash if request else None)
        return {self.ui["page"]: gr.update(value=saved.path, visible=saved.path is not None),
                self.ui["message"]: message(saved.note, "note")}

    def _step_values(self, view) -> dict:
        values = [*(view.texts[m] for m in TREE_METHODS), *(view.trees[m] for m in TREE_METHODS), view.narration,
                  view.depth]
        return dict(zip(self.ui.of(STEP_OUTPUTS), values, strict=True))

    def show_cost(self, on: bool) -> dict:
        """The cost column's switch: its settings and columns shown or hidden."""
        return {self.ui[name]: gr.update(visible=bool(on)) for name in COST_PARTS}

    def load_example(self, name: str | None, shade: bool, mode: str, session: Session | None) -> dict:
        session = session or Session()
        files = self.shelf.files()
        if not files:
            return self.show_race(session, shade, mode, "No recorded examples ship with this copy: press Run.")
        path = files.get(name) if name else next(iter(files.values()))
        if path is None:
            return self.show_race(session, shade, mode, f"There is no example called {name!r}.", "error")
        try:
            session.race, session.source = self.shelf.read(path), str(path)
        except (RaceFileError, OSError) as err:
            return self.show_race(session, shade, mode, str(err), "error")
        return self.show_race(session, shade, mode, loaded=True)

    def load_file(self, file: str | None, shade: bool, mode: str, session: Session | None) -> dict:
        session = session or Session()
        if not file:
            return self.show_race(session, shade, mode)
        try:
            session.race, session.source = load_race(file), None
        except RaceFileError as err:
            return self.show_race(session, shade, mode, f"Could not load that file: {err}", "error")
        finally:
            # Read once, never served back: an upload leaves Gradio's cache now rather than at its age.
            if is_in_or_equal(file, get_upload_folder()):
                Path(file).unlink(missing_ok=True)
        return self.show_race(session, shade, mode, loaded=True)

    def reshade(self, shade: bool, index: float | None, session: Session | None) -> dict:
        """Shading on or off: only the texts change, the figures stay as they are."""
        race = session.race if session else None
        columns = race.columns() if race else RACE_METHODS
        values = dict(zip(self.ui.of(column_outputs(columns)), column_views(race, shade, columns)))
        for method in (m for m in TREE_METHODS if m in columns):
            trace = race.get(method) if race else None
            step = min(int(index or 0), len(trace.steps) - 1) if trace and trace.steps else None
            values[self.ui[f"txt_{method}"]] = answer_html(trace, upto=step, current=step, shade=shade,
                                                          placeholder="(no run)")
        return values

    def show_step(self, index: float | None, shade: bool, mode: str, session: Session | None) -> dict:
        race = session.race if session else None
        at = step_index(index, race.decode_steps() - 1 if race else 0)
        return self._step_values(step_view(race, at, shade, TREE_MODES.get(mode, "shown")))

    def move(self, where: str, index: float | None, session: Session | None) -> int:
        """The slider position after first / prev / next / last."""
        last, index = last_step(session), int(index or 0)
        return {"first": 0, "prev": max(index - 1, 0), "next": min(index + 1, last), "last": last}.get(where, index)

    def toggle_play(self, playing: bool, index: float | None, session: Session | None) -> dict:
        """Play / pause the step-through; playing from the last step starts over."""
        ui, playing = self.ui, not playing
        start = 0 if playing and int(index or 0) >= last_step(session) else int(index or 0)
        return {ui["playing"]: playing, ui["timer"]: gr.Timer(active=playing),
                ui["play"]: gr.update(value=PAUSE if playing else PLAY), ui["slider"]: start}

    def tick(self, playing: bool, index: float | None, session: Session | None) -> dict:
        ui, index = self.ui, int(index or 0)
        if not playing or index >= last_step(session):
            return {ui["playing"]: False, ui["timer"]: gr.Timer(active=False), ui["play"]: gr.update(value=PLAY)}
        return {ui["playing"]: True, ui["slider"]: index + 1}
