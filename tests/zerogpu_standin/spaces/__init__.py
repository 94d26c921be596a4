"""A stand-in for ZeroGPU's `spaces` package, the only ZeroGPU the project can test on. As ZeroGPU does (hub-docs,
spaces-zerogpu; the `spaces` package 0.51.3), `GPU(duration=...)` runs the function in a forked process, its arguments
and every value it returns or yields pickled; the duration asked for is scheduled times the GPU's duration factor
(zero/client.py get_duration_seconds: 1.5 on the RTX PRO 6000 at the default size, zero/configs.json); a call is
refused when that exceeds what is left of the visitor's daily quota ("You have exceeded your ZeroGPU quota (Xs
requested vs. Ys left)", X the scheduled seconds); the time a call uses is deducted, counted times the factor too;
a call that outlives its scheduled time is ended ("GPU task aborted"). Both raise gr.Error, in the caller's
process, as ZeroGPU does. The time a call uses is its process's CPU time: a GPU is the call's alone, while this
stand-in's process shares the machine's cores with whatever runs beside it (another test's servers), and the time it
waits for a core is no work of its own.

The visitor is the Gradio request's client; a call outside any request (the app's start-up) is charged to nobody.
SPACES_QUOTA_S sets the daily quota (default 120, a visitor who is not logged in), SPACES_DURATION_FACTOR the duration
factor (default 1.5); SPACES_LEDGER names a JSON file
that keeps what each visitor used (so that a test can read it, or start a visitor part-way through their day); while
the file SPACES_SLOW_FILE names exists, the GPU process works the seconds it holds before sending each value (a GPU
slower than the races before showed: how a test makes a call outlive its duration).
Put this folder (tests/zerogpu_standin) on PYTHONPATH to run an exported ZeroGPU Space with it.
"""
from __future__ import annotations

import inspect
import json
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps
from pathlib import Path
from typing import Any

import gradio as gr
import torch

DEFAULT_DURATION_S = 60
DAY_S = 86400
DURATION_FACTOR = float(os.environ.get("SPACES_DURATION_FACTOR", 1.5))
# A call that has not used its time after this many times it in wall time waits on something other than work: ended.
WALL_SLACK = 10


@dataclass
class Call:
    """One GPU call as the stand-in saw it (tests read `calls`)."""

    visitor: str | None
    asked: int  # the duration the function asked for
    scheduled: int  # what ZeroGPU schedules and weighs against the quota: asked x DURATION_FACTOR
    used: float = 0.0
    outcome: str = "running"  # "done", "refused", "aborted", "failed", "closed" (the caller stopped reading)


class Ledger:
    """Each visitor's GPU time used today, in memory or in a JSON file."""

    def __init__(self, quota_s: float, path: str | None = None):
        self.quota_s = quota_s
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._days: dict[str, dict[str, float]] = {}

    def _read(self) -> dict[str, dict[str, float]]:
        if self.path is None:
            return self._days
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _write(self, days: dict[str, dict[str, float]]) -> None:
        if self.path is None:
            self._days = days
        else:
            self.path.write_text(json.dumps(days))

    def _day(self, days: dict[str, dict[str, float]], visitor: str) -> dict[str, float]:
        day = days.get(visitor)
        if day is None or time.time() >= day["since"] + DAY_S:  # a new day: the quota refills
            day = days[visitor] = {"since": time.time(), "used": 0.0}
        return day

    def left(self, visitor: str) -> tuple[int, timedelta]:
        """Whole seconds left today, and the time until the quota refills."""
        with self._lock:
            days = self._read()
            day = self._day(days, visitor)
            self._write(days)
            refill = timedelta(seconds=round(day["since"] + DAY_S - time.time()))
            return max(int(self.quota_s - day["used"]), 0), refill

    def charge(self, visitor: str, seconds: float) -> None:
        with self._lock:
            days = self._read()
            self._day(days, visitor)["used"] += seconds
            self._write(days)

    def used(self, visitor: str) -> float:
        with self._lock:
            return self._day(self._read(), visitor)["used"]


ledger = Ledger(float(os.environ.get("SPACES_QUOTA_S", 120)), os.environ.get("SPACES_LEDGER"))
calls: list[Call] = []


def current_visitor() -> str | None:
    """Who the Gradio request being served comes from (None outside a request: the app's start-up): the
    `x-ip-token` header Hugging Face's proxy gives each visitor's requests where present (the load test sends one
    per student), else the client's address."""
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    headers = getattr(request, "headers", None) or {}
    client = getattr(request, "client", None)
    return headers.get("x-ip-token") or getattr(client, "host", None) or ("visitor" if request is not None else None)


