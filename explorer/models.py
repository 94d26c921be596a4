"""The app's targets and draft heads: a cache shared by every visitor, read-only, bounded in memory.

Each visitor picks a model and head for their own races (`ModelChoice`, kept in their Session). The app's own pair
loads at start-up (`start`; on a ZeroGPU Space every pair it offers, `pin`), so that a first visitor waits no longer
than the next; when it cannot load, the first fallback that loads takes its place and the page says why (`notices`),
and when none loads the server starts all the same and says why (`unavailable`). Other pairs load on the Run that
first needs them and stay cached for whoever asks next.
A race holds its pair (`using`) for as long as it decodes: an idle pair is unloaded to make room for another (the
least recently used first, and the race that made room says which), a pair in use or pinned never is. At most
MAX_LOADED pairs and, on a CPU, MAX_LOADED_BYTES of weights stay loaded, and what is unloaded goes back to the
system (`malloc_trim`: freed tensors otherwise stay in the allocator's heap, and each precision a visitor switches
to grows the process for good). `lock` keeps two races from decoding at the same time (they would steal each
other's cores and time each other).
"""
from __future__ import annotations

import ctypes
import gc
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from components.inputs import InputError, text
from components.tokens import escape
from components.views import source_name
from ddd import load_target, resolve_head
from ddd.catalog import PAIRS, check_fits, choose_head, model_config, needed_bytes
from ddd.head import HeadLoadError
from ddd.models import ModelLoadError
from ddd.precision import Int8Linear
from ddd.settings import PRECISIONS
from ddd.turns import warm_up

# The CPU's starting precision: int8 makes a verified tree cheapest next to one plain step, which is where
# speculative decoding starts to pay on a CPU (docs/benchmark.md; docs/precision.md).
CPU_PRECISION = "int8"
RANDOM_HEAD_NOTE = (" A random head drafts almost nothing the target accepts (tau ≈ 1), so EAGLE-2 and DDD run "
                    "slower than plain decoding here.")
# Pairs kept loaded at once (each precision of a model counts as one): the app's own and one a visitor chose.
MAX_LOADED = 2
# A CPU Space (cpu-basic) has 16 GB of memory; the loaded weights keep at most half of it, the rest is for the
# activations, the caches and Gradio. float16 and bfloat16 on a CPU hold each linear layer in float64 too
# (ddd.precision.ExactLinear), so the default model takes about 0.5 GB in float32 and 1.4 GB in float16.
CPU_SPACE_BYTES = 16 * 10**9
MAX_LOADED_BYTES = CPU_SPACE_BYTES // 2
# A ZeroGPU Space's GPU memory: half an RTX Pro 6000, 48 GB by default (Hugging Face's Spaces documentation,
# ZeroGPU). The pairs pinned at start-up must fit it together; the main process cannot measure it, since CUDA is
# only emulated there.
ZERO_GPU_BYTES = 48 * 10**9
MAX_ID_CHARS = 300
ROOT = Path(__file__).resolve().parent.parent
# One part of a hub id (owner or name): letters, digits, '-', '_' and '.', starting with a letter or digit and
# not ending with '.' or '-'; so '.', '..' and '~' never pass.
HUB_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
# A load's reason as the page shows it: its first line, at most this long (a library's message can run to pages).
REASON_CHARS = 600


def hub_id(value: Any, label: str, allowed: tuple[str, ...] = ()) -> str | None:
    """A hub id (owner/name) typed in the page, or one of `allowed`; None when empty. Anything that is or could
    be a path on this machine is refused: local directories are given on the command line (--model, --head)."""
    value = text(value, label).strip()
    if len(value) > MAX_ID_CHARS:
        raise InputError(f"{label} is {len(value):,} characters long; a hub id has at most {MAX_ID_CHARS}.")
    if not value or value in allowed:
        return value or None
    parts = value.split("/")
    if len(parts) != 2 or not all(HUB_PART.fullmatch(p) and ".." not in p and "--" not in p for p in parts):
        raise InputError(f"{label} {value!r} is not a hub id (owner/name: letters, digits, '-', '_' and '.'); local "
                         "directories are given on the command line (python app.py --model DIR --head DIR).")
    if any(os.path.lexists(base / value) for base in (Path.cwd(), ROOT)):
        raise InputError(f"{label} {value!r} names a path on this server, not a hub id; local directories are given "
                         "on the command line (python app.py --model DIR --head DIR).")
    return value


