"""DDD Explorer: plain decoding, EAGLE-2 and Dynamic Depth Decoding raced side by side.

Run `python app.py` (options: --model DIR_OR_HUB_ID, --head DIR|random, --device, --dtype, --host, --port;
or the environment variables DDD_MODEL, DDD_HEAD, DDD_DEVICE, DDD_DTYPE). The page opens on a recorded
example; the model loads on the first Run.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from components import Race, RaceFileError
from components.answer import LEGEND, answer_html, counters_html
from components.exports import CACHE_CLEANUP, ExportStore
from components.inputs import InputError, prompt_tokens, race_inputs, replay_speed, step_index
from components.race import RACE_METHODS
from components.replay import frame_times, steps_done
from components.runfile import LIMITS
from components.tokens import escape
from components.verdict import headline_html, verdict
from components.views import CSS, column_views, race_views, source_name, step_view
from components.widgets import CheckedNumber, CheckedSlider
from ddd.head import choose_head
from ddd.race import Entry, race_to_end, start_race
from ddd.settings import PRECISIONS, SettingsError

try:  # On Hugging Face ZeroGPU Spaces the decoding runs inside spaces.GPU; elsewhere it is a plain call.
    import spaces

    def on_gpu(fn):
        return spaces.GPU(duration=180)(fn)
except ImportError:  # pragma: no cover - depends on the host
    spaces = None

    def on_gpu(fn):
        return fn


ROOT = Path(__file__).resolve().parent
EXAMPLES_DIR = Path(os.environ.get("DDD_EXAMPLES") or ROOT / "assets" / "examples")
STREAM_EVERY_S = 0.12
EXAMPLE_PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "What is 17 * 24? Explain step by step.",
    "Count from 1 to 20, separated by commas.",
    "Tell me a short story about a robot who learns to paint.",
    "Translate into French: The weather is lovely today and we are going to the beach.",
    "List three tips for staying focused while studying.",
]


@dataclass
class ExampleRun:
    """A recorded example shipped in assets/examples (python app.py --record-examples)."""

    stem: str  # the file name
    title: str
    prompt: str
    changes: dict[str, Any] = field(default_factory=dict)  # to the CPU preset's tree settings


EXAMPLE_RUNS = [
    ExampleRun("code", "Code: a palindrome check", EXAMPLE_PROMPTS[0]),
    ExampleRun("maths", "Maths: step by step", EXAMPLE_PROMPTS[1]),
    # At the preset's threshold (-0.3) this head's beam is never confident enough to draft past EAGLE-2's
    # three levels; at -2 DDD drafts four or five levels where the counting is predictable and stops at two
    # where it is not.
    ExampleRun("counting", "Counting: DDD drafts deeper and shallower than EAGLE-2", EXAMPLE_PROMPTS[2],
               dict(d_threshold=-2.0)),
    ExampleRun("story", "A short story", EXAMPLE_PROMPTS[3]),
    ExampleRun("translation", "Translation into French", EXAMPLE_PROMPTS[4]),
    ExampleRun("tips", "Advice: a short list", EXAMPLE_PROMPTS[5]),
]
# Setting presets (the six tree settings of the panel). The papers' values suit 7B targets on a GPU, where
# verifying 60 tokens costs about what one token costs. On a CPU verification grows with the tree; the CPU
# preset verifies a few more tokens than the fastest settings `python -m ddd budget --dtype int8` finds, so
# that the trees and DDD's depth choice stay visible (README: results on a 2-core CPU).
PRESETS = {
    "papers (GPU)": dict(e_top_k=10, e_calls=6, e_total=60, d_calls=11, d_checks="5,7,9", d_threshold=-0.3),
    "small CPU model": dict(e_top_k=8, e_calls=3, e_total=6, d_calls=8, d_checks="all", d_threshold=-0.3),
}
# The CPU's starting precision. int8 makes a verified tree cheaper relative to one plain step than float32
# does, which is where speculative decoding starts to pay on a CPU (README: results on a 2-core CPU); its
# answers drift from float32's (README: precision modes), and the panel switches back in one click.
CPU_PRECISION = "int8"
PRECISION_INFO = ("int8 (CPU only): verifying a tree costs least, so speculative decoding pays most; its answers "
                  "differ from float32's. bfloat16 runs slower on most CPUs. All three methods use the one chosen.")
# A third preset times this machine once (ddd.budget: about half a minute on two CPU cores) and fills in
# the fastest predicted settings; both methods then verify the same number of tokens.
MEASURED = "measure this machine"
PRESET_NAMES = [*PRESETS, MEASURED]
INTRO = """# DDD Explorer
**What you are seeing:** one model answers your prompt three ways. Plain decoding makes one token per forward pass.
**EAGLE-2** drafts a tree of guesses with a small head and lets the model check them all in one pass; **DDD** does the same
but chooses how deep to draft from the draft's own confidence. The headline says who was faster and whether it was more than noise."""
RACING = ("<div class='headline empty'>Racing: plain, EAGLE-2 and DDD take turns, one target forward each, so a "
          "busy machine slows all three alike. The verdict comes at the end.</div>")
