"""The race on a ZeroGPU Space, through the stand-in `spaces` of tests/zerogpu_standin: each race runs in a forked
process, its arguments and every value it yields pickled, and ZeroGPU's rules hold: the duration a call asks for
must fit what is left of the visitor's daily quota, the time it uses is deducted, and a call that outlives its
duration is ended. The models load at start-up there, the pairs that fit the GPU's memory, and the model menu offers
exactly those; tiny local models stand in for the hub's pairs."""
from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import LlamaConfig

import app
import explorer.choosing
import explorer.models
import explorer.page
import explorer.racing
from app import EXAMPLES_DIR
from ddd.bench.projection import ZEROGPU, banded, project
from ddd.catalog import PAIRS, ModelPair, model_config, needed_bytes
from ddd.trace import RunTrace, Step
from explorer.choosing import OTHER, menu_items
from explorer.deploy import space_race
from explorer.examples import ExampleShelf
from explorer.gputime import (DURATION_FACTOR, SPACE_RACES, VISITOR_QUOTA_S, GpuTime, ask_for, counted, races_a_day,
                              shows_effect)
from explorer.models import ModelChoice, ModelConfig, Models
from explorer.page import build_page
from explorer.presets import GPU_PRESET, MEASURED, PRESET_FIELDS
from explorer.racing import time_start_up
from explorer.sessions import Session
from tests.tiny import RACE_SETTINGS, message_of, race_frames, race_stopped_once_started

# A budget the tiny models fit many times over and a 7B model does not.
TINY_BUDGET = 10**8
METHODS = ("plain", "eagle2", "ddd")


@pytest.fixture
def spaces(monkeypatch):
    """The stand-in, fresh: a 120-second quota, every call made for one visitor."""
    stand_in = importlib.import_module("tests.zerogpu_standin.spaces")
    monkeypatch.setitem(sys.modules, "spaces", stand_in)
    monkeypatch.setattr(stand_in, "ledger", stand_in.Ledger(VISITOR_QUOTA_S))
    monkeypatch.setattr(stand_in, "calls", [])
    monkeypatch.setattr(stand_in, "current_visitor", lambda: "visitor")
    return stand_in


@pytest.fixture
def zero_page(spaces, llama, llama_head):
    models = Models(ModelConfig(model="tiny", head="tiny", dtype="float32"))
    models.install(llama, llama_head)
    return build_page(models, ExampleShelf(EXAMPLES_DIR))


def with_tokens(tokens: int) -> list:
    return [tokens, *RACE_SETTINGS[1:]]


def test_a_race_crosses_to_the_gpu_process_and_back_as_plain_data(zero_page, spaces):
    session = Session()
    frames = race_frames(zero_page, "the cat sat", session)
    traces = session.race.traces
    assert list(traces) == ["plain", "eagle2", "ddd"] and len({t.text for t in traces.values()}) == 1
    assert "×" in frames[-1]["headline"] and frames[-1]["summary"] is not None
    assert [c.outcome for c in spaces.calls] == ["done"]
    assert spaces.ledger.used("visitor") == spaces.calls[0].used * spaces.DURATION_FACTOR  # as ZeroGPU counts it


@pytest.mark.slow
def test_the_time_a_race_asks_for_grows_with_the_work_asked_for(zero_page, spaces):
    race_frames(zero_page, "the cat sat", Session())  # the first race times this pair
    for tokens in (8, 200):
        race_frames(zero_page, "the cat sat", Session(), with_tokens(tokens))
    short, long = (c.asked for c in spaces.calls[-2:])
    assert short < long


def test_a_race_asks_for_what_the_same_race_took_times_the_margin(zero_page, spaces):
    """What ZeroGPU schedules (the duration asked for x the duration factor) is MARGIN x the time predicted from the
    races before, plus SLACK_S: for the same race again, what that race used (its per-token pace carried one token
    further, the prefill's token)."""
    for _ in range(2):
        race_frames(zero_page, "one two three", Session())
    first, second = spaces.calls
    assert first.outcome == second.outcome == "done"
    assert second.scheduled == round(second.asked * spaces.DURATION_FACTOR) == counted(second.asked)
    # The page times the call from a little before the GPU process starts to a little after it ends: a second.
    assert first.used <= second.scheduled <= counted(ask_for(first.used * (1 + 1 / (RACE_SETTINGS[0] - 1)) + 1))


