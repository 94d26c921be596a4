"""The one line races wait in: first come first served, at most `capacity` long, and able to tell each waiting
visitor their place and about how long they will wait from the moment they join (docs/app.md, "The queue")."""
from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

QUEUE_SIZE = 64  # races running or waiting at most; past it Run says the queue is full
# How often Gradio's queue looks for an event to start while it has none it can start. Its own default on Linux is
# every millisecond: about a tenth of a core, idle or with every slot busy, taken from the races on a 2-core Space.
QUEUE_POLL_S = 0.02
# How long a thread running Python may keep the interpreter from one that waits for it (sys.setswitchinterval). A
# race's thread gives the interpreter up for every torch operation and waits to get it back: beside a thread running
# Python without rest, a 64-token race on the default model took 240x its time alone at Python's default of 5 ms, and
# 4-5x at 0.2 ms (docs/app.md, "The queue").
SWITCH_INTERVAL_S = 0.0002
RECENT = 16  # the latest races the estimates come from
SAME_LENGTH = 3  # races of a pair and length it takes to estimate from them alone
# The race with the turn has run longer than its estimate: at least this share of the estimate is still counted.
OVERRUN_SHARE = 0.1
# Of its work the race with the turn has done before its pace foretells its whole time (its prefill goes first).
PACE_SHARE = 0.05


class QueueFull(Exception):
    """The line is full: the message says so and when to try again."""


@dataclass(frozen=True)
class Work:
    """What a race asks for: the pair (Models.key: model, head, precision), its new tokens and how many runs."""

    key: Hashable
    tokens: int
    runs: int


@dataclass(eq=False)  # each ticket is itself: two races of the same work are two places in the line
class Ticket:
    work: Work
    front_at: float | None = None  # when it got the turn
    done: float = 0.0  # the share of its work done (RaceLine.progress)


class RaceLine:
    """Races take turns (two at once would steal each other's cores and time each other). A race waiting for its
    turn can leave at any moment, so Stop cancels it at once. Estimates come from the latest finished races: those of
    the same pair and length when there are a few, else the pair's (or any pair's) seconds per token and run."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._changed = threading.Condition()
        self._line: list[Ticket] = []
        self._done: deque[tuple[Work, float]] = deque(maxlen=RECENT)

    def join(self, work: Work) -> Ticket:
        with self._changed:
            if len(self._line) >= self.capacity:
                left = self._left_s(1)  # the rest of the race that has the turn
                when = f" (about {left:.0f} s)" if left is not None else ""
                raise QueueFull(f"The queue is full: {self.capacity} races are running or waiting, as many as this "
                                f"app takes. Try again when one has finished{when}.")
            ticket = Ticket(work, time.monotonic() if not self._line else None)
            self._line.append(ticket)
            return ticket

    def ahead(self, ticket: Ticket, wait_s: float = 0.0) -> int:
        """How many races are ahead of `ticket`, after waiting up to `wait_s` for that to change."""
        with self._changed:
            if wait_s and self._line.index(ticket):
                self._changed.wait(wait_s)
            return self._line.index(ticket)

    def waiting(self) -> int:
        """Races in the line without the turn."""
        with self._changed:
            return max(len(self._line) - 1, 0)

    def wait_s(self, ticket: Ticket) -> float | None:
        """About how long until `ticket` gets the turn; None before any race has been timed."""
        with self._changed:
            return self._left_s(self._line.index(ticket))

    def progress(self, ticket: Ticket, share: float) -> None:
        """How much of its work the race with the turn has done, from 0 to 1."""
        with self._changed:
            ticket.done = share

    def record(self, work: Work, seconds: float) -> None:
        """A race that ran to its end (a start-up race included) and how long it held the turn."""
        with self._changed:
            self._done.append((work, seconds))

    def leave(self, ticket: Ticket, finished: bool) -> float | None:
        """`ticket` leaves the line; when it held the turn and `finished` its race, its time joins the estimates (a
        stopped race's would make them too short). Returns how long it held the turn (None: it never had it)."""
        with self._changed:
            if ticket not in self._line:
                return None
            held = None
            if self._line.index(ticket) == 0:
                held = time.monotonic() - ticket.front_at if ticket.front_at is not None else None
                if finished and held is not None:
                    self._done.append((ticket.work, held))
                if len(self._line) > 1:
                    self._line[1].front_at = time.monotonic()
            self._line.remove(ticket)
            self._changed.notify_all()
            return held

    def estimate_s(self, work: Work) -> float | None:
        with self._changed:
            return self._estimate(work)

    def _estimate(self, work: Work) -> float | None:
        pair = [(w, s) for w, s in self._done if w.key == work.key]
        # Means, not medians: a wait adds up the races ahead, and a race that runs to its last token where most end
        # early (five times as long, on the default model) counts in that sum as often as it comes.
        same = [s for w, s in pair if (w.tokens, w.runs) == (work.tokens, work.runs)]
        if len(same) >= SAME_LENGTH:
            return statistics.fmean(same)
        # Until then a race of the same work that has the turn says more than shorter races scaled up: a class's
        # first waits come while its first race runs (shorter races' pace was half a long one's on the default model).
        paced = self._paced_s()
        if paced is not None and self._line[0].work == work:
            return statistics.fmean([*same, paced])
        known = pair or list(self._done)
        if not known:
            return None
        return statistics.fmean(s / (w.tokens * w.runs) for w, s in known) * work.tokens * work.runs

    def _left_s(self, index: int) -> float | None:
        """The time left in the first `index` races of the line: the rest of the turn's race, then the others."""
        if index == 0:
            return 0.0
        estimates = [self._estimate(t.work) for t in self._line[:index]]
        if None in estimates:
            return None
        front, paced = self._line[0], self._paced_s()
        ran = time.monotonic() - front.front_at if front.front_at is not None else 0.0
        whole = paced if paced is not None else estimates[0]
        estimates[0] = max(whole - ran, OVERRUN_SHARE * whole)
        return sum(estimates)

    def _paced_s(self) -> float | None:
        """The whole time of the race with the turn at its pace so far; None before PACE_SHARE of it is done."""
        front = self._line[0] if self._line else None
        if front is None or front.front_at is None or front.done < PACE_SHARE:
            return None
        return (time.monotonic() - front.front_at) / front.done