TREE_MODES = {"verified + best dropped": "shown", "verified only": "verified", "whole candidate pool": "all"}


# ---------------------------------------------------------------------------------------------------
# The model: loaded lazily on the first Run, shared by all sessions, used by one run at a time.
# ---------------------------------------------------------------------------------------------------

@dataclass
class ModelConfig:
    model: str | None = None  # None: the embedded default
    head: str | None = None  # a directory, "random", or None: assets/head when it holds a head, else random
    device: str | None = None
    dtype: str | None = None

    @classmethod
    def from_env(cls) -> "ModelConfig":
        return cls(os.environ.get("DDD_MODEL") or None, os.environ.get("DDD_HEAD") or None,
                   os.environ.get("DDD_DEVICE") or None, os.environ.get("DDD_DTYPE") or None)


class Models:
    """The target and draft head in one precision, loaded on first use and reloaded when a race asks for
    another precision; `lock` serialises decoding for fair timing."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.target = None
        self.head = None
        self.note = ""
        self.measured: dict[str, dict] = {}  # the MEASURED preset's values per precision, once measured
        self.lock = threading.Lock()
        self._load_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.target is not None

    def device(self) -> str:
        import torch

        return self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def precisions(self) -> list[str]:
        """The modes this device offers (int8 kernels exist for CPUs only)."""
        return [p for p in PRECISIONS if p != "int8" or self.device() == "cpu"]

    def default_precision(self) -> str:
        return self.config.dtype or ("float16" if self.device().startswith("cuda") else CPU_PRECISION)

    def load(self, precision: str | None = None):
        """The target and head in `precision` (default: the current one, else the default)."""
        with self._load_lock:
            precision = precision or (self.target.precision if self.target else self.default_precision())
            if self.target is None or self.target.precision != precision:
                from ddd import load_target, resolve_head
                from ddd.race import warm_up

                self.target = self.head = None  # the old pair's memory goes before the new one loads
                target = load_target(self.config.model, dtype=precision, device=self.device())
                head, note = resolve_head(self.config.head, target)
                warm_up(target, head)
                self.note = ""
                if note:
                    self.note = (note + " A random head drafts almost nothing the target accepts (tau ≈ 1), so "
                                 "EAGLE-2 and DDD run slower than plain decoding here.")
                self.target, self.head = target, head
        return self.target, self.head

    def describe(self) -> str:
        model = source_name(self.config.model) if self.config.model else "smollm2-135m-instruct (embedded default)"
        choice = choose_head(self.config.head, self.config.model)
        state = f"loaded in {self.target.precision}" if self.loaded else "loads on the first Run"
        text = f"**Model:** {model} · **draft head:** {choice.label} · *{state}*"
        if choice.source is None:
            text += ("\n\n<div class='note-box'>No trained draft head: a random head drafts almost nothing the target "
                     "accepts, so the speculative columns will be slow. The recorded examples were made with a trained head.</div>")
        return text


MODELS = Models(ModelConfig.from_env())


# ---------------------------------------------------------------------------------------------------
# Per-session state.
# ---------------------------------------------------------------------------------------------------

class Session:
    """One browser tab's state: its race, the run in progress (so Stop can reach it), its saved file."""

    def __init__(self, race: Race | None = None):
        self.race = race
        self.generation: Any = None
        self.stop_requested = False
        self.busy = False  # a race is decoding
        self.replaying = False
        self.fresh = False  # a race just finished and has not been replayed yet
        self.source: str | None = None  # the shipped example file the race came from, if it did
        self.queued = False  # Run was pressed and the race waits in the queue (Stop then cancels it)
        self.file: str | None = None  # this session's race file in EXPORTS

    def request_stop(self) -> None:
        self.stop_requested = True
        if self.generation is not None:
            self.generation.stop()

    def export(self) -> str | None:
        """The race as a gzipped JSON file (replacing this session's previous one)."""
        if self.race is None:
            return None
        if self.source:  # a shipped example: offer its own file
            return self.source
        self.file = EXPORTS.save(self.race, self.race.title or self.race.prompt, replacing=self.file)
        return self.file


EXPORTS = ExportStore()


def new_session() -> Session:
    return Session()


def close_session(session: Session | None) -> None:
    if session is None:
        return
    session.request_stop()
    EXPORTS.remove(session.file)


