"""Callbacks that run a race, stop it, replay it, and fill in a preset. Each returns {component: value}."""
from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import closing
from typing import Any

import gradio as gr

from components import Race
from components.answer import answer_html, counters_html
from components.inputs import TREE_NAMES, InputError, race_inputs, replay_speed
from components.race import METHOD_LABELS
from components.replay import frame_times, steps_done
from ddd import HeadLoadError, ModelLoadError
from ddd.numbers import readable
from ddd.settings import Sampling
from ddd.turns import WARM_UP_PROMPT

from .gputime import (ACCOUNT_QUOTA_S, DURATION_FACTOR, WARM_UP_TOKENS, GpuAnswer, GpuTime, Quota, counted,
                      refusal_words, too_long_words)
from .layout import COLUMNS, DEFAULT_MODE, Ui
from .models import Key, ModelChoice, Models
from .presets import MEASURED, PRESET_FIELDS, PRESETS, race_entries, widget_values
from .queueing import QUEUE_SIZE, QueueFull, RaceLine, Ticket, Work
from .racing import LiveRace, RaceEvent, RaceRequest
from .sessions import Session, Sessions
from .viewing import Viewer, message, warn

RACING_STATUS = "Racing: each method takes one target forward in turn, so a busy machine slows them all alike…"
REPLAY_FPS = 8
WAIT_POLL_S = 0.2  # how often a race waiting for its turn looks at its Stop


def waiting_words(ahead: int, left_s: float | None) -> str:
    """A waiting race's line: its place, and the wait the latest races of its pair and length foretell."""
    about = f", about {readable(left_s, 2)} s to wait" if left_s is not None else ""
    return f"Waiting for its turn: {ahead} race{'s' if ahead > 1 else ''} ahead of this one{about} (Stop cancels it)."


def racing(methods: tuple[str, ...]) -> str:
    """The headline while a race runs: who takes turns, and why."""
    names = [METHOD_LABELS[m] if m != "plain" else "plain" for m in methods]
    return (f"<div class='headline empty'>Racing: {', '.join(names[:-1])} and {names[-1]} take turns, one target "
            "forward each, so a busy machine slows them all alike. The verdict comes at the end.</div>")


