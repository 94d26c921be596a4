"""One browser tab's state, and the store that makes and cleans up after every tab's."""
from __future__ import annotations

import statistics
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from components import Race
from components.exports import ExportStore

from .gputime import Quota
from .models import ModelChoice


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
        self.choice: ModelChoice | None = None  # the model menu's choice for this tab's races (None: the app's own)
        self.gpu_quota: Quota | None = None  # on ZeroGPU, what a refusal said the visitor has left

    @property
    def stop_requested(self) -> bool:
        return Path(self.stop_file).exists()

    def request_stop(self) -> None:
        Path(self.stop_file).touch()

    def clear_stop(self) -> None:
        Path(self.stop_file).unlink(missing_ok=True)


class Sessions:
    """Cleans up after each tab's Session; offers races as files through one ExportStore."""

    def __init__(self, exports: ExportStore | None = None):
        self.exports = exports or ExportStore()

    def close(self, session: Session | None) -> None:
        """The tab closed: its race stops and its files go."""
        if session is None:
            return
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

    def export_page(self, session: Session) -> str | None:
        """The session's race as a page of its own (replacing its previous one)."""
        if session.race is None:
            return None
        session.page = self.exports.save(session.race, session.race.title or session.race.prompt,
                                          replacing=session.page, page=True)
        return session.page


class Turnstile:
    """Races take turns, first come first served (two at once would steal each other's cores and time each
    other); a race waiting for its turn can leave at any moment, so Stop cancels it at once."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._line: list[object] = []
        self._front: dict[int, float] = {}  # a ticket's id: when it reached the front of the line
        self._turns: deque[float] = deque(maxlen=8)  # how long the latest races held their turn (s)

    def join(self) -> object:
        ticket = object()
        with self._changed:
            self._line.append(ticket)
        return ticket

    def ahead(self, ticket: object, wait_s: float = 0.0) -> int:
        """How many races are ahead of `ticket`, after waiting up to `wait_s` for that to change."""
        with self._changed:
            if wait_s and self._line.index(ticket):
                self._changed.wait(wait_s)
            index = self._line.index(ticket)
            if index == 0:
                self._front.setdefault(id(ticket), time.monotonic())
            return index

    def expected_wait_s(self, ahead: int) -> float | None:
        """About how long `ahead` races take, at the median of the latest turns; None before any turn ended."""
        with self._changed:
            return ahead * statistics.median(self._turns) if self._turns else None

    def leave(self, ticket: object) -> None:
        with self._changed:
            if ticket in self._line:
                self._line.remove(ticket)
            started = self._front.pop(id(ticket), None)
            if started is not None:
                self._turns.append(time.monotonic() - started)
            self._changed.notify_all()
