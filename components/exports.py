"""Race files offered for download: gzipped, in one folder, removed when old or too many.

Every finished race is offered as a file, and Gradio copies each file it serves into its own cache; a race at
the widest tree settings is tens of MB of JSON (docs/app.md, Limits). Without cleanup both folders only grow, so this
keeps few of its own files and asks Gradio (CACHE_CLEANUP, given to gr.Blocks) to drop its old copies.
"""
from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .race import Race
from .static_page import saved_page

# gr.Blocks(delete_cache=...): every 10 minutes Gradio removes the files it cached more than an hour ago
# (uploads and the copies of files it served), so a visitor has an hour to press Save.
CACHE_CLEANUP = (600, 3600)


@dataclass
class ExportStore:
    """One folder of gzipped race files. Gradio copies a file when it serves it, so a file here is only needed
    until its callback returns; pruning by age and count bounds the folder whatever sessions do."""

    max_files: int = 32
    max_age_s: float = 3600.0
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
        now = time.time()
        for position, (mtime, path) in enumerate(files):
            if path != keep and (position >= self.max_files or now - mtime > self.max_age_s):
                path.unlink(missing_ok=True)

    def files(self) -> list[Path]:
        return sorted(self._dir().glob("ddd-race-*"))
