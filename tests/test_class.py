"""A class at once: students open the lesson, answer its seven questions and press its "Try it live" within a
window, then race, on the exported CPU Space (2 cores here) and the exported ZeroGPU Space (the quota stand-in,
each student their own visitor as Hugging Face's proxy marks them). Every student gets a page and a race, sees
where they stand in the queue while waiting, and nobody gets an error.

The test command runs CLASS_STUDENTS students arriving over CLASS_WINDOW_S; `DDD_CLASS_STUDENTS=30
DDD_CLASS_WINDOW_S=120` runs the full class (`DDD_CLASS_TOKENS`: each race's new tokens, 12 by default;
`DDD_CLASS_MODEL=default`: the CPU Space on its default model; docs/app.md, "A class at once", has the figures).
Each student races the prompt "Try it live" leaves in the box (the example's), as a class following the lesson does:
prompts of their own end at different lengths (on the default model "student 7: the cat sat" runs to 46 tokens where
"student 6: ..." stops at 8), and no estimate can tell a waiting student that the race ahead will run five times as
long (`DDD_CLASS_OWN_PROMPTS=1`: each their own). Each student's time to the first page, wait in the queue, race
time and errors are printed with their p50 and p95, and each student's places, first estimate and wait.
"""
from __future__ import annotations

import os
import re
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.lesson import TITLES
from ddd import new_head, save_head
from explorer.deploy import export_space
from explorer.examples import ExampleShelf
from explorer.presets import CPU_PRESET
from explorer.layout import RACE_OUTPUTS
from tests.conftest import EXAMPLES_DIR, AppServer, free_port
from tests.test_zerogpu_browser import ZeroGpuSpace
from tests.tiny import RACE_SETTINGS, TREE_MODE, load_tiny

pytestmark = pytest.mark.slow
STUDENTS = int(os.environ.get("DDD_CLASS_STUDENTS", "6"))
WINDOW_S = float(os.environ.get("DDD_CLASS_WINDOW_S", "10"))
TOKENS = int(os.environ.get("DDD_CLASS_TOKENS", "12"))  # each student's race: new tokens
# DDD_CLASS_MODEL=default: the CPU Space races its own default model (int8), as the hosted one does.
DEFAULT_MODEL = os.environ.get("DDD_CLASS_MODEL") == "default"
TOLD_CLASS = 10  # students who waited, at least, for the estimates' 80% to be checked
# A waiting student's first line comes within a second (0.4 s at most in a class of 30 on a 2-core machine, alone:
# DDD_CLASS_FIRST_LINE_S=1); the test command runs another worker's tests beside the class on machines of any speed,
# so it allows five.
FIRST_LINE_S = float(os.environ.get("DDD_CLASS_FIRST_LINE_S", "5"))
OWN_PROMPTS = os.environ.get("DDD_CLASS_OWN_PROMPTS") == "1"
EXAMPLE = "Maths: step by step, five decoders"
TRY_IT = "?example=maths&threshold=-1"


class CpuSpace(AppServer):
    """`python app.py` inside an exported cpu folder, as the Space starts it."""

    def __init__(self, folder: Path, model_dir: Path, head_dir: Path, work: Path):
        import subprocess
        import sys

        self.port = free_port()
        self.url, self.log = f"http://127.0.0.1:{self.port}/", work / "space.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        pair = [] if DEFAULT_MODEL else ["--model", str(model_dir), "--head", str(head_dir), "--dtype", "float32"]
        self.proc = subprocess.Popen(
            [sys.executable, "app.py", *pair, "--preset", CPU_PRESET, "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=folder, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)


@dataclass
class Student:
    number: int
    page_s: float = 0.0
    wait_s: float = 0.0
    race_s: float = 0.0
    ranks: list[int] = field(default_factory=list)  # the places in the queue the student was shown
    waits: list[tuple[float, bool]] = field(default_factory=list)  # each "races ahead" line: when, and with a time?
    first_line_s: float | None = None  # from Run to the first "races ahead" line
    first_estimate_s: float | None = None  # the wait that line foretold
    done_at: float = 0.0
    errors: list[str] = field(default_factory=list)


def attend(url: str, student: Student, arrive_at: float) -> None:
    """One student: the lesson's page, its seven answers, its "Try it live" link, then a race of their own."""
    from gradio_client import Client

    time.sleep(max(arrive_at - time.monotonic(), 0))
    try:
        started = time.monotonic()
        with urllib.request.urlopen(url + "?chapter=1", timeout=120) as reply:
            assert reply.status == 200 and b"DDD Explorer" in reply.read()
        client = Client(url, verbose=False, headers={"x-ip-token": f"student-{student.number}"})
        student.page_s = time.monotonic() - started
        for chapter in range(1, len(TITLES) + 1):
            client.predict(chapter, api_name="/lesson_chapter")
            reply = client.predict(chapter, 0, api_name="/lesson_answer")
            assert "Right." in str(reply) or "Not quite" in str(reply), reply
        with urllib.request.urlopen(url + TRY_IT, timeout=120) as reply:
            assert reply.status == 200
        client.predict(EXAMPLE, True, TREE_MODE, api_name="/open_example")
        settings = [TOKENS, *RACE_SETTINGS[1:4], "int8" if DEFAULT_MODEL else RACE_SETTINGS[4], *RACE_SETTINGS[5:]]
        asked = time.monotonic()
        prompt = f"student {student.number}: the cat sat" if OWN_PROMPTS else example_prompt()
        job = client.submit(prompt, *settings, True, TREE_MODE, api_name="/run")
        seen = 0
        while not job.done():
            status = job.status()  # Gradio's queue: the place, as its status line shows it
            if status.rank is not None and status.rank > 0:
                student.ranks.append(status.rank)
            outputs = job.outputs()
            for values in outputs[seen:]:  # the app's own line: "Waiting for its turn: N races ahead"
                said = str(dict(zip(RACE_OUTPUTS, values))["message"])
                ahead = re.search(r"(\d+) races? ahead", said)
                if ahead:
                    student.ranks.append(int(ahead.group(1)))
                    student.waits.append((time.monotonic(), "s to wait" in said))
                    if student.first_line_s is None:
                        student.first_line_s = time.monotonic() - asked
                        estimate = re.search(r"about ([0-9.,]+) s to wait", said)
                        student.first_estimate_s = float(estimate.group(1).replace(",", "")) if estimate else None
                elif not student.wait_s:
                    student.wait_s = time.monotonic() - asked  # its turn came: the race streams
            seen = len(outputs)
            time.sleep(0.1)
        final = dict(zip(RACE_OUTPUTS, job.result()))
        student.done_at = time.monotonic()
        student.race_s = student.done_at - asked - student.wait_s
        message = str(final["message"].get("value", "") if isinstance(final["message"], dict) else final["message"])
        rows = [row[0] for row in final["summary"]["data"]] if isinstance(final["summary"], dict) else []
        if "error-box" in str(message) or rows != ["Plain", "EAGLE-2", "DDD"]:
            student.errors.append(str(message)[:200] or "the race did not finish")
    except Exception as err:  # noqa: BLE001 - whatever a student meets is counted, not raised
        student.errors.append(f"{type(err).__name__}: {err}"[:300])


def example_prompt() -> str:
    """The prompt of the example "Try it live" opens, which the link puts in the prompt box."""
    shelf = ExampleShelf(EXAMPLES_DIR)
    return shelf.read(shelf.files()[EXAMPLE]).prompt


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):.1f} s, p95 {p95:.1f} s"


