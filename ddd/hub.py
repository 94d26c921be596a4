"""Where a model or head id points: a local directory, or a Hugging Face hub repository fetched into (or found
in) the hub cache under HF_HOME."""
from __future__ import annotations

import re
from pathlib import Path

import huggingface_hub.constants
from huggingface_hub import scan_cache_dir, snapshot_download

from .models import ModelLoadError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
# What a draft head's repository holds that loading it reads; its other files are never downloaded.
HEAD_FILES_PATTERNS = ["config.json", "model.safetensors", "pytorch_model.bin"]


def is_hub_id(spec: str) -> bool:
    """Whether `spec` names a hub repository rather than a local directory."""
    return not Path(spec).exists() and bool(HUB_ID.match(spec))


def fetch(spec: str, what: str, patterns: list[str] | None = None) -> Path:
    """A local directory for `spec`: itself, or the hub repository's snapshot (downloaded once, or taken from
    the HF_HOME cache; HF_HUB_OFFLINE is honoured). Raises ModelLoadError saying why not."""
    if Path(spec).exists():
        return Path(spec)
    if not HUB_ID.match(spec):
        raise ModelLoadError(f"The {what} {spec!r} is neither a directory here nor a hub id (owner/name).")
    try:
        return Path(snapshot_download(spec, allow_patterns=patterns))
    # The hub client reports missing repositories, gated access, offline mode and network failures each
    # through its own exception type.
    except Exception as err:  # noqa: BLE001
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"Could not fetch the {what} {spec!r}: {first}") from None


def hub_cache() -> Path:
    """The hub cache directory, made if missing (a fresh HF_HOME has none until the first download)."""
    cache = Path(huggingface_hub.constants.HF_HUB_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def cached(repo_id: str) -> bool:
    """Whether the repository's files are in the hub cache already (nothing to download)."""
    try:
        return any(repo.repo_id == repo_id and repo.size_on_disk > 0 for repo in scan_cache_dir(hub_cache()).repos)
    except Exception:  # noqa: BLE001 - an unreadable cache counts as empty: the download check then applies
        return False
