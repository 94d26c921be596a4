"""The race on a ZeroGPU Space. There `spaces.GPU` runs the race in another process: its arguments and every
value it yields cross by pickling, and the reservation is sized before it starts. A stand-in `spaces` module
does the same round trips here, so whatever would not survive them fails these tests. The models load at
start-up there, the pairs that fit the GPU's memory, and the model menu offers exactly those; tiny local models
stand in for the hub's pairs."""
from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import pytest
from transformers import LlamaConfig

import explorer.choosing
import explorer.models
from app import EXAMPLES_DIR
from ddd.catalog import ModelPair, model_config, needed_bytes
from explorer.choosing import OTHER, menu_items
from explorer.examples import ExampleShelf
from explorer.models import ModelChoice, ModelConfig, Models
from explorer.page import build_page
from explorer.presets import GPU_PRESET
from explorer.racing import GPU_MAX_S, GPU_MIN_S
from explorer.sessions import Session
from tests.tiny import RACE_SETTINGS, message_of, race_frames, race_stopped_once_started

# A budget the tiny models fit many times over and a 7B model does not.
TINY_BUDGET = 10**8


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
    assert not menu_items(models).shown  # one pair: nothing to choose between


def seven_b_dir(parent: Path) -> Path:
    """A 7B model's config alone: the memory estimate reads nothing else, so nothing more is needed to refuse it."""
    LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32).save_pretrained(parent / "seven-b")
    return parent / "seven-b"


def left_out(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("Not offering")]


def test_pinning_keeps_the_pairs_that_fit_and_says_which_were_left_out_and_why(tiny_llama_dir, tiny_qwen_dir,
                                                                                tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(explorer.models, "ZERO_GPU_BYTES", TINY_BUDGET)
    (tmp_path / "no-head").mkdir()
    fits = ModelChoice(str(tiny_qwen_dir), "random")
    too_big = ModelChoice(str(seven_b_dir(tmp_path)), "random")
    bad_head = ModelChoice(str(tiny_qwen_dir), str(tmp_path / "no-head"))
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"), max_loaded=1)
    models.pin([too_big, bad_head, fits])
    assert models.pinned_choice(ModelChoice(str(tiny_llama_dir), "random")) and models.pinned_choice(fits)
    assert not models.pinned_choice(too_big) and not models.pinned_choice(bad_head)
    assert models.max_loaded == 2 and models.precisions() == ["float32"]
    log = left_out(capsys.readouterr().out)
    assert len(log) == 2
    assert log[0].startswith(f"Not offering {too_big.model} + random: it needs about 33.7 GB in float32")
    assert log[1].startswith(f"Not offering {bad_head.model} + {bad_head.head}: No draft head at")


def test_a_pair_must_fit_beside_the_pairs_pinned_before_it(tiny_llama_dir, tiny_qwen_dir, monkeypatch, capsys):
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"))
    models.pin()
    pinned = models.loaded_bytes()
    qwen = ModelChoice(str(tiny_qwen_dir), "random")
    needed = needed_bytes(model_config(qwen.model), "float32")
    monkeypatch.setattr(explorer.models, "ZERO_GPU_BYTES", pinned + needed - 1)
    models.pin([qwen])
    assert not models.pinned_choice(qwen) and "it needs about" in left_out(capsys.readouterr().out)[0]
    monkeypatch.setattr(explorer.models, "ZERO_GPU_BYTES", pinned + needed)
    models.pin([qwen])
    assert models.pinned_choice(qwen) and not left_out(capsys.readouterr().out)


@pytest.fixture
def pinned_page(spaces, tiny_llama_dir, tiny_qwen_dir, tmp_path, monkeypatch):
    """The app as a ZeroGPU Space starts it, on a menu of three pairs: its own and a paper's pair load, a 7B
    pair does not fit."""
    pairs = [ModelPair("tiny llama (the default)", str(tiny_llama_dir), "random"),
             ModelPair("tiny qwen (as a papers pair)", str(tiny_qwen_dir), "random", gpu_only=True),
             ModelPair("a 7B pair (too big)", str(seven_b_dir(tmp_path)), "random", gpu_only=True)]
    monkeypatch.setattr(explorer.choosing, "PAIRS", pairs)
    monkeypatch.setattr(explorer.models, "ZERO_GPU_BYTES", TINY_BUDGET)
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"))
    models.pin([ModelChoice(p.model, p.head) for p in pairs if p.gpu_only])
    return build_page(models, ExampleShelf(EXAMPLES_DIR)), pairs


def test_the_zero_gpu_menu_offers_exactly_the_pinned_pairs(pinned_page):
    page, pairs = pinned_page
    items = menu_items(page.runner.models)
    assert items.labels == [pairs[0].label, pairs[1].label] and items.chosen == pairs[0].label and items.shown
    assert not items.typed and not page.ui["model_id"].visible and not page.ui["head_id"].visible  # nothing loads later


def test_a_visitor_races_the_pinned_pair_they_chose_and_nobody_else_does(pinned_page, monkeypatch):
    page, pairs = pinned_page
    # The race refuses a choice naming a path on the server; the papers' pairs are hub ids, these stand-ins paths.
    monkeypatch.setattr(ModelChoice, "check", lambda choice: None)
    models, a, b = page.runner.models, Session(), Session()
    loaded = models.loaded_bytes()
    out = page.ui.named(page.menu.choose(pairs[1].label, "", "", a))
    assert "is loaded, in float32, for your races only" in message_of(out) and out["preset"] == GPU_PRESET
    assert a.choice == ModelChoice(pairs[1].model, pairs[1].head) and b.choice is None
    short = [8, *RACE_SETTINGS[1:]]
    race_frames(page, "the cat sat", a, short)
    race_frames(page, "the cat sat", b, short)
    ran = [{t.model for t in s.race.traces.values()} for s in (a, b)]
    assert len(ran[0]) == len(ran[1]) == 1 and ran[0] != ran[1]
    assert models.loaded_bytes() == loaded  # nothing loaded or unloaded


@pytest.mark.parametrize("choose", [2, OTHER, "no such pair"])
def test_a_pair_the_space_did_not_load_is_refused_naming_what_it_offers(pinned_page, choose):
    page, pairs = pinned_page
    models, session = page.runner.models, Session()
    loaded = models.loaded_bytes()
    label = pairs[choose].label if isinstance(choose, int) else choose
    out = page.ui.named(page.menu.choose(label, "tiny-org/tiny-llama", "random", session))
    assert f"offers only those: {pairs[0].label}; {pairs[1].label}." in message_of(out)
    assert session.choice is None and models.loaded_bytes() == loaded
