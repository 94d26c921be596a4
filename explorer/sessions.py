"""One browser tab's state, and the store that makes and cleans up after every tab's."""
from __future__ import annotations

import math
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gradio.utils import get_upload_folder

from components import Race
from components.exports import ExportStore

from .gputime import Quota
from .models import ModelChoice

# The pages a tab may save a minute: each is about 5 MB and seconds of CPU to write, and only its latest is kept.
# DDD_PAGES_PER_MINUTE sets it (the disk tests use 2).
PAGES_PER_MINUTE = int(os.environ.get("DDD_PAGES_PER_MINUTE") or 6)


class Session:
    """A tab's race, what it is doing, its saved file, and its stop file (a race may run in another process,
    explorer.racing, so Stop is a file both can see). A plain class: gr.State calls it for each new tab."""

    def __init__(self, race: Race | None = None):
        self.race = race
        self.stop_file = str(Path(tempfile.gettempdir()) / f"ddd-stop-{uuid.uuid4().hex}")
        self.busy = False  # a race is going: waiting for its turn (`waiting`) or decoding
        self.waiting = False  # its race waits for the races ahead of it (Stop then cancels it at once)
        self.replaying = False
        self.fresh = False  # a race just finished and has not been replayed yet
        self.queued = False  # Run was pressed and the race waits in the queue (Stop then cancels it)
        self.source: str | None = None  # the shipped example file the race came from, if it did
        self.file: str | None = None  # this session's race file in the export store
        self.page: str | None = None  # and its race as a page, where asked for
        self.page_race: Race | None = None  # the race that page shows
        self.page_times: deque[float] = deque(maxlen=PAGES_PER_MINUTE)  # when its latest pages were written
        self.choice: ModelChoice | None = None  # the model menu's choice for this tab's races (None: the app's own)
        self.gpu_quota: Quota | None = None  # on ZeroGPU, what a refusal said the visitor has left

    @property
    def stop_requested(self) -> bool:
        return Path(self.stop_file).exists()

    def request_stop(self) -> None:
        Path(self.stop_file).touch()

    def clear_stop(self) -> None:
        Path(self.stop_file).unlink(missing_ok=True)


@dataclass
class SavedPage:
    """What "Save as a page" gives: the tab's page (None when it has none) and, when no new page was written, why."""

    path: str | None
    note: str = ""


class Sessions:
    """Cleans up after each tab's Session; offers races as files through one ExportStore, kept inside Gradio's cache
    so that Gradio serves them without a copy of its own."""

    def __init__(self, exports: ExportStore | None = None):
        self.exports = exports or ExportStore(folder=Path(get_upload_folder()) / f"ddd-races-{uuid.uuid4().hex[:12]}")
        # A tab's Gradio session id: its Session, for the tabs that saved a page. Gradio keeps a closed tab's state
        # for an hour; its unload event (closed_tab) comes as soon as the tab's connection ends.
        self._tabs: dict[str, Session] = {}
        self._lock = threading.Lock()

    def closed_tab(self, tab: str | None) -> None:
        """A tab's connection ended: its page goes now."""
        with self._lock:
            session = self._tabs.pop(tab, None) if tab else None
        if session is not None:
            self.exports.remove(session.page)
            session.page = session.page_race = None

    def close(self, session: Session | None) -> None:
        """The tab's state is dropped: its race stops and its files go."""
        if session is None:
            return
        with self._lock:
            for tab in [t for t, s in self._tabs.items() if s is session]:
                del self._tabs[tab]
        session.request_stop()
        self.exports.remove(session.file)
        self.exports.remove(session.page)
        if not session.busy:
            session.clear_stop()

    def export(self, session: Session) -> str | None:
        """The session's race as a gzipped JSON file (replacing its previous one); a shipped example's own file."""
        if session.race is None:
            return None
        if session.source:
            return session.source
        session.file = self.exports.save(session.race, session.race.title or session.race.prompt,
                                          replacing=session.file)
        return session.file

    def export_page(self, session: Session, tab: str | None = None) -> SavedPage:
        """The session's race as a page of its own, replacing its previous one; the same race again is the same
        page, and a tab that saved PAGES_PER_MINUTE pages in the last minute is told when it may save the next.
        `tab`: the tab's Gradio session id, so that its page goes when the tab closes."""
        if session.race is None:
            return SavedPage(None, "There is no race to save yet: run one or pick an example.")
        kept = session.page if session.page and Path(session.page).exists() else None
        if kept and session.page_race is session.race:
            return SavedPage(kept)
        now = time.monotonic()
        if len(session.page_times) == PAGES_PER_MINUTE and now - session.page_times[0] < 60:
            wait = math.ceil(60 - (now - session.page_times[0]))
            return SavedPage(None, f"This tab saved {PAGES_PER_MINUTE} pages in the last minute, as many as a tab may: "
                                   f"save this race as a page in {wait} s.")
        if tab:
            with self._lock:
                self._tabs[tab] = session
        session.page = self.exports.save(session.race, session.race.title or session.race.prompt,
                                          replacing=session.page, page=True)
        session.page_race = session.race
        session.page_times.append(now)
        return SavedPage(session.page)
