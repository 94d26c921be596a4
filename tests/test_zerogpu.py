"""The race on a ZeroGPU Space. There `spaces.GPU` runs the race in another process: its arguments and every
value it yields cross by pickling, and the reservation is sized before it starts. A stand-in `spaces` module
does the same round trips here, so whatever would not survive them fails these tests."""
from __future__ import annotations

import pickle
import sys
import types

import pytest

from app import EXAMPLES_DIR
from explorer.examples import ExampleShelf
from explorer.models import ModelConfig, Models
from explorer.page import build_page
from explorer.racing import GPU_MAX_S, GPU_MIN_S
from explorer.sessions import Session
from tests.tiny import RACE_SETTINGS, message_of, race_frames, race_stopped_once_started


def round_trip(value):
    return pickle.loads(pickle.dumps(value))


class StandInSpaces(types.ModuleType):
    """`spaces` as ZeroGPU runs it: arguments and yielded values pickled, the duration asked for first."""

    def __init__(self):
        super().__init__("spaces")
        self.reserved: list[float] = []
        self.sent_bytes = 0

    def GPU(self, duration=60):  # noqa: N802 - the real decorator's name
        def decorate(fn):
            def call(*args):
                args = round_trip(args)
                self.reserved.append(duration(*args) if callable(duration) else duration)
                return self._stream(fn(*args))

            return call

        return decorate

    def _stream(self, values):
        try:
            for value in values:
                data = pickle.dumps(value)
                self.sent_bytes += len(data)
                yield pickle.loads(data)
        finally:
            values.close()


@pytest.fixture
def spaces(monkeypatch):
    stand_in = StandInSpaces()
    monkeypatch.setitem(sys.modules, "spaces", stand_in)
    return stand_in


@pytest.fixture
def zero_page(spaces, llama, llama_head):
    models = Models(ModelConfig(model="tiny", head="tiny", dtype="float32"))
    models.install(llama, llama_head)
    return build_page(models, ExampleShelf(EXAMPLES_DIR))


def test_a_race_crosses_to_the_gpu_process_and_back_as_plain_data(zero_page, spaces):
    session = Session()
    frames = race_frames(zero_page, "the cat sat", session)
    traces = session.race.traces
    assert list(traces) == ["plain", "eagle2", "ddd"] and len({t.text for t in traces.values()}) == 1
    assert "×" in frames[-1]["headline"] and frames[-1]["summary"] is not None
    assert spaces.reserved and GPU_MIN_S <= spaces.reserved[0] <= GPU_MAX_S


def test_the_reservation_grows_with_the_work_asked_for(zero_page, spaces):
    for tokens in (8, 512):
        race_frames(zero_page, "the cat sat", Session(), [tokens, *RACE_SETTINGS[1:]])
    short, long = spaces.reserved[-2:]
    assert short < long <= GPU_MAX_S


def test_stop_reaches_the_gpu_process_within_one_step(zero_page):
    session = Session()
    frames, _ = race_stopped_once_started(zero_page, session)
    traces = session.race.traces
    assert {t.stop_reason for t in traces.values()} == {"stopped"} and all(len(t.steps) <= 3 for t in traces.values())
    assert "Stopped" in message_of(frames[-1]) and not session.busy


def test_stop_ends_the_race_here_when_the_gpu_process_cannot_see_it(zero_page, monkeypatch):
    import explorer.racing

    monkeypatch.setattr(explorer.racing, "stop_requested", lambda request: False)  # the stop file stays unseen
    session = Session()
    race_stopped_once_started(zero_page, session)
    traces = session.race.traces
    assert all(t.stop_reason == "stopped" and len(t.steps) <= 3 for t in traces.values())
    assert not zero_page.runner.models.lock.locked()  # the closed race let go of the models


def test_on_zero_gpu_the_models_load_at_start_up_in_one_precision(tiny_llama_dir, spaces):
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"))
    models.pin()
    assert models.loaded and models.precisions() == ["float32"]
