"""The app's callbacks on the tiny model, and the whole app over HTTP through gradio_client."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import app
from components import Race, load_race
from components.replay import duration, frame_times
from components.inputs import MAX_PROMPT_CHARS
from ddd import save_head
from ddd.settings import method_settings
from explorer.examples import EXAMPLE_RUNS, ExampleShelf
from explorer.layout import RACE_OUTPUTS
from explorer.models import ModelConfig, Models
from explorer.page import build_page
from explorer.presets import MEASURED, race_entries
from explorer.running import REPLAY_FPS
from explorer.sessions import Session
from tests.conftest import free_port
from tests.tiny import RACE_SETTINGS as SETTINGS
from tests.tiny import TREE_MODE, message_of, race_frames, race_stopped_once_started


def page_for(config: ModelConfig):
    return build_page(Models(config), ExampleShelf(app.EXAMPLES_DIR))


def test_run_streams_each_column_then_builds_every_view(page):
    page.runner.stream_every_s = 0.0  # a frame per turn, however fast the machine
    session = Session()
    frames = race_frames(page, "the cat sat", session)
    assert len(frames) > 3
    final = frames[-1]
    race = session.race
    assert isinstance(race, Race) and race.methods == ["plain", "eagle2", "ddd"]
    # The three took turns: their columns streamed together, not one after another.
    assert any(all('class="step' in str(f[f"ans_{m}"]) and "running" in str(f[f"cnt_{m}"])
                   for m in ("plain", "eagle2", "ddd")) for f in frames[:-1])
    for method in ("plain", "eagle2", "ddd"):
        assert 'class="step' in final[f"ans_{method}"]
        assert "tokens/s" in final[f"cnt_{method}"]
    assert race.traces["plain"].text == race.traces["ddd"].text == race.traces["eagle2"].text  # greedy: lossless
    assert list(final["summary"]["method"]) == ["Plain", "EAGLE-2", "DDD"]
    assert final["slider"]["maximum"] == race.decode_steps() - 1
    assert final["tree_ddd"].data and final["depth"].data and final["timeline"].data
    assert "×" in final["headline"] and "ms per token" in final["headline"]
    assert load_race(final["download"]["value"]).methods == race.methods  # the saved file loads back
    assert not session.busy and not session.stop_requested


def test_bad_input_gives_a_message_not_a_crash(page):
    session = Session()
    for prompt, settings, words in [
        ("", SETTINGS, "empty"),
        ("x" * (MAX_PROMPT_CHARS + 1), SETTINGS, "characters"),
        ("the cat", SETTINGS[:10] + [0.5] + SETTINGS[11:], "threshold"),
        ("the cat", SETTINGS[:9] + ["3,99"] + SETTINGS[10:], "check after calls"),
        ("the cat", SETTINGS[:7] + [1] + SETTINGS[8:], "total tokens"),
        ("the cat " * 200, SETTINGS, "shorten the prompt"),
    ]:
        frames = race_frames(page, prompt, session, settings)
        assert frames and words in message_of(frames[-1]), (words, message_of(frames[-1]))
        assert session.race is None and not session.busy
    assert race_frames(page, "the cat sat", session)[-1]["summary"] is not None  # and the next run works


def test_stop_ends_the_run_promptly_and_the_next_run_works(page):
    session = Session()
    frames, answers = race_stopped_once_started(page, session)
    assert len(answers) == 1 and answers[0].startswith("Stopping")
    race = session.race
    assert race is not None and race.methods == ["plain", "eagle2", "ddd"]
    assert all(t.stop_reason == "stopped" and len(t.steps) < 10 for t in race.traces.values())
    assert "Stopped" in message_of(frames[-1])
    assert page.runner.request_stop(session) == ""  # nothing running now
    race_frames(page, "the cat sat", session)
    assert session.race.methods == ["plain", "eagle2", "ddd"]


def test_step_through_controls(page):
    viewer, session = page.viewer, Session()
    race_frames(page, "the cat sat", session)
    last = session.race.decode_steps() - 1
    assert viewer.move("next", 0, session) == 1 and viewer.move("prev", 0, session) == 0
    assert viewer.move("last", 0, session) == last and viewer.move("next", last, session) == last
    assert viewer.move("first", last, session) == 0
    step = page.ui.named(viewer.show_step(1, True, TREE_MODE, session))
    assert "Step 1" in step["narration"] and 'class="step cur"' in step["txt_ddd"]
    assert step["tree_ddd"].data and step["depth"].layout.shapes
    shaded = page.ui.named(viewer.reshade(True, 1, session))
    plain = page.ui.named(viewer.reshade(False, 1, session))
    assert len(shaded) == 8 and "tok-draft" in shaded["ans_eagle2"] + shaded["txt_ddd"]
    assert "tok-draft" not in "".join(plain.values())
    play = page.ui.named(viewer.toggle_play(False, last, session))
    assert play["playing"] and play["slider"] == 0  # play from the end starts over
    tick = page.ui.named(viewer.tick(True, 0, session))
    assert tick["playing"] and tick["slider"] == 1
    assert not page.ui.named(viewer.tick(True, last, session))["playing"]  # stops at the last step


def test_replay_plays_all_three_at_their_pace(page):
    session = Session()
    race_frames(page, "the cat sat", session)
    frames = [page.ui.named(f) for f in page.runner.replay(True, "4×", session)]
    assert len(frames) >= 2 and all(len(f) == 7 for f in frames[:-1]) and list(frames[-1]) == ["message"]
    first, finished = frames[0], frames[-2]
    assert "replay 0.0 s" in first["cnt_plain"]  # nothing done yet at t = 0
    for method in ("plain", "eagle2", "ddd"):
        assert 'class="step' in finished[f"ans_{method}"] and "finished" in finished[f"cnt_{method}"]
    assert not session.replaying
    # Stop ends a replay too.
    replay = page.runner.replay(True, "0.5×", session)
    next(replay)
    assert page.runner.request_stop(session) == "Replay stopped."
    rest = list(replay)
    assert len(rest) <= 2 and not session.replaying


def test_a_replay_behind_the_clock_drops_frames_and_keeps_the_race_pace(page):
    session = Session()
    race_frames(page, "the cat sat", session)
    stretch = 2.0 / duration(session.race)  # as if the race had taken 2 s: 16 frames to show
    for trace in session.race.traces.values():
        for step in trace.steps:
            step.draft_ms, step.verify_ms, step.other_ms = (t * stretch for t in (step.draft_ms, step.verify_ms,
                                                                                  step.other_ms))
    played, start = [], time.perf_counter()
    for frame in page.runner.replay(True, "1×", session):  # a busy server: each frame takes three frames' time
        played.append(page.ui.named(frame))
        time.sleep(3 / REPLAY_FPS)
    shown = len(frame_times(session.race, fps=REPLAY_FPS))
    assert len(played) - 1 < shown / 2  # the last frame is the message's
    assert time.perf_counter() - start < duration(session.race) + 1.5
    assert all("finished" in played[-2][f"cnt_{m}"] for m in ("plain", "eagle2", "ddd"))


def test_the_queue_looks_for_work_every_20_ms_not_every_millisecond(page):
    """Gradio's queue reads the attribute the page sets (a renamed one would leave its millisecond poll)."""
    import inspect

    from gradio.queueing import Queue

    from explorer.queueing import QUEUE_POLL_S

    assert page.demo._queue.sleep_when_free == QUEUE_POLL_S == 0.02
    assert "await asyncio.sleep(self.sleep_when_free)" in inspect.getsource(Queue.start_processing)


