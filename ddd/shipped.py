"""Where the files shipped with the project live: `assets/` beside the packages in a checkout (and in an
exported Space), or `ddd/assets/` in an installed package, where pyproject.toml puts them as package data."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped(name: str) -> Path:
    """assets/NAME (`head`, `examples`): the installed package's copy where there is one, else the checkout's.
    Only an installed package has `ddd/assets`, so a checkout never reads a stale installed copy."""
    installed = _PACKAGE / "assets" / name
    return installed if installed.exists() else _PACKAGE.parent / "assets" / name