# ---------------------------------------------------------------------------------------------------
# Recorded examples.
# ---------------------------------------------------------------------------------------------------

def example_files() -> dict[str, Path]:
    """Shipped example races by display name (their title, else the file name)."""
    out: dict[str, Path] = {}
    for path in sorted(EXAMPLES_DIR.glob("*.json")):
        try:
            title = read_example(path).title or path.stem
        except (OSError, RaceFileError):
            title = path.stem
        out[str(title)] = path
    return out


_EXAMPLE_CACHE: dict[tuple[str, float], Race] = {}


def read_example(path: Path) -> Race:
    """A shipped example, parsed once per file version (views never modify a race, so sessions share it)."""
    key = (str(path), path.stat().st_mtime)
    if key not in _EXAMPLE_CACHE:
        if len(_EXAMPLE_CACHE) > 32:
            _EXAMPLE_CACHE.clear()
        _EXAMPLE_CACHE[key] = Race.load(path)
    return _EXAMPLE_CACHE[key]


# ---------------------------------------------------------------------------------------------------
# Callbacks. Each returns values in the order of the output lists wired up in build_demo().
# ---------------------------------------------------------------------------------------------------

def _message(text: str = "", kind: str = "error") -> dict[str, Any]:
    if not text:
        return gr.update(value="", visible=False)
    return gr.update(value=f"<div class='{kind}-box'>{escape(text)}</div>", visible=True)


def warn(text: str) -> None:
    """A warning toast; Gradio renders its message as HTML, and the text may quote a file or a setting."""
    gr.Warning(escape(text))


def show_race(session: Session, shade: bool, mode: str, message: str = "", kind: str = "note") -> tuple:
    """All race outputs (RACE_OUTPUTS order) for the session's race, positioned at step 1."""
    race = session.race
    views = race_views(race, shade)
    count = views["steps"]
    start = 1 if count > 1 else 0
    step = step_view(race, start, shade, TREE_MODES.get(mode, "shown"))
    return (
        *views["columns"],
        # Gradio refuses a slider whose minimum equals its maximum: a one-step race keeps 0..1, inactive.
        gr.update(minimum=0, maximum=max(count - 1, 1), value=start, step=1, interactive=count > 1),
        step.eagle2_text, step.ddd_text, step.eagle2_tree, step.ddd_tree, step.narration, step.depth,
        views["timeline"], views["summary"], views["about"], views["info"], views["headline"],
        gr.update(value=session.export(), interactive=race is not None),
        _message(message, kind),
        session,
    )


def load_example(name: str | None, shade: bool, mode: str, session: Session) -> tuple:
    session = session or Session()
    files = example_files()
    if not files:
        return show_race(session, shade, mode, "No recorded examples ship with this copy: press Run.", "note")
    path = files.get(name) if name else next(iter(files.values()))
    if path is None:
        return show_race(session, shade, mode, f"There is no example called {name!r}.", "error")
    try:
        session.race, session.source = read_example(path), str(path)
    except (RaceFileError, OSError) as err:
        warn(str(err))
        return show_race(session, shade, mode, str(err), "error")
    return show_race(session, shade, mode)


def load_file(file: str | None, shade: bool, mode: str, session: Session) -> tuple:
    session = session or Session()
    if not file:
        return show_race(session, shade, mode)
    try:
        session.race, session.source = Race.load(file), None
    except RaceFileError as err:
        warn(str(err))
        return show_race(session, shade, mode, f"Could not load that file: {err}", "error")
    return show_race(session, shade, mode)


def reshade(shade: bool, index: float | None, session: Session) -> tuple:
    """Shading on or off: only the texts change, the figures stay as they are."""
    race = session.race if session else None
    texts = []
    for method in ("eagle2", "ddd"):
        trace = race.get(method) if race else None
        step = min(int(index or 0), len(trace.steps) - 1) if trace and trace.steps else None
        texts.append(answer_html(trace, upto=step, current=step, shade=shade, placeholder="(no run)"))
    return (*column_views(race, shade), *texts)


def show_step(index: float | None, shade: bool, mode: str, session: Session) -> tuple:
    """STEP_OUTPUTS for step `index` of the session's race."""
    race = session.race if session else None
    view = step_view(race, step_index(index, race.decode_steps() - 1 if race else 0), shade,
                     TREE_MODES.get(mode, "shown"))
    return view.eagle2_text, view.ddd_text, view.eagle2_tree, view.ddd_tree, view.narration, view.depth


def move(where: str, index: float | None, session: Session) -> int:
    """The slider position after first / prev / next / last."""
    last = max((session.race.decode_steps() if session and session.race else 1) - 1, 0)
    index = int(index or 0)
    return {"first": 0, "prev": max(index - 1, 0), "next": min(index + 1, last), "last": last}.get(where, index)