def test_a_launched_page_lets_a_race_back_into_the_interpreter_within_a_fifth_of_a_millisecond():
    """Python's default switch interval (5 ms a wait for every torch operation a race's thread gives the interpreter
    up for) made races beside a visitor's page work many times slower; the launched app sets its own."""
    import sys

    from explorer.queueing import SWITCH_INTERVAL_S

    page, before = page_for(ModelConfig(model="no-such-model")), sys.getswitchinterval()
    try:
        page.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port())
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S) and SWITCH_INTERVAL_S == 0.0002
    finally:
        page.demo.close()
        sys.setswitchinterval(before)


def test_examples_load_without_a_model():
    page = page_for(ModelConfig(model="no-such-model"))
    files = page.viewer.shelf.files()
    assert sorted(path.stem for path in files.values()) == sorted(example.stem for example in EXAMPLE_RUNS)
    session = Session()
    for name in files:
        out = page.ui.named(page.viewer.load_example(name, True, TREE_MODE, session))
        assert sorted(out) == sorted(RACE_OUTPUTS)  # every view is drawn
        assert session.race is not None and session.race.methods
        assert out["tree_ddd"].data and out["timeline"].data
        assert "× plain" in out["headline"] and "ms per token" in out["headline"]
    assert not page.runner.models.loaded