@dataclass(frozen=True)
class ModelChoice:
    """A visitor's model and head. model None: the embedded default; head None: the head choose_head picks for
    the model. Typed ids are hub ids only (`hub_id`), checked again before they load."""

    model: str | None = None
    head: str | None = None

    def check(self) -> None:
        hub_id(self.model, "The model id")
        hub_id(self.head, "The head id", ("random",))


@dataclass
class ModelConfig:
    model: str | None = None  # None: the embedded default
    head: str | None = None  # a directory, "random", or None: the head choose_head picks for the model
    device: str | None = None
    dtype: str | None = None

    @classmethod
    def from_env(cls) -> "ModelConfig":
        return cls(os.environ.get("DDD_MODEL") or None, os.environ.get("DDD_HEAD") or None,
                   os.environ.get("DDD_DEVICE") or None, os.environ.get("DDD_DTYPE") or None)


Key = tuple[str | None, str | None, str]  # model, head, precision


@dataclass
class Loaded:
    """One cached pair: read-only for every race that holds it."""

    key: Key
    target: Any
    head: Any
    note: str
    nbytes: int
    users: int = 0
    used_at: float = 0.0
    pinned: bool = False
    unloaded: str = ""  # the pairs unloaded to make room for this one, said once to the race that loaded it


def model_name(model: str | None) -> str:
    """A model as a sentence names it: the catalog's name for one of its pairs' targets, else its id."""
    pair = next((p for p in PAIRS if p.model == model), None)
    return pair.label.split(" + ")[0] if pair else source_name(model)


