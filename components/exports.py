"""Race files offered for download: gzipped, in one folder, removed when old, too many or too large in all.

Every finished race is offered as a file, and a saved page carries plotly (about 5 MB). Gradio copies each file it
serves into its cache unless the file already lies there, so the app keeps this folder inside Gradio's cache
(explorer/sessions.py): each file is on disk once, and Gradio's own cleanup (CACHE_CLEANUP, given to gr.Blocks)
removes what it served once it is CACHE_AGE_S old, as this store does with its own files.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .race import Race
from .static_page import saved_page

# How long a served or uploaded file stays (s): a visitor has this long to press a download link. DDD_CACHE_AGE_S
# shortens it (the disk tests use seconds).
CACHE_AGE_S = int(os.environ.get("DDD_CACHE_AGE_S") or 1800)
# gr.Blocks(delete_cache=(frequency, age)): Gradio looks a tenth of the age apart, at least once a minute.
CACHE_CLEANUP = (max(1, min(60, CACHE_AGE_S // 10)), CACHE_AGE_S)


@dataclass
class ExportStore:
    """One folder of race files and pages; pruning by age, count and bytes bounds it whatever sessions do (the oldest
    go first)."""

    max_files: int = 32
    max_age_s: float = float(CACHE_AGE_S)
    max_bytes: int = 200 * 2**20  # about 32 pages of a long race
    folder: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _dir(self) -> Path:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="ddd-races-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder

    def save(self, race: Race, name: str, replacing: str | None = None, page: bool = False) -> str:
        """Write `race` as `ddd-race-<name>.json.gz` (name kept to letters and digits), or with `page` as a page of its
        own (`.html`), and return its path; `replacing` (the session's previous file) is removed."""
        with self._lock:
            folder = self._dir()
            if replacing:
                self.remove(replacing)
            stem = "".join(c if c.isascii() and c.isalnum() else "-" for c in name[:40]).strip("-") or "run"
            # Unique per save: two sessions racing the same prompt must not overwrite each other's file.
            path = folder / f"ddd-race-{stem}-{time.time_ns() % 10**12}{'.html' if page else '.json.gz'}"
            if page:
                path.write_text(saved_page(race, stem), encoding="utf-8")
            else:
                race.save(path)
            self._prune(keep=path)
            return str(path)

    def remove(self, path: str | None) -> None:
        """Delete `path` if it is one of this store's files (never anything else)."""
        if path and self.folder is not None and Path(path).parent == self.folder:
            Path(path).unlink(missing_ok=True)

    def _prune(self, keep: Path) -> None:
        files = []
        for path in self._dir().glob("ddd-race-*"):
            try:
                files.append((path.stat().st_mtime, path))
            except FileNotFoundError:
                continue
        files.sort(reverse=True)
        now, total = time.time(), 0
        for position, (mtime, path) in enumerate(files):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
            too_much = position >= self.max_files or total > self.max_bytes
            if path != keep and (too_much or now - mtime > self.max_age_s):
                path.unlink(missing_ok=True)

    def files(self) -> list[Path]:
        return sorted(self._dir().glob("ddd-race-*"))