def toggle_play(playing: bool, index: float | None, session: Session):
    """Play / pause the step-through; playing from the last step starts over."""
    playing = not playing
    last = max((session.race.decode_steps() if session and session.race else 1) - 1, 0)
    start = 0 if playing and int(index or 0) >= last else int(index or 0)
    return playing, gr.Timer(active=playing), gr.update(value="❚❚ Pause" if playing else "▶ Play"), start


def tick(playing: bool, index: float | None, session: Session):
    last = max((session.race.decode_steps() if session and session.race else 1) - 1, 0)
    index = int(index or 0)
    if not playing or index >= last:
        return False, gr.Timer(active=False), gr.update(value="▶ Play"), gr.skip()
    return True, gr.skip(), gr.skip(), index + 1


def request_stop(session: Session) -> str:
    if session is not None and (session.busy or session.replaying):
        session.request_stop()
        return "Stopping after the current step…" if session.busy else "Replay stopped."
    if session is not None and session.queued:
        session.stop_requested = True
        return "Stopped: the race waiting in the queue will not run."
    return ""


def mark_queued(session: Session) -> None:
    """Run pressed: until the race starts it waits in the queue, and Stop must reach it there too."""
    if session is not None and not session.busy:
        session.queued, session.stop_requested = True, False


def default_preset() -> str:
    """The CPU preset unless a GPU is there (or the app was asked for one)."""
    return PRESET_NAMES[0] if MODELS.device().startswith("cuda") else PRESET_NAMES[1]


def apply_preset(name: str, precision: str | None = None) -> tuple:
    preset = measured_preset(precision) if name == MEASURED else PRESETS.get(name)
    if preset is None:
        return tuple(gr.skip() for _ in PRESET_FIELDS)
    return tuple(preset[f] for f in PRESET_FIELDS)


@on_gpu
def measured_preset(precision: str | None = None) -> dict | None:
    """Time this machine in `precision` once, then reuse the result; None (settings left as they are) if
    that fails."""
    precision = precision or MODELS.default_precision()
    if precision not in MODELS.measured:
        from ddd import HeadLoadError, ModelLoadError
        from ddd.budget import auto_budget

        try:
            target, head = MODELS.load(precision)
        except (ModelLoadError, HeadLoadError) as err:
            warn(f"Could not load the model: {err}")
            return None
        with MODELS.lock:
            report = auto_budget(target, head)
        eagle2 = report.best("eagle2")
        ddd = report.best("ddd", total_tokens=eagle2.settings["total_tokens"])
        MODELS.measured[precision] = dict(
            e_top_k=eagle2.settings["top_k"], e_calls=eagle2.settings["draft_calls"],
            e_total=eagle2.settings["total_tokens"], d_calls=ddd.settings["max_draft_calls"], d_checks="all",
            d_threshold=ddd.settings["threshold"],
        )
        gr.Info(f"Measured this machine in {precision}: predicted {eagle2.speedup:.2f}x for EAGLE-2 "
                f"(tau {eagle2.tau:.2f}) and {ddd.speedup:.2f}x for DDD (tau {ddd.tau:.2f}) against plain decoding.")
    return MODELS.measured[precision]


PRESET_FIELDS = ["e_top_k", "e_calls", "e_total", "d_calls", "d_checks", "d_threshold"]


def race_entries(e_top_k, e_calls, e_total, d_calls, d_checks, d_threshold) -> dict[str, Entry]:
    """The three columns of a race from the panel's tree settings (both trees verify the same number of tokens)."""
    checks = str(d_checks).strip()
    return {
        "plain": Entry("plain"),
        "eagle2": Entry("eagle2", dict(top_k=int(e_top_k), draft_calls=int(e_calls), total_tokens=int(e_total))),
        "ddd": Entry("ddd", dict(top_k=int(e_top_k), max_draft_calls=int(d_calls), check_steps=checks,
                                 threshold=float(d_threshold), total_tokens=int(e_total))),
    }


def _race_outputs(session: Session, **values: Any) -> tuple:
    """RACE_OUTPUT_NAMES in order: the given values, every other output left as it is."""
    values["session"] = session
    return tuple(values.get(name, gr.skip()) for name in RACE_OUTPUT_NAMES)


def _live(columns: list[str], counts: list[str], status: str, session: Session) -> tuple:
    """While decoding: the three columns, their counters, the status line, and no headline until the end."""
    return _race_outputs(session, **dict(zip(RACE_OUTPUT_NAMES[:6], [*columns, *counts])),
                         message=_message(status, "note"), headline=RACING)