def reason(err: BaseException) -> str:
    """Why a load failed, in one line: the error's first line (its type where it has none), shortened."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    if not isinstance(err, (ModelLoadError, HeadLoadError)):
        first = f"{type(err).__name__}: {first}"
    return first if len(first) <= REASON_CHARS else first[:REASON_CHARS - 1] + "…"


def weight_bytes(target: Any, head: Any) -> int:
    """The memory a pair's weights hold: parameters, buffers (the float64 copies exact CPU linears keep) and int8
    layers' packed weights, each tensor once (the head shares the target's embeddings)."""
    modules = [m for m in (getattr(target, "model", None), head) if m is not None and hasattr(m, "parameters")]
    tensors = {t.data_ptr(): t.numel() * t.element_size()
               for m in modules for t in (*m.parameters(), *m.buffers()) if t.numel()}
    packed = sum(q.in_features * q.out_features for m in modules for q in m.modules() if isinstance(q, Int8Linear))
    return sum(tensors.values()) + packed


def give_back_memory() -> None:
    """Return the heap's free pages to the system (glibc); elsewhere the allocator keeps them."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Models:
    """The loaded pairs by (model, head, precision), at most `max_loaded` of them."""

    def __init__(self, config: ModelConfig, max_loaded: int = MAX_LOADED, max_bytes: int = MAX_LOADED_BYTES):
        self.config = config
        self.max_loaded = max_loaded
        self.max_bytes = max_bytes  # on a CPU; on a GPU check_fits weighs each model against the free memory
        self.measured: dict[Key, dict[str, Any]] = {}  # the measured preset per pair (explorer.presets)
        self.lock = threading.Lock()
        self._cache_lock = threading.Lock()  # guards the cache and its users counts
        self._load_lock = threading.Lock()  # one load at a time
        self._loaded: dict[Key, Loaded] = {}
        self._last: Loaded | None = None
        self.pinned: str | None = None  # the one precision offered, once loaded at start-up (pin)
        self.notices: list[str] = []  # for the page: the pairs that could not load at start-up, and what races instead
        self.unavailable = ""  # why no pair loaded at start-up ("" when one did): a Run answers with it
        self._failed: dict[tuple[str | None, str | None], str] = {}  # the pairs start-up could not load, and why

    # -- what is asked for -------------------------------------------------------------------------

    def device(self) -> str:
        return self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def precisions(self) -> list[str]:
        """The modes this device offers (int8 kernels exist for CPUs only), or the pinned one."""
        if self.pinned:
            return [self.pinned]
        return [p for p in PRECISIONS if p != "int8" or self.device() == "cpu"]

    def default_precision(self) -> str:
        return self.config.dtype or ("float16" if self.device().startswith("cuda") else CPU_PRECISION)

    def source(self, choice: ModelChoice | None) -> tuple[str | None, str | None]:
        """The model and head a choice names (None: the app's own, from the command line)."""
        return (self.config.model, self.config.head) if choice is None else (choice.model, choice.head)

    def key(self, choice: ModelChoice | None, precision: str | None = None) -> Key:
        return (*self.source(choice), precision or self.default_precision())

    # -- the cache ---------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return bool(self._loaded)

    @property
    def target(self) -> Any:
        """The target of the pair used last (None before any has loaded)."""
        return self._last.target if self._last else None

    @property
    def head(self) -> Any:
        return self._last.head if self._last else None

    def needs_load(self, choice: ModelChoice | None = None, precision: str | None = None) -> bool:
        return self.key(choice, precision) not in self._loaded

    def install(self, target: Any, head: Any, choice: ModelChoice | None = None, note: str = "") -> Loaded:
        """A pair loaded elsewhere (the tests, the recorder), cached under `choice` in its target's precision."""
        key = self.key(choice, getattr(target, "precision", None))
        entry = Loaded(key, target, head, note, weight_bytes(target, head), used_at=time.monotonic())
        with self._cache_lock:
            self._loaded[key] = entry
        self._last = entry
        return entry

    def refusal(self, choice: ModelChoice | None = None) -> str:
        """Why `choice` will not load ("" when it may): the app's own pair, when nothing loaded at start-up, is not
        tried again on every Run (a 7B pair would take minutes to fail again)."""
        return self.unavailable if self.unavailable and self.source(choice) == self.source(None) else ""

    def acquire(self, choice: ModelChoice | None = None, precision: str | None = None) -> Loaded:
        """The pair for `choice` in `precision`, loaded if needed, held until `release`; raises ModelLoadError
        or HeadLoadError with a message for the page."""
        if self.refusal(choice):
            raise ModelLoadError(self.refusal(choice))
        key = self.key(choice, precision)
        entry = self._hold(key)
        if entry is None:
            with self._load_lock:
                entry = self._hold(key) or self._load(key)
        self._last = entry
        return entry

    def release(self, entry: Loaded) -> None:
        with self._cache_lock:
            entry.users = max(entry.users - 1, 0)
            entry.used_at = time.monotonic()

    @contextmanager
    def using(self, choice: ModelChoice | None = None, precision: str | None = None) -> Iterator[Loaded]:
        entry = self.acquire(choice, precision)
        try:
            yield entry
        finally:
            self.release(entry)

    def load(self, precision: str | None = None, choice: ModelChoice | None = None) -> tuple[Any, Any]:
        """The target and head for `choice` in `precision`, loaded and cached (not held)."""
        with self.using(choice, precision) as entry:
            return entry.target, entry.head

    def start(self, fallbacks: Sequence[ModelChoice] = ()) -> Loaded | None:
        """Load the app's own pair now, in the starting precision, so that a first visitor waits no longer than the
        next. When it cannot load, the first of `fallbacks` that does becomes the app's own, with a line in the log
        and a sentence in `notices`; when none loads, `unavailable` says why and None is returned: the server
        starts all the same, and the page says so."""
        with self._load_lock:
            return self._start(fallbacks)

    def _start(self, fallbacks: Sequence[ModelChoice]) -> Loaded | None:
        failed = self._failed
        for choice in [None, *fallbacks]:
            model, head = self.source(choice)
            if (model, head) in failed:
                continue
            key = (model, head, self.default_precision())
            try:
                entry = self._loaded.get(key) or self._build(key)
            # Whatever a load raises (files missing, a tokenizer library absent, a gated repository, memory), the
            # server starts: the next fallback is tried, or the page says why none loaded.
            except Exception as err:  # noqa: BLE001
                failed[model, head] = reason(err)
                print(f"Could not load {source_name(model or 'the default model')} + {source_name(head or 'its head')}"
                      f": {failed[model, head]}", flush=True)
                self._free_failed_load()
                continue
            if choice is not None:
                self.config = replace(self.config, model=model, head=head)
                print(f"Racing {model_name(model)} instead.", flush=True)
            self.notices = [f"{model_name(m)} could not be loaded ({why}); racing {model_name(model)} instead."
                            for (m, _), why in failed.items()]
            self._last = entry
            return entry
        self.unavailable = " ".join(f"{model_name(m)} could not be loaded: {why}" for (m, _), why in failed.items())
        return None

    def start_up_words(self) -> str:
        """What the page says about the start-up ("" when the app's own pair loaded, or none was tried)."""
        if self.unavailable:
            return (f"No model could be loaded when this server started, so no race can run here; the recorded races "
                    f"still replay. {self.unavailable}")
        return " ".join(self.notices)

    def _free_failed_load(self) -> None:
        """What a load that failed half-way left (weights read, a GPU allocation) goes back before the next one."""
        gc.collect()
        give_back_memory()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def pin(self, extra: Sequence[ModelChoice] = ()) -> None:
        """Load the app's own pair (or, when it cannot load, the first of `extra` that does: `start`), then each other
        of `extra` (in order) that fits ZERO_GPU_BYTES beside the pairs loaded before it; keep them for good and offer
        only this precision. On a ZeroGPU Space each race runs in a short-lived GPU process: a model loaded there is
        gone after the call, so the models load once, at start-up. One of `extra` that does not fit or fails to load
        is left out, with one line in the log saying which and why; when none loads, nothing is offered and
        `unavailable` says why."""
        with self._load_lock:
            self.pinned = self.default_precision()
            own = self._start(extra)
            if own is None:
                return
            own.pinned = True
            # Those _start tried and could not load have their line in the log already.
            for choice in (c for c in extra if self.source(c) not in self._failed):
                key = self.key(choice, self.pinned)
                entry = self._loaded.get(key)
                try:
                    if entry is None:
                        self._check_budget(choice.model, self.pinned)
                        entry = self._build(key)
                except Exception as err:  # noqa: BLE001 - as in _start: a pair that cannot load is left out
                    print(f"Not offering {choice.model or 'the default model'} + {choice.head or 'its head'}: "
                          f"{reason(err)}", flush=True)
                    self._free_failed_load()
                    continue
                entry.pinned = True
            self.max_loaded = max(self.max_loaded, sum(e.pinned for e in self._loaded.values()))

    def pinned_choice(self, choice: ModelChoice) -> bool:
        """Whether `choice` was loaded at start-up in the pinned precision (and so may be raced on ZeroGPU)."""
        entry = self._loaded.get(self.key(choice, self.pinned))
        return bool(entry and entry.pinned)

    def loaded_bytes(self) -> int:
        return sum(e.nbytes for e in self._loaded.values())

    def idle_bytes(self) -> int:
        """What unloading every pair no race holds would give back."""
        with self._cache_lock:
            return sum(e.nbytes for e in self._loaded.values() if not e.users and not e.pinned)

    def _hold(self, key: Key) -> Loaded | None:
        with self._cache_lock:
            entry = self._loaded.get(key)
            if entry is not None:
                entry.users += 1
                entry.used_at = time.monotonic()
            return entry

    def _check_budget(self, model: str | None, precision: str) -> None:
        """Raise ModelLoadError when `model` would not fit ZERO_GPU_BYTES beside the weights pinned so far: races
        take turns, so only the racing pair needs room for its activations and cache (the estimate's headroom)."""
        if model is None:
            return  # the small default fits anywhere (check_fits)
        needed = needed_bytes(model_config(model), precision)
        left = ZERO_GPU_BYTES - sum(e.nbytes for e in self._loaded.values() if e.pinned)
        if needed > left:
            raise ModelLoadError(f"it needs about {needed / 1e9:.1f} GB in {precision}, and {left / 1e9:.1f} GB "
                                 f"of the Space's {ZERO_GPU_BYTES / 1e9:.0f} GB is left beside the pairs loaded "
                                 "before it.")

    def _load(self, key: Key) -> Loaded:
        gone = self._make_room(key[0], key[2])
        entry = self._build(key, users=1)
        if self.device() == "cpu":
            with self._cache_lock:  # weights over the budget: the idle pairs go, least recently used first
                idle = sorted((e for e in self._loaded.values() if not e.users and not e.pinned),
                              key=lambda e: e.used_at)
                while idle and self.loaded_bytes() > self.max_bytes:
                    gone += self._unload([idle.pop(0)])
        if gone:
            entry.unloaded = self._unload_words(gone, key)
        gc.collect()  # what loading left behind (a float32 copy converted, int8's calibration) goes back too
        give_back_memory()
        return entry

    def unloaded_note(self, entry: Loaded) -> str:
        """Which pairs were unloaded to load `entry`: said once, to the race that loaded it."""
        with self._cache_lock:
            note, entry.unloaded = entry.unloaded, ""
        return note

    def _unload_words(self, gone: list[Loaded], key: Key) -> str:
        def named(k: Key) -> str:
            return k[2] if k[:2] == key[:2] else f"{source_name(k[0] or 'the default model')} in {k[2]}"
        names = " and ".join(named(e.key) for e in gone)
        return (f" {names} {'was' if len(gone) == 1 else 'were'} unloaded to make room for {key[2]}: this server "
                f"keeps at most {self.max_loaded} models loaded and {self.max_bytes / 1e9:.0f} GB of weights.")

    def _build(self, key: Key, users: int = 0) -> Loaded:
        """Load the pair for `key` into the cache (under _load_lock), held by `users` races."""
        model, head_spec, precision = key
        target = load_target(model, dtype=precision, device=self.device())
        head, note = resolve_head(head_spec, target)
        warm_up(target, head)
        untrained = choose_head(head_spec, target.name).source is None
        entry = Loaded(key, target, head, note + (RANDOM_HEAD_NOTE if untrained else ""), weight_bytes(target, head),
                       users=users, used_at=time.monotonic())
        with self._cache_lock:
            self._loaded[key] = entry
        return entry

    def _make_room(self, model: str | None, precision: str) -> list[Loaded]:
        """Unload idle pairs (least recently used first) until another fits; refuse while the others are in use. The
        pairs unloaded."""
        with self._cache_lock:
            idle = sorted((e for e in self._loaded.values() if not e.users and not e.pinned), key=lambda e: e.used_at)
            over = max(len(self._loaded) + 1 - self.max_loaded, 0)
            if over > len(idle):
                raise ModelLoadError(f"Other visitors' races are using the {len(self._loaded)} models this server "
                                     "keeps loaded: press Run again when one has finished.")
        # Nothing is unloaded for a model that would not fit even then.
        check_fits(model, precision, self.device(), freed=sum(e.nbytes for e in idle))
        evict = idle[:over]
        try:
            check_fits(model, precision, self.device(), freed=sum(e.nbytes for e in evict))
        except ModelLoadError:  # it fits only once every idle pair is gone
            evict = idle
        with self._cache_lock:
            return self._unload([e for e in evict if not e.users])

    def _unload(self, entries: list[Loaded]) -> list[Loaded]:
        """Drop idle pairs from the cache (under _cache_lock), their memory given back to the system; the pairs."""
        for entry in entries:
            self._loaded.pop(entry.key, None)
            self.measured.pop(entry.key, None)
            if self._last is entry:
                self._last = None
        if entries:
            gc.collect()
            give_back_memory()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        return entries

    # -- words -------------------------------------------------------------------------------------

    def describe(self, choice: ModelChoice | None = None) -> str:
        """One Markdown line for the Settings panel: the visitor's model and head, and whether they are loaded."""
        model_spec, head_spec = self.source(choice)
        entry = max((e for e in list(self._loaded.values()) if e.key[:2] == (model_spec, head_spec)),
                    key=lambda e: e.used_at, default=None)
        loaded = entry.target.name if entry else None  # the default comes from the package or the hub
        model = source_name(model_spec or loaded) if model_spec or loaded else "SmolLM2-135M-Instruct (the default)"
        head = choose_head(head_spec, model_spec or loaded)
        state = (f"loaded in {entry.target.precision}" if entry else
                 "could not be loaded at start-up" if self.refusal(choice) else "loads on your first Run")
        text = f"**Model:** {escape(model)} · **draft head:** {escape(head.label)} · *{state}*"
        if head.source is None:
            text += ("\n\n<div class='note-box'>No trained draft head: a random head drafts almost nothing the target "
                     "accepts, so the speculative columns will be slow. The recorded examples were made with a trained head.</div>")
        elif head.note:
            text += f"\n\n<div class='note-box'>{escape(head.note)}</div>"
        return text
