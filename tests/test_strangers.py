"""Strangers sharing one Space: STRANGERS visitors arriving over WINDOW_S on the tiny model, each racing and doing
one thing more: pressing Stop on their race, loading a recorded race or a crafted one, saving the race as a page,
or reading the lesson first. Nobody meets an error or an exception; every crafted file is refused in the page's
words; whoever waits is shown their place, which only ever comes nearer (first come, first served); the server's
disk (its page store inside Gradio's cache) and memory stay bounded.

The test command runs 40 strangers over 60 s (104 s beside another worker's tests, 63 s alone); each costs the
server about 2 s of CPU on the tiny model, most of it Gradio's own, so `DDD_STRANGERS=100` (over the same minute) takes
about four minutes. `DDD_STRANGERS_WINDOW_S` spreads them, and `DDD_STRANGERS_MODEL=default` serves the app's own
default model (int8) instead (docs/app.md, "Strangers"). A Run the full line refuses ("The queue is full") is counted
and printed: it is the line's answer to more strangers than it holds, not an error.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from explorer.layout import RACE_OUTPUTS
from tests.conftest import ROOT, AppServer
from tests.test_disk import disk_bytes
from tests.test_file_checks import freezing_files
from tests.test_visitors import resident_bytes
from tests.tiny import RACE_SETTINGS, TREE_MODE
from tests.zerogpu_standin.spaces import cpu_seconds

pytestmark = pytest.mark.slow
STRANGERS = int(os.environ.get("DDD_STRANGERS", "40"))
WINDOW_S = float(os.environ.get("DDD_STRANGERS_WINDOW_S", "60"))
DEFAULT_MODEL = os.environ.get("DDD_STRANGERS_MODEL") == "default"
TOKENS = 8
CHORES = ("stop", "example file", "crafted file", "save", "lesson")
DISK_BOUND = 60 * 2**20  # what the soak may add to the page store and Gradio's cache together
MEMORY_BOUND = 600e6  # what it may add to the server's resident memory
# Whoever waits is shown their place within this long after Run (another worker's tests run beside this one).
FIRST_LINE_S = 5.0
POLL_S = 0.25  # how often a stranger looks at their race: a hundred looking more often take a core from the server


@dataclass
class Stranger:
    number: int
    chore: str
    asked_at: float = 0.0  # when Run went out
    started_at: float | None = None  # when the race streamed its first step
    places: list[int] = field(default_factory=list)  # each place in the line they were shown (races ahead)
    first_line_s: float | None = None
    stopped: bool = False
    turned_away: bool = False  # the line was full
    errors: list[str] = field(default_factory=list)


def text_of(value) -> str:
    return str(value.get("value", "") if isinstance(value, dict) else value)


def crafted_files(folder: Path) -> list[Path]:
    """Race files that would make a view lie or freeze a tab (tests/test_file_checks.py), and one that is not JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, data in freezing_files().items():
        files.append(folder / f"{name}.json")
        files[-1].write_text(json.dumps(data))
    files.append(folder / "truncated.json")
    files[-1].write_text('{"format": "ddd-explorer-race", "traces": {"plain": {"steps": [')
    return files


def visit(url: str, stranger: Stranger, arrive_at: float, files: dict[str, list[Path]]) -> None:
    from gradio_client import Client, handle_file

    time.sleep(max(arrive_at - time.monotonic(), 0))
    try:
        client = Client(url, verbose=False)
        if stranger.chore == "lesson":
            client.predict("3", api_name="/lesson_chapter")
            answer = str(client.predict(3, 0, api_name="/lesson_answer"))
            if "Right." not in answer and "Not quite" not in answer:
                stranger.errors.append(f"lesson: {answer[:200]}")
        settings = [TOKENS, *RACE_SETTINGS[1:4], "int8" if DEFAULT_MODEL else RACE_SETTINGS[4], *RACE_SETTINGS[5:]]
        stranger.asked_at = time.monotonic()
        job = client.submit(f"stranger {stranger.number}: the cat sat", *settings, True, TREE_MODE, api_name="/run")
        seen = 0
        while not job.done():
            outputs = job.outputs()
            for values in outputs[seen:]:
                said = text_of(dict(zip(RACE_OUTPUTS, values))["message"])
                ahead = re.search(r"(\d+) races? ahead", said)
                if ahead:
                    if not stranger.places:
                        stranger.first_line_s = time.monotonic() - stranger.asked_at
                    stranger.places.append(int(ahead.group(1)))
                elif stranger.started_at is None and "Waiting" not in said:
                    stranger.started_at = time.monotonic()
            seen = len(outputs)
            if stranger.chore == "stop" and not stranger.stopped and outputs:
                stranger.stopped = True
                said = text_of(client.predict(api_name="/stop"))
                if "error-box" in said:
                    stranger.errors.append(f"stop: {said[:200]}")
            time.sleep(POLL_S)
        final = dict(zip(RACE_OUTPUTS, job.result()))
        message = text_of(final["message"])
        stranger.turned_away = "The queue is full" in message
        if stranger.turned_away:
            return
        if "error-box" in message or (not stranger.stopped and not final["summary"]):
            stranger.errors.append(f"race: {message[:200] or 'did not finish'}")
        if stranger.chore in ("example file", "crafted file"):
            pick = files[stranger.chore][stranger.number % len(files[stranger.chore])]
            loaded = text_of(dict(zip(RACE_OUTPUTS, client.predict(handle_file(str(pick)), True, TREE_MODE,
                                                                   api_name="/load_file")))["message"])
            refused = "error-box" in loaded
            if refused != (stranger.chore == "crafted file"):
                stranger.errors.append(f"{pick.name}: {loaded[:200]!r}")
        if stranger.chore == "save":
            page, note = client.predict(api_name="/save_page")
            if not (isinstance(page, dict) and page.get("value")) and not text_of(note).strip():
                stranger.errors.append("save: neither a page nor a sentence")
    except Exception as err:  # noqa: BLE001 - whatever a stranger meets is counted, not raised
        stranger.errors.append(f"{type(err).__name__}: {err}"[:300])