@on_gpu
def run_race(prompt: str, max_new_tokens: float, temperature: float, top_p: float, seed: float, precision: str,
             e_top_k: float, e_calls: float, e_total: float, d_calls: float, d_checks: str, d_threshold: float,
             shade: bool, mode: str, session: Session):
    """Race plain, EAGLE-2 and DDD on the prompt, taking turns one target forward at a time (each step timed
    on its own), streaming all three columns; then build every figure once from the finished traces."""
    session = session or Session()
    queued, session.queued = session.queued, False
    if queued and session.stop_requested:
        session.stop_requested = False
        yield _live_error(session, "Stopped before the race started: nothing ran.")
        return
    try:
        checked = race_inputs(prompt, max_new_tokens, temperature, top_p, seed, precision, e_top_k, e_calls,
                              e_total, d_calls, d_checks, d_threshold, MODELS.precisions())
    except InputError as err:
        warn(str(err))
        yield _live_error(session, str(err))
        return
    if session.busy:
        yield _live_error(session, "A run is already going in this tab: wait for it or press Stop.")
        return
    session.busy, session.stop_requested = True, False
    try:
        yield from _race(checked.prompt, checked.max_new_tokens, checked.temperature, checked.top_p, checked.seed,
                         checked.precision, checked.e_top_k, checked.e_calls, checked.e_total, checked.d_calls,
                         checked.d_checks, checked.d_threshold, shade, mode, session)
    finally:
        session.busy = False
        session.generation = None


def _live_error(session: Session, text: str) -> tuple:
    return _race_outputs(session, message=_message(text, "error"))


def _race(prompt, max_new_tokens, temperature, top_p, seed, precision, e_top_k, e_calls, e_total, d_calls,
          d_checks, d_threshold, shade, mode, session):
    from ddd import HeadLoadError, ModelLoadError, PromptError, Sampling

    columns = [answer_html(None, placeholder="waiting for its turn…") for _ in RACE_METHODS]
    counts = [counters_html(m, [], "waiting") for m in RACE_METHODS]
    precision = precision or MODELS.default_precision()
    if not MODELS.loaded or MODELS.target.precision != precision:
        yield _live(columns, counts, f"Loading the model in {precision} (and warming it up)…", session)
    try:
        target, head = MODELS.load(precision)
    except (ModelLoadError, HeadLoadError) as err:
        warn(str(err))
        yield _live_error(session, f"Could not load the model: {err}")
        return
    if session.stop_requested:
        yield show_race(session, shade, mode, "Stopped while the model was loading: nothing ran.", "note")
        return
    try:
        prompt_tokens(target, prompt, int(max_new_tokens), MODELS.device())
    except InputError as err:
        warn(str(err))
        yield _live_error(session, str(err))
        return
    try:  # all three runs are made first: a bad setting or prompt is reported before anything runs
        race = start_race(target, head, prompt, race_entries(e_top_k, e_calls, e_total, d_calls, d_checks, d_threshold),
                          max_new_tokens=int(max_new_tokens),
                          sampling=Sampling(temperature=float(temperature), top_p=float(top_p), seed=int(seed)))
    except (SettingsError, PromptError, ValueError) as err:
        warn(str(err))
        yield _live_error(session, str(err))
        return
    note = MODELS.note
    status = "Racing: each method takes one target forward in turn, so a busy machine slows all three alike…"
    steps: dict[str, list] = {m: [] for m in RACE_METHODS}
    last = 0.0
    with MODELS.lock:
        session.generation = race
        turns = iter(race) if not session.stop_requested else iter(())  # Stop came while waiting for the model
        for turn in turns:
            steps[turn.name].append(turn.step)
            now = time.perf_counter()
            if now - last >= STREAM_EVERY_S:
                last = now
                columns, counts = _race_columns(race, steps, shade)
                yield _live(columns, counts, status, session)
        session.generation = None
    traces = {method: trace for method, trace in race.traces.items() if trace.steps}
    if not traces:  # stopped before the first token: keep the race that was shown
        yield show_race(session, shade, mode, "Stopped before any method produced a token.", "note")
        return
    session.race, session.source = Race(traces=traces, note=note), None
    session.fresh = not session.stop_requested and len(traces) == len(RACE_METHODS)
    stopped = "Stopped. " if session.stop_requested else ""
    message = stopped + (note or "")
    yield show_race(session, shade, mode, message, "note")


def _race_columns(race, steps: dict[str, list], shade: bool) -> tuple[list[str], list[str]]:
    """The three columns and their counters while the race runs."""
    columns, counts = [], []
    for method in RACE_METHODS:
        trace = race.runs[method].trace
        done = bool(trace.stop_reason)
        columns.append(answer_html(trace, shade=shade, cursor=not done))
        counts.append(counters_html(method, steps[method], f"done: {trace.stop_reason}" if done else "running"))
    return columns, counts


