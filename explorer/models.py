"""The app's target and draft head: loaded on the first Run, shared by every session, decoding one race at a time."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import torch

from components.tokens import escape
from components.views import source_name
from ddd import load_target, resolve_head
from ddd.catalog import check_fits, choose_head
from ddd.settings import PRECISIONS
from ddd.turns import warm_up

# The CPU's starting precision: int8 makes a verified tree cheapest next to one plain step, which is where
# speculative decoding starts to pay on a CPU (README: results on a 2-core CPU, precision modes).
CPU_PRECISION = "int8"
RANDOM_HEAD_NOTE = (" A random head drafts almost nothing the target accepts (tau ≈ 1), so EAGLE-2 and DDD run "
                    "slower than plain decoding here.")


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


class Models:
    """The target and head in one precision, reloaded when a race asks for another; `lock` keeps races from
    decoding at the same time (they would steal each other's cores and time each other)."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.target: Any = None
        self.head: Any = None
        self.note = ""
        self.measured: dict[str, dict[str, Any]] = {}  # the measured preset per precision (explorer.presets)
        self.lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.pinned: str | None = None  # the one precision offered, once loaded at start-up (pin)

    @property
    def loaded(self) -> bool:
        return self.target is not None

    def device(self) -> str:
        return self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def precisions(self) -> list[str]:
        """The modes this device offers (int8 kernels exist for CPUs only), or the pinned one."""
        if self.pinned:
            return [self.pinned]
        return [p for p in PRECISIONS if p != "int8" or self.device() == "cpu"]

    def pin(self) -> None:
        """Load now and offer only this precision. On a ZeroGPU Space each race runs in a short-lived GPU
        process: a model loaded there is gone after the call, so the models load once, at start-up."""
        self.load()
        self.pinned = self.target.precision

    def default_precision(self) -> str:
        return self.config.dtype or ("float16" if self.device().startswith("cuda") else CPU_PRECISION)

    def needs_load(self, precision: str) -> bool:
        return self.target is None or self.target.precision != precision

    def load(self, precision: str | None = None):
        """The target and head in `precision` (default: the loaded one, else the default); raises
        ddd.ModelLoadError or ddd.HeadLoadError with a message for the page."""
        with self._load_lock:
            precision = precision or (self.target.precision if self.target else self.default_precision())
            if self.needs_load(precision):
                check_fits(self.config.model, precision, self.device(), freed=self.loaded_bytes())
                self.target = self.head = None  # the old pair's memory goes before the new one loads
                target = load_target(self.config.model, dtype=precision, device=self.device())
                head, note = resolve_head(self.config.head, target)
                warm_up(target, head)
                untrained = choose_head(self.config.head, target.name).source is None
                self.note = note + (RANDOM_HEAD_NOTE if untrained else "")
                self.target, self.head = target, head
        return self.target, self.head

    def loaded_bytes(self) -> int:
        """What the loaded target and head hold in weights (given back when another pair loads)."""
        modules = [m for m in (self.target.model if self.target else None, self.head) if m is not None]
        return sum(p.numel() * p.element_size() for m in modules for p in m.parameters())

    def choose(self, model: str | None, head: str | None) -> None:
        """Race another target and head from the next Run on (loaded then, after a memory check)."""
        if self.pinned:
            raise RuntimeError("The models of this Space load once, at start-up.")
        with self._load_lock:
            self.config = ModelConfig(model, head, self.config.device, self.config.dtype)
            self.target = self.head = None
            self.measured.clear()
            self.note = ""

    def describe(self) -> str:
        """One Markdown line for the Settings panel: which model and head, and whether they are loaded."""
        loaded = self.target.name if self.loaded else None  # the default comes from the package or the hub
        model = source_name(self.config.model or loaded) if self.config.model or loaded else (
            "SmolLM2-135M-Instruct (the default)")
        choice = choose_head(self.config.head, self.config.model or loaded)
        state = f"loaded in {self.target.precision}" if self.loaded else "loads on the first Run"
        text = f"**Model:** {model} · **draft head:** {choice.label} · *{state}*"
        if choice.source is None:
            text += ("\n\n<div class='note-box'>No trained draft head: a random head drafts almost nothing the target "
                     "accepts, so the speculative columns will be slow. The recorded examples were made with a trained head.</div>")
        elif choice.note:
            text += f"\n\n<div class='note-box'>{escape(choice.note)}</div>"
        return text