@pytest.fixture(scope="module")
def server(tiny_llama_dir, llama_head, tmp_path_factory):
    from ddd import save_head

    work = tmp_path_factory.mktemp("strangers")
    cache = work / "gradio"
    env = {"GRADIO_TEMP_DIR": str(cache)}
    pair = (None, None) if DEFAULT_MODEL else (tiny_llama_dir, save_head(llama_head, work / "head"))
    app = AppServer(*pair, work / "app.log", env=env).wait(600)
    app.cache, app.work = cache, work
    yield app
    app.close()


def test_strangers_share_the_space_without_an_error_in_order_and_within_bounds(server):
    files = {"example file": sorted((ROOT / "assets" / "examples").glob("*.json")),
             "crafted file": crafted_files(server.work / "crafted")}
    strangers = [Stranger(n, CHORES[n % len(CHORES)]) for n in range(STRANGERS)]
    disk, memory = disk_bytes(server.cache), resident_bytes(server.proc.pid)
    cpu = (time.process_time(), cpu_seconds(server.proc.pid))
    peak_disk, peak_memory = 0, 0
    start = time.monotonic()
    threads = [threading.Thread(target=visit, args=(server.url, s, start + WINDOW_S * n / max(STRANGERS - 1, 1),
                                                    files)) for n, s in enumerate(strangers)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads) and time.monotonic() < start + WINDOW_S + 600:
        peak_disk = max(peak_disk, disk_bytes(server.cache) - disk)
        peak_memory = max(peak_memory, resident_bytes(server.proc.pid) - memory)
        time.sleep(1.0)
    for thread in threads:
        thread.join(timeout=60)
    waiting = [s for s in strangers if s.places]
    told = [s.first_line_s for s in waiting]
    print(f"\nstrangers: {STRANGERS} over {WINDOW_S:.0f} s, done in {time.monotonic() - start:.0f} s; "
          f"{len(waiting)} waited, first told their place after p50 {statistics.median(told or [0]):.2f} s, "
          f"at most {max(told or [0]):.2f} s; disk grew at most {peak_disk / 2**20:.1f} MB, memory "
          f"{peak_memory / 1e6:.0f} MB; turned away by the full line {sum(s.turned_away for s in strangers)}; "
          f"errors {sum(len(s.errors) for s in strangers)}; CPU: the strangers "
          f"{time.process_time() - cpu[0]:.0f} s, the server {cpu_seconds(server.proc.pid) - cpu[1]:.0f} s")
    assert [(s.number, s.chore, s.errors) for s in strangers if s.errors] == []
    # Whoever waited was told their place at once; whoever was kept from their race that long had waited.
    assert [(s.number, s.first_line_s) for s in waiting if s.first_line_s > FIRST_LINE_S] == []
    assert [s.number for s in strangers if s.started_at and not s.places
            and s.started_at - s.asked_at > FIRST_LINE_S] == []
    # First come, first served: nobody who came later was put ahead, so a place in the line only ever comes nearer.
    assert [(s.number, s.places) for s in waiting if s.places != sorted(s.places, reverse=True)] == []
    assert peak_disk <= DISK_BOUND and peak_memory <= MEMORY_BOUND, (peak_disk, peak_memory)