def replay(shade: bool, speed: str, session: Session):
    """Play the finished race back: all three columns together at their measured pace (times `speed`)."""
    race = session.race if session else None
    if race is None:
        yield *[gr.skip()] * 6, _message("Nothing to replay yet: run or load a race first.", "error")
        return
    try:
        factor = replay_speed(speed)
    except InputError as err:
        yield *[gr.skip()] * 6, _message(str(err), "error")
        return
    session.stop_requested, session.replaying = False, True
    try:
        yield from _replay_frames(race, shade, factor, session)
    finally:
        session.replaying = False
    session.stop_requested = False
    yield *[gr.skip()] * 6, _message("", "note")


def replay_finished_race(shade: bool, speed: str, session: Session):
    """After a complete race, replay it once: the three ran one after another, this shows them side by side."""
    if session is None or not session.fresh:
        # A generator that yields nothing clears its outputs, and with them the message a refused run left.
        yield (gr.skip(),) * 7
        return
    session.fresh = False
    yield from replay(shade, speed, session)


def _replay_frames(race: Race, shade: bool, factor: float, session: Session):
    start = time.perf_counter()
    for t in frame_times(race, fps=8, speed=factor):
        delay = start + t / factor - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if session.stop_requested:
            break
        columns, counts = [], []
        for method in RACE_METHODS:
            trace = race.get(method)
            done = steps_done(race, method, t) if trace else 0
            finished = trace is not None and done >= len(trace.steps)
            columns.append(answer_html(trace, upto=done - 1, shade=shade, cursor=not finished,
                                       placeholder="" if trace else "(no run)") if done else answer_html(
                None, placeholder="…"))
            steps = trace.steps[:done] if trace else []
            status = f"finished: {trace.stop_reason}" if finished and trace.stop_reason else (
                "finished" if finished else f"replay {t:.1f} s")
            counts.append(counters_html(method, steps, status))
        yield *columns, *counts, _message(f"Replay: {t:.1f} s of the race.", "note")


# ---------------------------------------------------------------------------------------------------
# Layout.
# ---------------------------------------------------------------------------------------------------

RACE_OUTPUT_NAMES = [
    "ans_plain", "ans_eagle2", "ans_ddd", "cnt_plain", "cnt_eagle2", "cnt_ddd", "slider",
    "txt_eagle2", "txt_ddd", "tree_eagle2", "tree_ddd", "narration", "depth", "timeline", "summary", "about",
    "info", "headline", "download", "message", "session",
]
STEP_OUTPUT_NAMES = ["txt_eagle2", "txt_ddd", "tree_eagle2", "tree_ddd", "narration", "depth"]
SETTINGS_NAMES = ["max_new_tokens", "temperature", "top_p", "seed", "precision", "e_top_k", "e_calls", "e_total",
                  "d_calls", "d_checks", "d_threshold"]