class Runner:
    """Runs races through `race` (explorer.racing.device_race) and shows them through `viewer`. On ZeroGPU `gpu`
    sizes each race's GPU time from the races before it."""

    def __init__(self, ui: Ui, models: Models, sessions: Sessions, viewer: Viewer,
                 race: Callable[[RaceRequest], Iterator[RaceEvent]], measure: Callable[[str], dict[str, Any]],
                 gpu: GpuTime | None = None):
        self.ui, self.models, self.sessions, self.viewer = ui, models, sessions, viewer
        self.race, self.measure, self.gpu = race, measure, gpu
        self.stream_every_s = 0.12  # how often the streaming columns are redrawn
        self.line = RaceLine(QUEUE_SIZE)  # every race waits here, none in Gradio's queue (explorer.page)

    # -- running --------------------------------------------------------------------------------------

    def run_race(self, prompt: Any, max_new_tokens: Any, temperature: Any, top_p: Any, seed: Any, precision: Any,
                 *tree_and_view: Any) -> Iterator[dict]:
        """Race plain, EAGLE-2, DDD (and the cost rule, when switched on) on the prompt, streaming their columns;
        then show every view. `tree_and_view`: the tree settings (in the order of TREE_NAMES), the cost column's
        switch, then shade, mode and the session."""
        *tree, race_cost, shade, mode, session = tree_and_view
        session = session or Session()
        queued, session.queued = session.queued, False
        if queued and session.stop_requested:
            session.clear_stop()
            yield self._error(session, "Stopped before the race started: nothing ran.", "note")
            return
        try:
            checked = race_inputs(prompt, max_new_tokens, temperature, top_p, seed, precision, self.models.precisions(),
                                  race_cost, **dict(zip(TREE_NAMES, tree, strict=True)))
        except InputError as err:
            yield self._error(session, str(err))
            return
        if session.busy:
            yield self._error(session, "A run is already going in this tab: wait for it or press Stop.")
            return
        session.busy = True
        session.clear_stop()
        request = RaceRequest(checked.prompt, race_entries(checked.tree, checked.methods), checked.max_new_tokens,
                              checked.sampling,
                              checked.precision or self.models.default_precision(), session.stop_file, session.choice)
        try:
            ticket = self.line.join(self._work(request))
        except QueueFull as full:
            session.busy = False
            yield self._error(session, str(full))
            return
        finished = False
        try:
            if (yield from self._wait_for_turn(ticket, session)):
                finished = yield from self._race(request, shade, mode, session, ticket)
        finally:
            held = self.line.leave(ticket, finished)
            session.busy = session.waiting = False
            session.clear_stop()
        if held is not None:  # the queue's health, in the server's log
            print(f"A race of {request.max_new_tokens} tokens and {len(request.entries)} runs held the turn "
                  f"{held:.1f} s{'' if finished else ' (it did not run to its end)'}; {self.line.waiting()} waiting.",
                  flush=True)

    def time_a_race(self, tree: Mapping[str, Any], choice: ModelChoice | None = None) -> None:
        """Before the first visitor, charged to none: a short race of `tree` on `choice`'s pair, the way a visitor's
        goes (the line, the race, every view), so that the line can tell the first visitors their wait too and the
        first visitor's race does not pay for what only a first race pays for. A failure is said in the log."""
        session = Session()
        session.choice = choice
        precision = self.models.default_precision()
        request = RaceRequest(WARM_UP_PROMPT, race_entries(tree), WARM_UP_TOKENS, Sampling(), precision,
                              session.stop_file, choice)
        ticket = self.line.join(self._work(request))
        finished = False
        try:
            for _ in self._race(request, True, DEFAULT_MODE, session, ticket, visitor=False):
                pass
            finished = session.fresh  # every run went to its end
        except Exception as err:  # noqa: BLE001 - the app must start regardless
            print(f"Timing a race on {choice.model if choice else 'the default model'} failed: {err}", flush=True)
        finally:
            self.line.leave(ticket, finished)

    def _wait_for_turn(self, ticket: Ticket, session: Session) -> Iterator[dict]:
        """Wait for the races ahead, saying where this one stands and about how long is left each time a race
        leaves the line; False when Stop came first."""
        session.waiting, shown = True, 0
        ahead = self.line.ahead(ticket)
        while ahead:
            if session.stop_requested:
                yield self._error(session, "Stopped while waiting for its turn: nothing ran.", "note")
                return False
            if ahead != shown:
                shown = ahead
                yield self._error(session, waiting_words(ahead, self.line.wait_s(ticket)), "note")
            ahead = self.line.ahead(ticket, WAIT_POLL_S)
        session.waiting = False
        return True

    def _race(self, request: RaceRequest, shade: bool, mode: str, session: Session, ticket: Ticket,
              visitor: bool = True) -> Generator[dict, None, bool]:
        """The race, shown; True when every run went to its end (its time then joins the queue's estimates). A race
        of no `visitor` leaves ZeroGPU's paces to the start-up's timing (explorer.racing.time_start_up)."""
        live, methods = LiveRace(), tuple(request.entries)
        if self.gpu is not None:
            too_long = self._ask_gpu(request, session)
            if too_long:
                yield self.viewer.show_race(session, shade, mode, too_long, "error")
                return False
        start, answer, shown = time.perf_counter(), None, False
        try:
            shown = yield from self._events(request, live, methods, shade, mode, session, ticket)
        except gr.Error as err:  # ZeroGPU refused the race or ended it: part of its story, not an error state
            answer = GpuAnswer.read(err)
        if self.gpu is not None and visitor:
            self._charge(request, live, answer, time.perf_counter() - start, session)
        note = refusal_words(answer, self.gpu or GpuTime(), self._key(request), methods) if answer else ""
        if answer is not None and answer.kind == "quota":  # nothing ran: the race shown before stays
            yield self.viewer.show_race(session, shade, mode, note, "error")
            return False
        if shown:
            return False
        traces = live.finished()
        if not traces:  # stopped before the first token: keep the race that was shown
            yield self.viewer.show_race(session, shade, mode, note or "Stopped before any method produced a token.")
            return False
        stopped = session.stop_requested or not live.ended
        session.race, session.source = Race(traces=traces, note=live.note), None
        session.fresh = not stopped and len(traces) == len(request.entries)
        yield self.viewer.show_race(session, shade, mode, note or (("Stopped. " if stopped else "") + live.note))
        return session.fresh

    def _events(self, request: RaceRequest, live: LiveRace, methods: tuple[str, ...], shade: bool, mode: str,
                session: Session, ticket: Ticket) -> Generator[dict, None, bool]:
        """The race's events into `live`, streaming its columns and telling the line how far the race has got (its
        pace foretells the waits behind it); True when it ended with its message already shown (an error before
        anything ran, or Stop before it started)."""
        last = 0.0
        grace = len(request.entries)  # turns a stopped race may still hand out: each run finishes its step
        with closing(self.race(request)) as events:
            for event in events:
                if event.kind == "loading":
                    yield self._live(live, methods, shade, event.message, session)
                elif event.kind == "error":  # nothing ran: the race shown before comes back, with why
                    yield self.viewer.show_race(session, shade, mode, event.message, "error")
                    return True
                elif event.kind == "stopped":
                    yield self.viewer.show_race(session, shade, mode, event.message)
                    return True
                else:
                    live.apply(event)
                    if session.stop_requested:
                        grace -= 1
                        if grace < 0:  # the race runs where the stop file is not seen: end it from here
                            break
                    if event.kind == "turn" and time.perf_counter() - last >= self.stream_every_s:
                        last = time.perf_counter()
                        self.line.progress(ticket, live.done_share(request.max_new_tokens, len(methods)))
                        yield self._live(live, methods, shade, RACING_STATUS, session)
        return False

    def _key(self, request: RaceRequest) -> Key:
        return self.models.key(request.choice, request.precision)

    def _work(self, request: RaceRequest) -> Work:
        """What the race asks of the line: its pair, new tokens and runs (explorer.queueing)."""
        return Work(self._key(request), request.max_new_tokens, len(request.entries))

    def _ask_gpu(self, request: RaceRequest, session: Session) -> str:
        """Size the race's GPU time from this Space's races (request.gpu_seconds); the words for a race that ZeroGPU
        would count as more than the visitor can have, which is then not asked for at all ("" when it may go)."""
        methods, key = tuple(request.entries), self._key(request)
        request.gpu_seconds = self.gpu.ask(key, methods, request.max_new_tokens)
        known = session.gpu_quota.current() if session.gpu_quota else None
        limit = known if known is not None else ACCOUNT_QUOTA_S
        if counted(request.gpu_seconds) <= limit:
            return ""
        return too_long_words(request.gpu_seconds, limit, self.gpu, key, methods, known is not None)

    def _charge(self, request: RaceRequest, live: LiveRace, answer: GpuAnswer | None, took: float,
                session: Session) -> None:
        """Learn from the race: its pace (what it decoded, complete or cut short) and what the visitor has left (the
        time it used, as ZeroGPU counts it)."""
        if answer is not None and answer.kind == "quota":
            session.gpu_quota = Quota.learnt(answer)
            return
        self.gpu.record(self._key(request), live.finished(), took)
        if session.gpu_quota is not None:
            used = min(took, counted(request.gpu_seconds)) * DURATION_FACTOR
            session.gpu_quota.left = max(session.gpu_quota.left - used, 0.0)

    def _live(self, live: LiveRace, methods: tuple[str, ...], shade: bool, status: str, session: Session) -> dict:
        """While decoding: the race's columns, their counters, the status line, and no headline until the end."""
        ui, values = self.ui, {}
        for method in methods:
            trace = live.traces.get(method)
            if trace is None:
                column, count = answer_html(None, placeholder="waiting for its turn…"), counters_html(method, [], "waiting")
            else:
                done = bool(trace.stop_reason)
                column = answer_html(trace, shade=shade, cursor=not done)
                count = counters_html(method, trace.steps, f"done: {trace.stop_reason}" if done else "running")
            values[ui[f"ans_{method}"]], values[ui[f"cnt_{method}"]] = column, count
        return {**values, ui["message"]: message(status, "note"), ui["headline"]: racing(methods), ui["session"]: session}

    def _error(self, session: Session, text: str, kind: str = "error") -> dict:
        return {self.ui["message"]: message(text, kind), self.ui["session"]: session}

    def skip(self, names: list[str]) -> dict:
        """Every output left as it is (Gradio 6 reads an empty dict as one value, not as "no change")."""
        return {self.ui[name]: gr.skip() for name in names}

    def on_stop(self, session: Session | None) -> dict:
        """The Stop button: the message line says at once what it stopped (nothing, when nothing was going)."""
        return message(self.request_stop(session), "note")

    def request_stop(self, session: Session | None) -> str:
        if session is None:
            return ""
        if session.queued or session.waiting:
            session.request_stop()
            return "Stopped: the race waiting in the queue will not run."
        if session.busy or session.replaying:
            session.request_stop()
            return "Stopping after the current step…" if session.busy else "Replay stopped."
        return ""

    def mark_queued(self, session: Session | None) -> None:
        """Run pressed: until the race starts it waits in the queue, and Stop must reach it there too."""
        if session is not None and not session.busy:
            session.queued = True
            session.clear_stop()

    # -- replaying ------------------------------------------------------------------------------------

    def replay(self, shade: bool, speed: str, session: Session | None) -> Iterator[dict]:
        """Play the finished race back: its columns together at their measured pace (times `speed`)."""
        race = session.race if session else None
        if race is None:
            yield {self.ui["message"]: message("Nothing to replay yet: run or load a race first.", "error")}
            return
        try:
            factor = replay_speed(speed)
        except InputError as err:
            yield {self.ui["message"]: message(str(err), "error")}
            return
        session.clear_stop()
        session.replaying = True
        try:
            yield from self._frames(race, shade, factor, session)
        finally:
            session.replaying = False
            session.clear_stop()
        yield {self.ui["message"]: message("", "note")}

    def replay_finished_race(self, shade: bool, speed: str, session: Session | None) -> Iterator[dict]:
        """After a complete race, replay it once: its runs took turns, this shows them side by side."""
        if session is None or not session.fresh:
            # Nothing to replay: every output keeps what the run left (a generator that yields nothing would
            # clear them, and with them the message a refused run left).
            yield self.skip([*COLUMNS, "message"])
            return
        session.fresh = False
        yield from self.replay(shade, speed, session)

    def _frames(self, race: Race, shade: bool, factor: float, session: Session) -> Iterator[dict]:
        ui, start = self.ui, time.perf_counter()
        times = frame_times(race, fps=REPLAY_FPS, speed=factor)
        for i, t in enumerate(times):
            delay = start + t / factor - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif -delay > 1 / REPLAY_FPS and i < len(times) - 1:
                continue  # a frame behind the clock (a busy server): drop it, so the replay keeps the race's pace
            if session.stop_requested:
                break
            values = {}
            for method in race.columns():
                trace = race.get(method)
                done = steps_done(race, method, t) if trace else 0
                finished = trace is not None and done >= len(trace.steps)
                values[ui[f"ans_{method}"]] = answer_html(
                    trace, upto=done - 1, shade=shade, cursor=not finished,
                    placeholder="" if trace else "(no run)") if done else answer_html(None, placeholder="…")
                status = f"finished: {trace.stop_reason}" if finished and trace.stop_reason else (
                    "finished" if finished else f"replay {t:.1f} s")
                values[ui[f"cnt_{method}"]] = counters_html(method, trace.steps[:done] if trace else [], status)
            yield {**values, ui["message"]: message(f"Replay: {t:.1f} s of the race.", "note")}

    # -- presets --------------------------------------------------------------------------------------

    def apply_preset(self, name: str, precision: str | None = None, session: Session | None = None) -> dict:
        """The preset's tree settings; the measured one times this machine once per model pair and precision."""
        if name == MEASURED:
            preset = self._measured(precision or self.models.default_precision(), session.choice if session else None)
        else:
            preset = PRESETS.get(name)
        if preset is None:
            return self.skip(PRESET_FIELDS)
        values = widget_values(preset)
        return {self.ui[f]: values[f] for f in PRESET_FIELDS}

    def _measured(self, precision: str, choice: ModelChoice | None) -> dict[str, Any] | None:
        key = self.models.key(choice, precision)
        if self.gpu is not None:  # on ZeroGPU the Space measured its pairs at start-up: no visitor's quota pays
            preset = self.models.measured.get(key)
            if preset is None:
                warn("This Space could not measure this model at start-up (its log says why); the other presets "
                     "still apply.")
            else:
                gr.Info(f"This Space's own measurement in {precision}: {preset['summary']}.")
            return preset
        if key not in self.models.measured:
            try:
                self.models.measured[key] = self.measure(precision, choice)
            except (ModelLoadError, HeadLoadError) as err:
                warn(f"Could not load the model: {err}")
                return None
            gr.Info(f"Measured this machine in {precision}: {self.models.measured[key]['summary']}.")
        return self.models.measured[key]