def hold_class(url: str, name: str) -> list[Student]:
    students = [Student(n) for n in range(STUDENTS)]
    start = time.monotonic()
    threads = [threading.Thread(target=attend, args=(url, s, start + WINDOW_S * n / max(STUDENTS - 1, 1)))
               for n, s in enumerate(students)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=1800)
    print(f"\n{name}: {STUDENTS} students over {WINDOW_S:.0f} s racing {TOKENS} tokens each, done in "
          f"{time.monotonic() - start:.0f} s; first page {percentiles([s.page_s for s in students])}; "
          f"queue wait {percentiles([s.wait_s for s in students])}; "
          f"race {percentiles([s.race_s for s in students])}; errors {sum(len(s.errors) for s in students)}; "
          f"places shown in the queue: up to {max((max(s.ranks) for s in students if s.ranks), default=0)}; "
          f"waits within 0.5-1.5x of the first estimate: {len(well_told(students))} of {len(waited(students))}")
    for s in students:
        print(f"  student {s.number}: places {s.ranks}, first told after {s.first_line_s or 0:.1f} s to wait "
              f"{s.first_estimate_s} s, waited {s.wait_s:.1f} s, raced {s.race_s:.1f} s")
    return students


def waited(students: list[Student]) -> list[Student]:
    """The students who waited for others' races: shown a place, or kept from their race for over FIRST_LINE_S."""
    return [s for s in students if s.ranks or s.wait_s > FIRST_LINE_S]


def well_told(students: list[Student]) -> list[Student]:
    """The students who waited, whose wait came within 0.5-1.5x of the first estimate they were given."""
    return [s for s in waited(students) if s.first_estimate_s and 0.5 <= s.wait_s / s.first_estimate_s <= 1.5]


def check(students: list[Student]) -> None:
    assert [(s.number, s.errors) for s in students if s.errors] == []
    assert all(s.page_s > 0 and s.race_s > 0 for s in students)
    # Whoever waits is told their place and a wait within FIRST_LINE_S; in a class (at least TOLD_CLASS
    # waited) the wait they were told holds within 0.5-1.5x for at least 80% of them. A few waits alone are too few
    # to judge an estimate by: one race slowed by a neighbour's lesson moves them all.
    late = [(s.number, s.first_line_s, s.first_estimate_s) for s in waited(students)
            if s.first_line_s is None or s.first_line_s > FIRST_LINE_S or s.first_estimate_s is None]
    assert late == []
    if len(waited(students)) >= TOLD_CLASS:
        assert len(well_told(students)) >= 0.8 * len(waited(students)), [
            (s.number, round(s.wait_s, 1), s.first_estimate_s) for s in waited(students)]


@pytest.fixture(scope="module")
def head_dir(tiny_llama_dir, tmp_path_factory):
    return save_head(new_head(load_tiny(tiny_llama_dir)), tmp_path_factory.mktemp("class-head") / "head")


def test_a_class_on_the_cpu_space(tiny_llama_dir, head_dir, tmp_path):
    folder = export_space("cpu", tmp_path / "space")
    space = CpuSpace(folder, tiny_llama_dir, head_dir, tmp_path).wait(300)
    try:
        check(hold_class(space.url, "CPU Space"))
    finally:
        space.close()


def test_a_class_on_the_zerogpu_space(tiny_llama_dir, head_dir, tmp_path):
    folder = export_space("zerogpu", tmp_path / "space")
    space = ZeroGpuSpace(folder, tiny_llama_dir, head_dir, tmp_path).wait(300)
    try:
        check(hold_class(space.url, "ZeroGPU Space"))
        refused = [line for line in space.log.read_text().splitlines() if line.endswith(": refused")]
        assert refused == []
    finally:
        space.close()