def build_demo() -> gr.Blocks:
    ui: dict[str, Any] = {}
    examples = example_files()
    with gr.Blocks(title="DDD Explorer", delete_cache=CACHE_CLEANUP) as demo:
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
                ui["example"] = gr.Dropdown(list(examples), value=next(iter(examples), None), label="Example run",
                                            elem_id="example")
                with gr.Row():
                    ui["upload"] = gr.UploadButton("Load a run file", file_types=[".json", ".gz"], size="sm")
                    ui["download"] = gr.DownloadButton("Save this run", size="sm", interactive=False)
                ui["info"] = gr.HTML(elem_classes="race-info")
        with gr.Accordion("Settings", open=False):
            ui["model_info"] = gr.Markdown(MODELS.describe())
            with gr.Row():
                ui["max_new_tokens"] = CheckedSlider(8, 512, value=64, step=8, label="max new tokens")
                ui["temperature"] = CheckedSlider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)")
                ui["top_p"] = CheckedSlider(0.05, 1, value=1, step=0.05, label="top-p")
                ui["seed"] = CheckedNumber(0, precision=0, label="seed")
                ui["precision"] = gr.Radio(MODELS.precisions(), value=MODELS.default_precision(),
                                           label="precision (target and head, all three methods)",
                                           info=PRECISION_INFO)
            preset = PRESETS[default_preset()]
            ui["preset"] = gr.Radio(PRESET_NAMES, value=default_preset(), label="preset for the settings below")
            with gr.Row():
                ui["e_top_k"] = CheckedSlider(1, 32, value=preset["e_top_k"], step=1,
                                          label="EAGLE-2 / DDD top-k (beam width)")
                ui["e_calls"] = CheckedSlider(1, 16, value=preset["e_calls"], step=1,
                                          label="EAGLE-2 draft calls (tree depth)")
                ui["e_total"] = CheckedSlider(2, 128, value=preset["e_total"], step=1,
                                          label="total tokens verified (EAGLE-2 / DDD)")
            with gr.Row():
                ui["d_calls"] = CheckedSlider(1, 24, value=preset["d_calls"], step=1, label="DDD max draft calls")
                ui["d_checks"] = gr.Textbox(preset["d_checks"], label="DDD check after calls ('5,7,9' or 'all')")
                ui["d_threshold"] = CheckedNumber(preset["d_threshold"], label="DDD threshold on H (≤ 0)")
            with gr.Row():
                ui["shade"] = gr.Checkbox(True, label="shade tokens by how they were made")
                ui["mode"] = gr.Radio(list(TREE_MODES), value=next(iter(TREE_MODES)), label="tree nodes shown")
                ui["speed"] = gr.Radio(["0.5×", "1×", "2×", "4×"], value="1×", label="replay speed")
        ui["message"] = gr.HTML(visible=False, elem_id="message")
        ui["headline"] = gr.HTML(headline_html({}), elem_id="headline")
        with gr.Row(equal_height=False):
            for method in RACE_METHODS:
                with gr.Column(min_width=260):
                    ui[f"cnt_{method}"] = gr.HTML(counters_html(method, []), elem_id=f"cnt-{method}")
                    ui[f"ans_{method}"] = gr.HTML(answer_html(None, placeholder="(no run yet)"),
                                                  elem_id=f"ans-{method}")
        gr.HTML(f"<div class='legend-line'>Shading: {LEGEND}. Plain decoding makes every token with the target.</div>")
        with gr.Tabs():
            with gr.Tab("Step through", id="steps"):
                with gr.Row():
                    ui["first"] = gr.Button("« First", size="sm", min_width=60)
                    ui["prev"] = gr.Button("‹ Prev", size="sm", min_width=60)
                    ui["play"] = gr.Button("▶ Play", size="sm", min_width=60, elem_id="play")
                    ui["next"] = gr.Button("Next ›", size="sm", min_width=60, elem_id="next")
                    ui["last"] = gr.Button("Last »", size="sm", min_width=60)
                ui["slider"] = CheckedSlider(0, 1, value=0, step=1, label="step (0 = prefill)", elem_id="step-slider")
                with gr.Row(equal_height=False):
                    with gr.Column():
                        gr.Markdown("**EAGLE-2** — text so far (current step outlined)")
                        ui["txt_eagle2"] = gr.HTML(elem_classes="small")
                        ui["tree_eagle2"] = gr.Plot(label="EAGLE-2 draft tree", elem_id="tree-eagle2")
                    with gr.Column():
                        gr.Markdown("**DDD** — text so far (current step outlined)")
                        ui["txt_ddd"] = gr.HTML(elem_classes="small")
                        ui["tree_ddd"] = gr.Plot(label="DDD draft tree", elem_id="tree-ddd")
                ui["narration"] = gr.Markdown(elem_id="narration")
                ui["depth"] = gr.Plot(label="Depth & confidence", elem_id="depth")
            with gr.Tab("Summary", id="timeline"):
                ui["summary"] = gr.Dataframe(label="Summary", interactive=False, elem_id="summary", wrap=True)
                ui["timeline"] = gr.Plot(label="Timeline", elem_id="timeline")
            with gr.Tab("About", id="about"):
                ui["about"] = gr.Markdown()
        ui["timer"] = gr.Timer(1.2, active=False)

        ui["preset"].input(apply_preset, [ui["preset"], ui["precision"]], [ui[f] for f in PRESET_FIELDS],
                           api_name=False)
        race_outputs = [ui[n] for n in RACE_OUTPUT_NAMES]
        step_outputs = [ui[n] for n in STEP_OUTPUT_NAMES]
        view_inputs = [ui["shade"], ui["mode"], ui["session"]]

        demo.load(load_example, [ui["example"], *view_inputs], race_outputs, api_name="open_example")
        ui["example"].input(load_example, [ui["example"], *view_inputs], race_outputs, api_name=False)
        ui["upload"].upload(load_file, [ui["upload"], *view_inputs], race_outputs, api_name="load_file")
        ui["shade"].input(reshade, [ui["shade"], ui["slider"], ui["session"]],
                          [ui[n] for n in RACE_OUTPUT_NAMES[:6]] + [ui["txt_eagle2"], ui["txt_ddd"]], api_name=False)
        ui["mode"].input(show_step, [ui["slider"], *view_inputs], step_outputs, api_name=False)
        ui["slider"].change(show_step, [ui["slider"], *view_inputs], step_outputs, api_name="show_step",
                            show_progress="hidden", trigger_mode="always_last")
        for where in ("first", "prev", "next", "last"):
            ui[where].click(lambda i, s, w=where: move(w, i, s), [ui["slider"], ui["session"]], ui["slider"],
                            api_name=False, show_progress="hidden")
        ui["play"].click(toggle_play, [ui["playing"], ui["slider"], ui["session"]],
                         [ui["playing"], ui["timer"], ui["play"], ui["slider"]], api_name=False)
        ui["timer"].tick(tick, [ui["playing"], ui["slider"], ui["session"]],
                         [ui["playing"], ui["timer"], ui["play"], ui["slider"]], api_name=False,
                         show_progress="hidden")
        run_inputs = [ui["prompt"], *[ui[n] for n in SETTINGS_NAMES], *view_inputs]
        running = ui["run"].click(mark_queued, [ui["session"]], None, queue=False, api_name=False).then(
            run_race, run_inputs, race_outputs, api_name="run", concurrency_id="model", concurrency_limit=1)
        submitted = ui["prompt"].submit(mark_queued, [ui["session"]], None, queue=False, api_name=False).then(
            run_race, run_inputs, race_outputs, api_name=False, concurrency_id="model", concurrency_limit=1)
        running.then(lambda: MODELS.describe(), None, ui["model_info"], api_name=False)
        replay_outputs = [ui[n] for n in RACE_OUTPUT_NAMES[:6]] + [ui["message"]]
        for event in (running, submitted):
            event.then(replay_finished_race, [ui["shade"], ui["speed"], ui["session"]], replay_outputs, api_name=False,
                       concurrency_limit=None)
        ui["replay"].click(replay, [ui["shade"], ui["speed"], ui["session"]], replay_outputs, api_name="replay",
                           concurrency_limit=None)
        ui["stop"].click(request_stop, [ui["session"]], ui["message"], api_name="stop", concurrency_limit=None,
                         queue=False)
    demo.queue(default_concurrency_limit=4, max_size=64)
    return demo