def test_loading_a_broken_or_foreign_file_says_why(tmp_path, page):
    session, load = Session(), page.viewer.load_file
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not a readable JSON" in message_of(page.ui.named(load(str(broken), True, TREE_MODE, session)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "ddd-explorer-race", "version": 99, "traces": {}}))
    assert "version 99" in message_of(page.ui.named(load(str(other), True, TREE_MODE, session)))
    assert session.race is None


def test_head_fallback_note(tmp_path, monkeypatch):
    import ddd.catalog

    monkeypatch.setattr(ddd.catalog, "SHIPPED_HEAD", tmp_path / "missing")
    assert "random" in Models(ModelConfig()).describe()


def test_model_and_head_from_args_or_environment(monkeypatch):
    monkeypatch.setenv("DDD_MODEL", "/models/a")
    monkeypatch.setenv("DDD_HEAD", "random")
    args = app.parse_args([])
    assert (args.model, args.head) == ("/models/a", "random")
    args = app.parse_args(["--model", "/models/b", "--head", "/heads/b", "--port", "9999"])
    assert (args.model, args.head, args.port) == ("/models/b", "/heads/b", 9999)
    assert ModelConfig.from_env().model == "/models/a"


def test_without_the_spaces_package_the_race_runs_in_this_process():
    from explorer.racing import on_device

    def fn():
        return 1

    try:
        import spaces  # noqa: F401
    except ImportError:
        assert on_device(fn, 60) is fn


@pytest.mark.slow
def test_full_race_over_http(app_server):
    from gradio_client import Client

    client = Client(app_server.url, verbose=False)
    job = client.submit("the cat sat", *SETTINGS, True, TREE_MODE, api_name="/run")
    frames = [dict(zip(RACE_OUTPUTS, values)) for values in job]
    final = dict(zip(RACE_OUTPUTS, job.outputs()[-1]))
    for method in ("plain", "eagle2", "ddd"):
        streamed = [f[f"ans_{method}"] for f in frames if 'class="step' in str(f[f"ans_{method}"])]
        assert streamed, f"{method} never streamed"
        assert 'class="step' in final[f"ans_{method}"]
    table = final["summary"]
    assert [row[0] for row in table["data"]] == ["Plain", "EAGLE-2", "DDD"]
    assert table["headers"][4] == "speedup vs plain"
    empty = dict(zip(RACE_OUTPUTS, client.predict("", *SETTINGS, True, TREE_MODE, api_name="/run")))
    assert "empty" in str(empty["message"])


@pytest.mark.slow
def test_measured_preset_times_the_machine_once_and_fills_valid_settings(page):
    models = page.runner.models
    values = page.runner.apply_preset(MEASURED, "float32")
    entries = race_entries(page.ui.named(values))
    for method in ("eagle2", "ddd"):
        method_settings(method, **entries[method].settings).validate(models.head.draft_vocab_size)
    assert entries["ddd"].settings["total_tokens"] == entries["eagle2"].settings["total_tokens"]
    assert entries["ddd"].settings["check_steps"] == "all"
    assert list(models.measured) == [models.key(None, "float32")]  # per model pair and precision
    assert page.runner.apply_preset(MEASURED, "float32") == values  # reused, not measured again


