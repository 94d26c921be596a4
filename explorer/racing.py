"""The race as plain data: what goes in (RaceRequest) and what comes out (RaceEvents) are small picklable
records, never a model, a cache or a generator object.

On a ZeroGPU Space the decoding runs in another process (`spaces.GPU`), which receives its arguments and sends
back every value it yields by pickling; the same function runs in this process everywhere else. Stop reaches
the decoding process through a file (Session.stop_file): both processes see the same disk, and the race checks
it before every turn. The app, the example recorder and the tests all race through `race_events`.
"""
from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from components.inputs import PROMPT_LIMITS, InputError
from ddd import HeadLoadError, ModelLoadError, PromptError, encode_prompt
from ddd.bench.budget import auto_budget
from ddd.metrics import summarize
from ddd.settings import Sampling, SettingsError
from ddd.trace import RunTrace, Step
from ddd.turns import WARM_UP_PROMPT, Entry, start_race

from components.race import COLUMN_METHODS

from .gputime import START_UP_ASK_S, WARM_UP_TOKENS, GpuTime
from .models import Loaded, ModelChoice, Models
from .presets import GPU_PRESET, PRESETS, measured_preset, race_entries

# ZeroGPU's own default for a call that names no duration.
DEFAULT_GPU_S = 60


@dataclass
class RaceRequest:
    prompt: str
    entries: dict[str, Entry]
    max_new_tokens: int
    sampling: Sampling
    precision: str
    stop_file: str = ""  # Stop creates this file; the race ends every run after its current step
    choice: ModelChoice | None = None  # the visitor's model and head (None: the app's own)
    gpu_seconds: int = DEFAULT_GPU_S  # the GPU time the race asks ZeroGPU for (explorer.gputime)


@dataclass
class RaceEvent:
    """One update from a running race. kind: "loading", "start" (`traces`: each run's header, no steps yet),
    "turn" (`name` took a step; `stop_reason` once that run has ended), "end" (`traces`: final headers,
    no steps), "error" (`message`: nothing ran), "stopped" (Stop came before anything ran)."""

    kind: str
    name: str = ""
    step: Step | None = None
    stop_reason: str = ""
    traces: dict[str, RunTrace] = field(default_factory=dict)
    message: str = ""
    note: str = ""  # the models' note (a fallback head), with "start"


def stop_requested(request: RaceRequest) -> bool:
    return bool(request.stop_file) and os.path.exists(request.stop_file)


def headers(traces: dict[str, RunTrace]) -> dict[str, RunTrace]:
    """The traces without their steps: what the receiving side does not have yet."""
    return {name: replace(trace, steps=[]) for name, trace in traces.items()}


def prompt_tokens(target: Any, prompt: str, max_new_tokens: int, device: str) -> int:
    """The prompt's token count, if it fits this device's prompt limit and, with its answer, the model's context."""
    try:
        count = len(encode_prompt(target, prompt))
    except PromptError as err:
        raise InputError(str(err)) from err
    limit = PROMPT_LIMITS["cuda" if device.startswith("cuda") else "cpu"]
    if count > limit.prompt_tokens:
        raise InputError(f"The prompt is {count:,} tokens long; a race here reads at most {limit.prompt_tokens:,} "
                         f"prompt tokens ({limit.why}): shorten the prompt.")
    context = target.context_limit
    if count + max_new_tokens > context:
        raise InputError(f"The prompt ({count:,} tokens) and {max_new_tokens:,} new tokens do not fit the model's "
                         f"context of {context:,} tokens: shorten the prompt or lower max new tokens to at most "
                         f"{max(context - count, 0):,}.")
    return count


def race_events(models: Models, request: RaceRequest) -> Iterator[RaceEvent]:
    """Load the models if needed, check the prompt, then race the entries one target forward each in turn. The
    race holds its model pair from loading to its last step, so that no other visitor's choice unloads it."""
    choice, precision = request.choice, request.precision
    try:
        if choice is not None:
            choice.check()  # a typed id is a hub id still, and names nothing on this machine
        if models.needs_load(choice, precision):
            yield RaceEvent("loading", message=f"Loading the model in {precision} (and warming it up)…")
        loaded = models.acquire(choice, precision)
    except (ModelLoadError, HeadLoadError, InputError) as err:
        yield RaceEvent("error", message=f"Could not load the model: {err}")
        return
    try:
        yield from _race(models, loaded, request)
    finally:
        models.release(loaded)


def _race(models: Models, loaded: Loaded, request: RaceRequest) -> Iterator[RaceEvent]:
    if stop_requested(request):
        yield RaceEvent("stopped", message="Stopped while the model was loading: nothing ran.")
        return
    target, head = loaded.target, loaded.head
    try:
        prompt_tokens(target, request.prompt, request.max_new_tokens, models.device())
        # All runs are made first: a bad setting or prompt is reported before anything runs.
        race = start_race(target, head, request.prompt, request.entries, max_new_tokens=request.max_new_tokens,
                          sampling=request.sampling)
    except (InputError, SettingsError, PromptError, ValueError) as err:
        yield RaceEvent("error", message=str(err))
        return
    yield RaceEvent("start", traces=headers({n: run.trace for n, run in race.runs.items()}),
                    note=loaded.note + models.unloaded_note(loaded))
    with models.lock:
        # Stop pressed while another race held the models: nothing runs, not even a prefill.
        turns = iter(race) if not stop_requested(request) else iter(())
        for turn in turns:
            yield RaceEvent("turn", name=turn.name, step=turn.step, stop_reason=race.runs[turn.name].trace.stop_reason)
            if not race.stopped and stop_requested(request):
                race.stop()
    yield RaceEvent("end", traces=headers({n: run.trace for n, run in race.runs.items()}))


