"""This CPU's own preset: the tree settings the budget tool (ddd.bench.budget) finds fastest here, measured once per
machine, model pair and precision at start-up and kept on disk, so that a newcomer's first race runs the tree that
suits the CPU it runs on (docs/app.md, "This machine's preset"). On AVX2 and AVX-512 CPUs the fastest trees
differ: verifying a few tokens costs 1.3 plain forwards on one and about 2 on the other."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from ddd.bench.budget import auto_budget
from ddd.models import cache_dir

from .models import Models
from .presets import measured_preset

# The instruction-set extensions that move a forward's cost; the rest of a CPU's flags do not pick a tree.
COST_FLAGS = ("avx2", "fma", "f16c", "avx512", "vnni", "amx", "bf16", "neon", "sve")
# A CPU's trees are small (the widest pick seen verified 8 tokens): the start-up measurement times verifications of
# up to 16 tokens and 6 draft calls, a fraction of the budget tool's full range (64 and 8), in a few seconds' work.
CPU_RANGE = dict(max_tokens=16, max_calls=6, repeats=5, new_tokens=24)


def machine() -> dict[str, Any]:
    """What a CPU's costs depend on: its model, its vector extensions, the threads and the PyTorch that run it."""
    name, flags = platform.processor() or platform.machine(), []
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        field, _, value = line.partition(":")
        if field.strip() == "model name" and value.strip():
            name = value.strip()
        elif field.strip() in ("flags", "Features") and not flags:
            flags = sorted(f for f in value.split() if any(part in f for part in COST_FLAGS))
    return {"cpu": name, "flags": flags, "threads": torch.get_num_threads(), "torch": torch.__version__}


def describe(found: dict[str, Any]) -> str:
    return f"{found['cpu']} ({' '.join(found['flags']) or 'no vector extensions listed'}; " \
           f"{found['threads']} threads, torch {found['torch']})"


def preset_file(models: Models, precision: str) -> Path:
    """Where this machine's pick for the app's own pair in `precision` is kept (`DDD_CACHE`/presets)."""
    model, head = models.source(None)
    key = json.dumps({"machine": machine(), "model": model, "head": head, "precision": precision}, sort_keys=True)
    return cache_dir() / "presets" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def pick_cpu_preset(models: Models) -> dict[str, Any] | None:
    """This machine's preset for the app's own pair in its starting precision: read from disk, or measured now and
    kept; it becomes the page's "measure this machine" preset, the one a CPU page opens on. None (and a log line)
    where the pair did not load or the measurement failed: the page then opens on the fixed CPU preset."""
    precision = models.default_precision()
    path = preset_file(models, precision)
    preset = None
    if path.is_file():
        try:
            preset = json.loads(path.read_text())["preset"]
        except (OSError, ValueError, KeyError):
            print(f"This machine's preset in {path} is unreadable: measuring again.", flush=True)
    if preset is None:
        print(f"Measuring this machine once for its CPU preset: {describe(machine())}, {precision}.", flush=True)
        start = time.perf_counter()
        try:
            with models.using(None, precision) as loaded, models.lock:
                preset = measured_preset(auto_budget(loaded.target, loaded.head, **CPU_RANGE))
        except Exception as err:  # noqa: BLE001 - the fixed CPU preset still serves; the log says why
            print(f"Could not measure this machine ({type(err).__name__}: {err}); the page opens on the fixed CPU "
                  "preset.", flush=True)
            return None
        preset["summary"] += f" (measured at start-up in {time.perf_counter() - start:.0f} s)"
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"machine": machine(), "preset": preset}, indent=1))
        temporary.replace(path)
    models.measured[models.key(None, precision)] = preset
    print(f"This machine's CPU preset ({path}): {preset['summary']}.", flush=True)
    return preset