def gpu_race(seconds_per_token: dict[str, float], tokens: int = 128, tokens_per_step: dict[str, int] | None = None,
             prefill_s: float = 0.05) -> dict[str, RunTrace]:
    """A default race's runs as ZeroGPU timed them: a prefill, then steps of `tokens_per_step` tokens each."""
    traces = {}
    for method, rate in seconds_per_token.items():
        per_step = (tokens_per_step or {}).get(method, 1)
        steps = [Step(0, [1], "a", 0, verify_ms=prefill_s * 1000, prefill=True)]
        steps += [Step(i, [1] * per_step, "a" * per_step, per_step - 1, verify_ms=rate * per_step * 1000)
                  for i in range(1, (tokens - 1) // per_step + 1)]
        traces[method] = RunTrace(method, {}, {}, "m", None, "p", 5, steps=steps)
    return traces


def charged_races(spaces, gpu: GpuTime, key, tokens: int, seconds: float) -> int:
    """Races of `tokens` new tokens, each using `seconds`, that the stand-in lets a visitor who is not logged in start
    in a day: each asks for what `gpu` sizes, scheduled and charged as the stand-in counts ZeroGPU's time (x its
    duration factor)."""
    ledger, races = spaces.Ledger(VISITOR_QUOTA_S), 0
    while round(gpu.ask(key, METHODS, tokens) * spaces.DURATION_FACTOR) <= ledger.left("visitor")[0]:
        ledger.charge("visitor", seconds * spaces.DURATION_FACTOR)
        races += 1
    return races


def test_ten_default_races_fit_a_visitors_quota_at_the_gpus_pace(spaces):
    """At the pace ZeroGPU showed for the default pair (a default race used about 7 s: plain 20 ms a token, the
    speculative columns about 3 tokens a 30 ms step), a visitor who is not logged in races at least ten default
    races before the first refusal, counted as ZeroGPU counts them, and a 512-token race fits a full quota."""
    gpu, key = GpuTime(), ("model", "head", "float16")
    race = gpu_race({"plain": 0.02, "eagle2": 0.01, "ddd": 0.01}, tokens_per_step={"eagle2": 3, "ddd": 3})
    used = sum(s.ms for t in race.values() for s in t.steps) / 1000 + 2.0  # and 2 s to start the GPU process
    gpu.record(key, race, used)
    assert charged_races(spaces, gpu, key, 128, used) >= 10
    assert counted(gpu.ask(key, METHODS, 512)) <= VISITOR_QUOTA_S


def test_the_space_opens_on_vicuna_the_first_pair_whose_projection_shows_the_papers_effect():
    """The default small pair is bound by launching its operations on ZeroGPU's GPU: speculation gains little there.
    Vicuna-7B with its EAGLE head, the DDD paper's own setting and not gated, shows the papers' effect."""
    race = space_race()
    assert race.projection.pair is PAIRS[1] and not race.projection.pair.gated and shows_effect(race.projection)
    assert not shows_effect(project(PAIRS[0], ZEROGPU))


def test_at_the_projected_time_a_visitor_who_is_not_logged_in_races_eight_default_races_a_day(spaces):
    """The Space's default race (its pair and new tokens, its GPU time projected until the Space times one), asked for
    and charged as the stand-in counts ZeroGPU's time: at least SPACE_RACES of them before the first refusal."""
    race, key = space_race(), ("lmsys/vicuna-7b-v1.3", "yuhuili/EAGLE-Vicuna-7B-v1.3", "float16")
    gpu = GpuTime({key: race.pace})
    races = charged_races(spaces, gpu, key, race.tokens, race.seconds)
    assert races >= SPACE_RACES == 8 and races == races_a_day(race.pace, METHODS, race.tokens)
    assert not gpu.pace(key).timed and race.tokens >= 64  # a race long enough to show the effect


def test_the_page_names_the_default_races_time_as_zerogpu_counts_it():
    race = space_race()
    words = race.words()
    assert race.projection.pair.label in words and f"A race of {race.tokens} new tokens" in words
    assert (f"projected at {banded(race.seconds, ' s')} of GPU time; it asks ZeroGPU for {race.asked} s, "
            f"{counted(race.asked)} s as ZeroGPU counts it (the time requested x 1.5") in words
    assert race.asked == ask_for(race.seconds) and counted(race.asked) == round(race.asked * DURATION_FACTOR)
    assert f"EAGLE-2 at {banded(race.projection.speedup('eagle2'))}" in words
    assert f"{races_a_day(race.pace, METHODS, race.tokens)} such races" in words


def test_a_zero_gpu_space_opens_on_the_pair_it_picked_and_offers_the_others_beside_it(spaces, tiny_llama_dir,
                                                                                      tiny_qwen_dir, monkeypatch):
    """Tiny local models stand in for the pair the projection picks and for the small pair."""
    picked = ModelPair("tiny llama (as the picked pair)", str(tiny_llama_dir), "random", gpu_only=True)
    small = ModelPair("tiny qwen (as the small pair)", str(tiny_qwen_dir), "random")
    monkeypatch.setattr(app, "PAIRS", [small, picked])
    monkeypatch.setattr(explorer.choosing, "PAIRS", [small, picked])
    monkeypatch.setattr(app, "space_race", lambda: SimpleNamespace(projection=SimpleNamespace(pair=picked)))
    monkeypatch.setattr(ModelChoice, "check", lambda choice: None)  # a path stands in for a hub id
    models, others = app.zero_gpu_models(ModelConfig(dtype="float32"))
    assert others == [ModelChoice(small.model, small.head)] and models.pinned_choice(others[0])
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    assert menu_items(models).chosen == picked.label
    session = Session()
    race_frames(page, "the cat sat", session, with_tokens(8))
    assert {t.model for t in session.race.traces.values()} == {picked.model}


def test_a_visitors_race_replaces_the_start_ups_timing_and_the_slowest_visitors_race_counts():
    gpu, key = GpuTime(), ("model", "head", "float16")
    gpu.record(key, gpu_race({m: 0.05 for m in METHODS}), 30.0, start_up=True)
    at_start_up = gpu.ask(key, METHODS, 128)
    gpu.record(key, gpu_race({m: 0.01 for m in METHODS}), 7.0)
    fast = gpu.ask(key, METHODS, 128)
    gpu.record(key, gpu_race({m: 0.02 for m in METHODS}), 12.0)
    assert fast < at_start_up and fast < gpu.ask(key, METHODS, 128)


def test_a_race_longer_than_a_visitors_whole_day_is_offered_a_shorter_one_before_anything_is_asked(zero_page, spaces):
    runner = zero_page.runner
    runner.gpu.record(runner.models.key(None, "float32"), gpu_race({m: 0.5 for m in METHODS}), 1.0)  # a slow GPU
    frames = race_frames(zero_page, "the cat sat", Session(), with_tokens(200))  # about 450 s asked
    text = message_of(frames[-1])
    assert "so it was not started" in text and "a race of at most" in text and not spaces.calls


def test_a_race_over_the_quota_left_is_refused_in_words_and_the_page_stays_usable(zero_page, spaces, monkeypatch):
    monkeypatch.setattr(spaces, "ledger", spaces.Ledger(2))  # less than any race asks for
    session = Session()
    frames = race_frames(zero_page, "the cat sat", session)
    text = message_of(frames[-1])
    assert "ZeroGPU refused this race" in text and "2 s left today" in text and "Log in to Hugging Face" in text
    assert "as ZeroGPU counts it (the time requested x 1.5" in text
    assert "no race of these methods fits" in text and "refills in" in text
    assert session.race is None and not session.busy and spaces.calls[-1].outcome == "refused"
    # What the refusal said is kept: the next Run is answered before any GPU time is asked for.
    frames = race_frames(zero_page, "the cat sat", session)
    assert "so it was not started" in message_of(frames[-1]) and len(spaces.calls) == 1


def test_a_race_that_outlives_its_reservation_shows_what_it_decoded_as_a_stopped_race(zero_page, spaces,
                                                                                       monkeypatch):
    real = explorer.racing.stop_requested

    def slow_gpu(request):  # every turn takes at least 50 ms: the race cannot finish in its 2 s
        time.sleep(0.05)
        return real(request)

    monkeypatch.setattr(explorer.racing, "stop_requested", slow_gpu)
    monkeypatch.setattr(zero_page.runner.gpu, "ask", lambda *_: 2)
    session = Session()
    frames = race_frames(zero_page, "one two three", session, with_tokens(200))
    assert spaces.calls[-1].outcome == "aborted"
    assert "ran out of the GPU time it reserved" in message_of(frames[-1])
    traces = session.race.traces
    assert traces and all(t.stop_reason for t in traces.values()) and any(t.text for t in traces.values())
    assert not session.busy and not session.fresh


@pytest.mark.slow
def test_start_up_times_the_pairs_and_measures_them_charged_to_no_visitor(zero_page, spaces, monkeypatch):
    runner = zero_page.runner
    monkeypatch.setattr(spaces, "current_visitor", lambda: None)  # no request: the Space's start-up
    time_start_up(runner.models, runner.race, runner.measure, runner.gpu, [None])
    monkeypatch.setattr(spaces, "current_visitor", lambda: "visitor")
    assert runner.gpu.pace(runner.models.key(None, "float32")).timed and spaces.ledger.used("visitor") == 0
    calls = len(spaces.calls)
    values = runner.apply_preset(MEASURED, "float32", Session())
    assert len(values) == len(PRESET_FIELDS) and len(spaces.calls) == calls  # it costs the visitor nothing


def test_stop_reaches_the_gpu_process_within_one_step(zero_page):
    session = Session()
    frames, _ = race_stopped_once_started(zero_page, session)
    traces = session.race.traces
    assert {t.stop_reason for t in traces.values()} == {"stopped"} and all(len(t.steps) <= 3 for t in traces.values())
    assert "Stopped" in message_of(frames[-1]) and not session.busy


def test_stop_ends_the_race_here_when_the_gpu_process_cannot_see_it(zero_page, monkeypatch):
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


def test_the_zero_gpu_page_says_why_it_races_its_pair_and_starts_at_its_default_races_tokens(spaces, llama,
                                                                                            llama_head, monkeypatch):
    """The tiny pair stands in for the pair the projection picked: the page's intro says why that pair and what its
    race costs as ZeroGPU counts it, and max new tokens starts at the default race's."""
    race = space_race()
    monkeypatch.setattr(explorer.page, "space_races", lambda models: {models.key(None): race})
    models = Models(ModelConfig(model="tiny", head="tiny", dtype="float32"))
    models.install(llama, llama_head)
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    intro = next(block.value for block in page.demo.blocks.values() if getattr(block, "elem_id", None) == "intro")
    assert race.words() in intro and page.ui["max_new_tokens"].value == race.tokens
    assert page.runner.gpu.pace(models.key(None)) == race.pace  # asked from the projection until timed