def _slowness() -> float:
    path = os.environ.get("SPACES_SLOW_FILE")
    return float(Path(path).read_text()) if path and Path(path).exists() else 0.0


def _child(conn: Any, task: Callable, payload: bytes, slow_s: float) -> None:
    """The GPU process: run the task, send back each value, then "end" (or the error's message)."""
    try:
        # OpenMP's thread team does not survive a fork: a forked process computing on the CPU with the parent's
        # thread count crawls (PyTorch's own forked workers run one thread too). ZeroGPU's computes on its GPU.
        torch.set_num_threads(1)
        args, kwargs = pickle.loads(payload)
        result = task(*args, **kwargs)
        for value in (result if inspect.isgenerator(result) else [result]):
            busy_until = time.process_time() + slow_s
            while time.process_time() < busy_until:  # work, not sleep: the call's time is its CPU time
                pass
            conn.send(("value", value))
        conn.send(("end", time.process_time()))
    except BaseException as err:  # noqa: BLE001 - sent to the caller, as ZeroGPU does
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used (proc(5): utime and stime, the 14th and 15th fields of /proc/PID/stat);
    0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(task: Callable, duration: Any, args: tuple, kwargs: dict):
    """Schedule one call (refusing it over the quota), fork its process, and stream back what it sends."""
    asked = int(duration(*args, **kwargs) if callable(duration) else (duration or DEFAULT_DURATION_S))
    scheduled = round(asked * DURATION_FACTOR)
    visitor = current_visitor()
    call = Call(visitor, asked, scheduled)
    calls.append(call)
    if visitor is not None:
        left, refill = ledger.left(visitor)
        if scheduled > left:
            call.outcome = "refused"
            print(f"ZeroGPU stand-in: {visitor} asked {scheduled} s, {left} s left: refused", flush=True)
            raise gr.Error(f"You have exceeded your ZeroGPU quota ({scheduled}s requested vs. {left}s left). "
                           f"Try again in {refill}.", title="ZeroGPU quota exceeded", print_exception=False)
    payload = pickle.dumps((args, kwargs))  # what cannot cross to a GPU process fails here, as on ZeroGPU
    receive, send = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.get_context("fork").Process(target=_child, args=(send, task, payload, _slowness()),
                                                         daemon=True)
    start = time.monotonic()
    process.start()
    send.close()
    try:
        while True:
            while not receive.poll(max(scheduled - cpu_seconds(process.pid), 0)):
                if cpu_seconds(process.pid) >= scheduled or time.monotonic() > start + WALL_SLACK * scheduled:
                    call.outcome = "aborted"
                    raise gr.Error("GPU task aborted", title="ZeroGPU worker error", print_exception=False)
            try:
                kind, value = receive.recv()
            except EOFError:
                call.outcome = "failed"
                raise gr.Error("GPU task aborted", title="ZeroGPU worker error", print_exception=False) from None
            if kind == "end":
                call.outcome, call.used = "done", min(value, scheduled)
                return
            if kind == "error":
                call.outcome = "failed"
                raise gr.Error(value, title="ZeroGPU worker error", print_exception=False)
            yield value
    finally:
        if call.outcome == "running":
            call.outcome = "closed"
        if call.outcome != "done":
            call.used = scheduled if call.outcome == "aborted" else min(cpu_seconds(process.pid), scheduled)
        process.kill()
        process.join()
        receive.close()
        if visitor is not None:
            ledger.charge(visitor, call.used * DURATION_FACTOR)
        print(f"ZeroGPU stand-in: {visitor or 'start-up'} asked {asked} s ({scheduled} s scheduled), used "
              f"{call.used:.2f} s: {call.outcome}", flush=True)


def GPU(task: Callable | None = None, *, duration: Any = None, **_: Any) -> Any:  # noqa: N802 - ZeroGPU's name
    """`@GPU`, `@GPU(duration=S)` or `@GPU(duration=callable)`, the callable given the function's arguments."""
    if task is None:
        return lambda fn: GPU(fn, duration=duration)

    if inspect.isgeneratorfunction(task):
        @wraps(task)
        def stream(*args: Any, **kwargs: Any):
            yield from _run(task, duration, args, kwargs)

        return stream

    @wraps(task)
    def call(*args: Any, **kwargs: Any) -> Any:
        values = list(_run(task, duration, args, kwargs))
        return values[0]

    return call