def record_race(prompt: str, title: str, max_new_tokens: int = 96, entries: dict[str, Entry] | None = None) -> Race:
    """Race `prompt` as the app does, without the page, and keep the traces."""
    target, head = MODELS.load()
    entries = entries or race_entries(**PRESETS[PRESET_NAMES[1]])
    with MODELS.lock:
        traces = race_to_end(target, head, prompt, entries, max_new_tokens=max_new_tokens)
    return Race(traces=traces, title=title, note=MODELS.note)


def depth_contrast(race: Race) -> tuple[int, int]:
    """(steps where DDD drafted fewer levels than EAGLE-2, steps where it drafted more)."""
    fixed = int(race.traces["eagle2"].settings.get("draft_calls", 0))
    calls = [s.draft_calls for s in race.traces["ddd"].steps if not s.prefill]
    return sum(c < fixed for c in calls), sum(c > fixed for c in calls)


def record_examples(directory: Path = EXAMPLES_DIR, max_new_tokens: int = 64) -> list[Path]:
    paths = []
    for example in EXAMPLE_RUNS:
        entries = race_entries(**{**PRESETS[PRESET_NAMES[1]], **example.changes})
        race = record_race(example.prompt, example.title, max_new_tokens, entries)
        path = race.save(directory / f"{example.stem}.json", compact=True)
        fewer, more = depth_contrast(race)
        print(f"{path.name}: {verdict(race.traces).headline} DDD shallower than EAGLE-2 in {fewer} steps, deeper "
              f"in {more}; {path.stat().st_size / 1e6:.1f} MB", flush=True)
        paths.append(path)
    return paths


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DDD Explorer: race plain decoding, EAGLE-2 and DDD.")
    parser.add_argument("--model", default=os.environ.get("DDD_MODEL"),
                        help="target model: a local directory or hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--head", default=os.environ.get("DDD_HEAD"),
                        help="EAGLE draft head directory, or 'random' (default: assets/head when present)")
    parser.add_argument("--device", default=os.environ.get("DDD_DEVICE"), help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=os.environ.get("DDD_DTYPE"), choices=PRECISIONS,
                        help=f"starting precision (default: float16 on a GPU, {CPU_PRECISION} on a CPU); "
                             "the Settings panel can switch it")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--record-examples", action="store_true",
                        help="record the example races into assets/examples (or DDD_EXAMPLES) and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    MODELS.config = ModelConfig(args.model or None, args.head or None, args.device, args.dtype)
    if args.record_examples:
        record_examples()
        return
    demo = build_demo()
    demo.launch(server_name=args.host, server_port=args.port, css=CSS, allowed_paths=[str(EXAMPLES_DIR)],
                max_file_size=LIMITS.file_bytes,
                theme=gr.themes.Soft(primary_hue="violet", secondary_hue="blue"))


if __name__ == "__main__":
    main()