class LiveRace:
    """The receiving side: the race's traces rebuilt from its events, complete once "end" has arrived."""

    def __init__(self) -> None:
        self.traces: dict[str, RunTrace] = {}
        self.steps: dict[str, list[Step]] = {}
        self.note = ""
        self.ended = False

    def apply(self, event: RaceEvent) -> None:
        if event.kind == "start":
            self.traces, self.note = dict(event.traces), event.note
            self.steps = {name: trace.steps for name, trace in self.traces.items()}
        elif event.kind == "turn":
            self.steps[event.name].append(event.step)
            self.traces[event.name].stop_reason = event.stop_reason
        elif event.kind == "end":
            self.traces = {name: replace(final, steps=self.steps[name]) for name, final in event.traces.items()}
            self.ended = True

    def done_share(self, max_new_tokens: int, runs: int) -> float:
        """How much of a race of `runs` runs is done: each run's new tokens over `max_new_tokens` (all of it once the
        run has ended), averaged."""
        done = 0.0
        for name, steps in self.steps.items():
            tokens = sum(len(s.token_ids) for s in steps if not s.prefill)
            done += 1.0 if self.traces[name].stop_reason else min(tokens / max_new_tokens, 1.0)
        return done / runs

    def finished(self) -> dict[str, RunTrace]:
        """The runs that produced anything; a run cut off before its "end" counts as stopped."""
        out = {}
        for name, trace in self.traces.items():
            if trace.steps:
                if not self.ended:
                    trace = replace(trace, stop_reason=trace.stop_reason or "stopped", summary=summarize(trace.steps),
                                    text="".join(s.text for s in trace.steps))
                out[name] = trace
        return out


def collect(events: Iterator[RaceEvent]) -> LiveRace:
    """A whole race without watching it (the recorder, the tests); an error event raises RuntimeError."""
    live = LiveRace()
    for event in events:
        if event.kind in ("error", "stopped"):
            raise RuntimeError(event.message)
        live.apply(event)
    return live


def zero_gpu() -> bool:
    """Whether this is a ZeroGPU Space: its `spaces` package is installed there and rarely anywhere else."""
    return importlib.util.find_spec("spaces") is not None


def asked_seconds(request: RaceRequest) -> int:
    """The duration a race's GPU call asks for: the request carries it, sized by the page (explorer.gputime)."""
    return request.gpu_seconds


def on_device(fn: Callable, duration: Callable | int) -> Callable:
    """`fn` inside `spaces.GPU` where the `spaces` package is installed (a ZeroGPU Space), else `fn` itself."""
    try:
        import spaces  # optional: only a ZeroGPU Space installs it, so it stays a local import
    except ImportError:
        return fn
    return spaces.GPU(duration=duration)(fn)


def device_race(models: Models) -> Callable[[RaceRequest], Iterator[RaceEvent]]:
    """The race function for this app's models, on the GPU process where there is one. A pair that could not load
    at start-up is answered here, before any GPU time is asked for."""
    def race(request: RaceRequest) -> Iterator[RaceEvent]:
        yield from race_events(models, request)

    on_gpu = on_device(race, asked_seconds)

    def checked(request: RaceRequest) -> Iterator[RaceEvent]:
        refused = models.refusal(request.choice)
        if refused:
            yield RaceEvent("error", message=f"Could not load the model: {refused}")
            return
        yield from on_gpu(request)

    return checked


def device_measure(models: Models) -> Callable[[str, ModelChoice | None], dict[str, Any]]:
    """Time this machine in a precision (ddd.bench.budget) and return the preset it finds (the caller keeps it: a GPU
    process keeps nothing between calls); raises what loading raises."""
    def measure(precision: str, choice: ModelChoice | None = None) -> dict[str, Any]:
        with models.using(choice, precision) as loaded, models.lock:
            return measured_preset(auto_budget(loaded.target, loaded.head))

    return on_device(measure, START_UP_ASK_S)


def time_start_up(models: Models, race: Callable[[RaceRequest], Iterator[RaceEvent]],
                  measure: Callable[[str, ModelChoice | None], dict[str, Any]], gpu: GpuTime,
                  choices: list[ModelChoice | None]) -> None:
    """On ZeroGPU, before the first visitor and charged to none, for each pair loaded at start-up: two short races
    (the first pays for what only a first call pays for; the second is timed, so that a visitor's first race asks for
    what it will take) and the measured preset (Models.measured), so that a visitor's "measure this machine" costs
    their quota nothing. A pair whose timing fails is said in the log; its races then ask for an untimed pace."""
    precision = models.default_precision()
    for choice in choices:
        if choice is not None and not models.pinned_choice(choice):
            continue  # left out at start-up (the log said why)
        key = models.key(choice, precision)
        request = RaceRequest(WARM_UP_PROMPT, race_entries(PRESETS[GPU_PRESET], COLUMN_METHODS), WARM_UP_TOKENS,
                              Sampling(), precision, choice=choice, gpu_seconds=START_UP_ASK_S)
        try:
            for timed in (False, True):
                start = time.perf_counter()
                live = collect(race(request))
                if timed:
                    gpu.record(key, live.finished(), time.perf_counter() - start, start_up=True)
            start = time.perf_counter()
            preset = measure(precision, choice)
            took = time.perf_counter() - start
        except Exception as err:  # noqa: BLE001 - ZeroGPU answers with gr.Error; the Space must start regardless
            print(f"Timing {choice.model if choice else 'the default model'} at start-up failed: {err}", flush=True)
            continue
        preset["summary"] += f" (measured at start-up in {took:.0f} s of GPU time, charged to no visitor)"
        models.measured[key] = preset
