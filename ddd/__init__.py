"""DDD Explorer's engine: plain, EAGLE, EAGLE-2 and Dynamic Depth Decoding on stock transformers models.

The public names below load on first use (PEP 562), so that `import ddd.metrics` or `import ddd.trace`, which
the views use, does not import torch."""
from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module that defines it.
_EXPORTS = {
    "DEFAULT_MODEL": "models", "ModelLoadError": "models", "Target": "models", "load_target": "models",
    "Eagle3Head": "eagle3", "new_eagle3_head": "eagle3",
    "Generation": "engine", "PromptError": "engine", "encode_prompt": "engine", "generate": "engine",
    "resolve_head": "catalog",
    "DraftHead": "head", "EagleHead": "head", "HeadLoadError": "head", "new_head": "head",
    "load_head": "checkpoint", "save_head": "checkpoint",
    "METHODS": "settings", "Sampling": "settings", "SettingsError": "settings", "method_settings": "settings",
    "SCHEMA_VERSION": "trace", "DraftNode": "trace", "RunTrace": "trace", "Step": "trace", "TraceFileError": "trace",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ddd' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