def test_a_race_in_another_precision_reloads_the_model_in_it(tiny_llama_dir):
    page = page_for(ModelConfig(model=str(tiny_llama_dir), head="random"))
    models, session = page.runner.models, Session()
    for precision in ("float32", "int8"):
        race_frames(page, "the cat sat", session, SETTINGS[:4] + [precision] + SETTINGS[5:])
        assert models.target.precision == precision
        assert {t.precision for t in session.race.traces.values()} == {precision}
        assert len({t.text for t in session.race.traces.values()}) == 1  # greedy: lossless in each precision


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_broken_head_file_gives_its_message(tiny_llama_dir, llama, tmp_path, kind):
    from tests.tiny import write_broken_head

    bad = write_broken_head(tmp_path / "head", llama, kind)
    page = page_for(ModelConfig(model=str(tiny_llama_dir), head=str(bad)))
    session = Session()
    frames = race_frames(page, "the cat sat", session)
    assert "Could not load the model" in message_of(frames[-1]) and "missing" in message_of(frames[-1])
    assert session.race is None and not session.busy


@pytest.mark.slow
def test_a_random_eagle3_head_for_the_default_model_races_losslessly(tmp_path):
    from ddd import load_target, new_eagle3_head

    head_dir = save_head(new_eagle3_head(load_target()), tmp_path / "head")
    page, session = page_for(ModelConfig(head=str(head_dir))), Session()
    race_frames(page, "What is the capital of France?", session, [10, *SETTINGS[1:5], 4, 3, 12, 4, "all", -0.3,
                                                                     *SETTINGS[11:]])
    traces = session.race.traces
    assert traces["plain"].text == traces["eagle2"].text == traces["ddd"].text
    assert traces["eagle2"].head_kind == traces["ddd"].head_kind == "eagle3"


def test_closing_a_tab_stops_its_race_and_removes_its_files_and_page(page, tmp_path):
    from components.exports import ExportStore
    from explorer.sessions import Sessions

    sessions = Sessions(ExportStore(folder=tmp_path))
    session = Session()
    race_frames(page, "the cat sat", session)
    saved, shared = sessions.export(session), sessions.export_page(session).path
    assert saved and shared.endswith(".html") and (tmp_path / saved.split("/")[-1]).exists()
    assert session.race.title in Path(shared).read_text(encoding="utf-8")  # the race's own page
    session.busy = True  # as if a race were still decoding
    sessions.close(session)
    assert session.stop_requested and not [p.name for p in tmp_path.iterdir()]
    session.busy = False
    sessions.close(session)  # once idle, its stop file goes too
    assert not session.stop_requested


def test_the_recorder_writes_every_example_with_the_app_race_loop(llama, llama_head, tmp_path, capsys):
    from explorer.examples import record_examples

    models = Models(ModelConfig(dtype="float32"))
    models.install(llama, llama_head)
    paths = record_examples(models, tmp_path, max_new_tokens=12, attempts=1)
    assert [p.stem for p in paths] == [e.stem for e in EXAMPLE_RUNS]
    for path, example in zip(paths, EXAMPLE_RUNS):
        race = load_race(path)
        assert race.title == example.title and sorted(race.methods) == sorted(example.methods)
        assert len({t.text for t in race.traces.values()}) == 1  # greedy: every column writes plain's text
    assert race.traces["ddd"].settings["threshold"] == -0.3 and "DDD shallower than EAGLE-2" in capsys.readouterr().out
    counting = load_race(tmp_path / "counting.json")
    assert counting.traces["ddd"].settings["threshold"] == -2.0  # an example's own change to the preset


def test_the_hub_copy_of_the_default_model_names_the_weights_its_head_was_trained_on():
    from types import SimpleNamespace

    from ddd.models import DEFAULT_HUB_ID

    models = Models(ModelConfig())
    models.install(SimpleNamespace(name=DEFAULT_HUB_ID, precision="float32"), None)
    text = models.describe()
    assert "shipped head" in text and "Q4_1" in text and "random" not in text
