"""The app's event functions on the tiny model, and the whole app over HTTP through gradio_client."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import app
from components import Race
from components.inputs import MAX_PROMPT_CHARS
from ddd import save_head
from ddd.race import race_to_end

ROOT = Path(__file__).resolve().parents[1]
TREE_MODE = next(iter(app.TREE_MODES))
# max_new_tokens, temperature, top_p, seed, precision, EAGLE-2 top_k / draft calls / total tokens,
# DDD max calls / checks / threshold
SETTINGS = [24, 0.0, 1.0, 0, "float32", 4, 4, 20, 8, "3,5,7", -0.3]


@pytest.fixture
def models(llama, llama_head, monkeypatch):
    models = app.Models(app.ModelConfig(model="tiny", head="tiny"))
    models.target, models.head = llama, llama_head
    monkeypatch.setattr(app, "MODELS", models)
    return models


def outputs(values) -> dict:
    assert len(values) == len(app.RACE_OUTPUT_NAMES)
    return dict(zip(app.RACE_OUTPUT_NAMES, values))


def race_run(prompt, session, settings=SETTINGS):
    return [outputs(v) for v in app.run_race(prompt, *settings, True, TREE_MODE, session)]


def message_of(out) -> str:
    value = out["message"]
    return value.get("value", "") if isinstance(value, dict) else str(value)


def test_run_streams_each_column_then_builds_every_view(models, monkeypatch):
    monkeypatch.setattr(app, "STREAM_EVERY_S", 0.0)  # a frame per turn, however fast the machine
    session = app.Session()
    frames = race_run("the cat sat", session)
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
    assert Race.load(final["download"]["value"]).methods == race.methods  # the saved file loads back
    assert not session.busy and session.generation is None


def test_bad_input_gives_a_message_not_a_crash(models):
    session = app.Session()
    for prompt, settings, words in [
        ("", SETTINGS, "empty"),
        ("x" * (MAX_PROMPT_CHARS + 1), SETTINGS, "characters"),
        ("the cat", SETTINGS[:10] + [0.5], "threshold"),
        ("the cat", SETTINGS[:9] + ["3,99", -0.3], "check after calls"),
        ("the cat", SETTINGS[:7] + [1] + SETTINGS[8:], "total tokens"),
        ("the cat " * 200, SETTINGS, "shorten the prompt"),
    ]:
        frames = race_run(prompt, session, settings)
        assert frames and words in message_of(frames[-1]), (words, message_of(frames[-1]))
        assert session.race is None and not session.busy
    assert race_run("the cat sat", session)[-1]["summary"] is not None  # and the next run works


def test_stop_ends_the_run_promptly_and_the_next_run_works(models):
    session = app.Session()
    run = app.run_race("one two three", 200, *SETTINGS[1:], True, TREE_MODE, session)
    frames = []
    for values in run:
        frames.append(outputs(values))
        if session.generation is not None and not session.stop_requested:  # the race has started
            assert app.request_stop(session).startswith("Stopping")
    race = session.race
    assert race is not None and race.methods == ["plain", "eagle2", "ddd"]
    assert all(t.stop_reason == "stopped" and len(t.steps) < 10 for t in race.traces.values())
    assert "Stopped" in message_of(frames[-1])
    assert app.request_stop(session) == ""  # nothing running now
    frames = race_run("the cat sat", session)
    assert session.race.methods == ["plain", "eagle2", "ddd"]


def test_step_through_controls(models):
    session = app.Session()
    race_run("the cat sat", session)
    last = session.race.decode_steps() - 1
    assert app.move("next", 0, session) == 1 and app.move("prev", 0, session) == 0
    assert app.move("last", 0, session) == last and app.move("next", last, session) == last
    assert app.move("first", last, session) == 0
    txt_e, txt_d, tree_e, tree_d, narration, depth = app.show_step(1, True, TREE_MODE, session)
    assert "Step 1" in narration and 'class="step cur"' in txt_d and tree_d.data and depth.layout.shapes
    shaded, plain = app.reshade(True, 1, session), app.reshade(False, 1, session)
    assert len(shaded) == 8 and "tok-draft" in shaded[2] + shaded[7] and "tok-draft" not in "".join(plain)
    playing, timer, button, start = app.toggle_play(False, last, session)
    assert playing and start == 0  # play from the end starts over
    playing, timer, button, index = app.tick(True, 0, session)
    assert playing and index == 1
    playing, timer, button, index = app.tick(True, last, session)
    assert not playing  # stops at the last step


def test_replay_plays_all_three_at_their_pace(models):
    session = app.Session()
    race_run("the cat sat", session)
    frames = list(app.replay(True, "4×", session))
    assert len(frames) >= 2 and all(len(f) == 7 for f in frames)
    first, finished = frames[0], frames[-2]
    assert "replay 0.0 s" in first[3]  # nothing done yet at t = 0
    for column, counter in zip(finished[:3], finished[3:6]):
        assert 'class="step' in column and "finished" in counter
    assert not session.replaying
    # Stop ends a replay too.
    replay = app.replay(True, "0.5×", session)
    next(replay)
    assert app.request_stop(session) == "Replay stopped."
    rest = list(replay)
    assert len(rest) <= 2 and not session.replaying


def test_examples_load_without_a_model(monkeypatch):
    models = app.Models(app.ModelConfig(model="no-such-model"))
    monkeypatch.setattr(app, "MODELS", models)
    files = app.example_files()
    assert sorted(path.stem for path in files.values()) == sorted(example.stem for example in app.EXAMPLE_RUNS)
    session = app.Session()
    for name in files:
        out = outputs(app.load_example(name, True, TREE_MODE, session))
        assert session.race is not None and session.race.methods
        assert out["tree_ddd"].data and out["timeline"].data
        assert "× plain" in out["headline"] and "ms per token" in out["headline"]
    assert not models.loaded


def test_loading_a_broken_or_foreign_file_says_why(tmp_path):
    session = app.Session()
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not a readable JSON" in message_of(outputs(app.load_file(str(broken), True, TREE_MODE, session)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "ddd-explorer-race", "version": 99, "traces": {}}))
    assert "version 99" in message_of(outputs(app.load_file(str(other), True, TREE_MODE, session)))
    assert session.race is None


def test_head_fallback_note(tmp_path, monkeypatch):
    import ddd.head

    monkeypatch.setattr(ddd.head, "SHIPPED_HEAD", tmp_path / "missing")
    assert "random" in app.Models(app.ModelConfig()).describe()


def test_model_and_head_from_args_or_environment(monkeypatch):
    monkeypatch.setenv("DDD_MODEL", "/models/a")
    monkeypatch.setenv("DDD_HEAD", "random")
    args = app.parse_args([])
    assert (args.model, args.head) == ("/models/a", "random")
    args = app.parse_args(["--model", "/models/b", "--head", "/heads/b", "--port", "9999"])
    assert (args.model, args.head, args.port) == ("/models/b", "/heads/b", 9999)
    assert app.ModelConfig.from_env().model == "/models/a"


def test_spaces_gpu_is_optional():
    def fn():
        return 1

    wrapped = app.on_gpu(fn)
    assert wrapped() == 1
    if app.spaces is None:
        assert wrapped is fn  # no `spaces` package: a plain call


# ---------------------------------------------------------------------------------------------------
# The app as a server.
# ---------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_fitted_head(head, directory: Path) -> Path:
    return save_head(head, directory)


class AppServer:
    """`python app.py` on the tiny model, on 127.0.0.1 and a free port."""

    def __init__(self, model_dir: Path, head_dir: Path, log: Path, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = log
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), "--model", str(model_dir), "--head", str(head_dir),
             "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 120) -> "AppServer":
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"the app did not start within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tiny_race(target, head, prompt: str = "one two three") -> Race:
    entries = app.race_entries(4, 4, 20, 8, "3,5,7", -0.3)
    return Race(traces=race_to_end(target, head, prompt, entries, max_new_tokens=32), title="tiny example")


@pytest.fixture(scope="module")
def app_server(tiny_llama_dir, llama, llama_head, tmp_path_factory):
    work = tmp_path_factory.mktemp("app")
    head_dir = save_fitted_head(llama_head, work / "head")
    env = {}
    if not app.example_files():  # no shipped examples yet: show one recorded on the tiny model
        tiny_race(llama, llama_head).save(work / "examples" / "tiny.json", compact=True)
        env["DDD_EXAMPLES"] = str(work / "examples")
    server = AppServer(tiny_llama_dir, head_dir, work / "app.log", env).wait()
    yield server
    server.close()


def test_full_race_over_http(app_server):
    from gradio_client import Client

    client = Client(app_server.url, verbose=False)
    job = client.submit("the cat sat", *SETTINGS, True, TREE_MODE, api_name="/run")
    frames = [dict(zip(app.RACE_OUTPUT_NAMES, values)) for values in job]
    final = dict(zip(app.RACE_OUTPUT_NAMES, job.outputs()[-1]))
    for method in ("plain", "eagle2", "ddd"):
        streamed = [f[f"ans_{method}"] for f in frames if 'class="step' in str(f[f"ans_{method}"])]
        assert streamed, f"{method} never streamed"
        assert 'class="step' in final[f"ans_{method}"]
    table = final["summary"]
    assert [row[0] for row in table["data"]] == ["Plain", "EAGLE-2", "DDD"]
    assert table["headers"][4] == "speedup vs plain"
    empty = dict(zip(app.RACE_OUTPUT_NAMES, client.predict("", *SETTINGS, True, TREE_MODE, api_name="/run")))
    assert "empty" in str(empty["message"])


def test_measured_preset_times_the_machine_once_and_fills_valid_settings(models):
    values = app.apply_preset(app.MEASURED, "float32")
    entries = app.race_entries(*values)
    from ddd.settings import method_settings

    for method in ("eagle2", "ddd"):
        method_settings(method, **entries[method].settings).validate(models.head.draft_vocab_size)
    assert entries["ddd"].settings["total_tokens"] == entries["eagle2"].settings["total_tokens"]
    assert entries["ddd"].settings["check_steps"] == "all"
    assert list(models.measured) == ["float32"]
    assert app.apply_preset(app.MEASURED, "float32") == values  # reused, not measured again


def test_a_race_in_another_precision_reloads_the_model_in_it(tiny_llama_dir, monkeypatch):
    models = app.Models(app.ModelConfig(model=str(tiny_llama_dir), head="random"))
    monkeypatch.setattr(app, "MODELS", models)
    session = app.Session()
    for precision in ("float32", "int8"):
        race_run("the cat sat", session, SETTINGS[:4] + [precision] + SETTINGS[5:])
        assert models.target.precision == precision
        assert {t.precision for t in session.race.traces.values()} == {precision}
        assert len({t.text for t in session.race.traces.values()}) == 1  # greedy: lossless in each precision


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_broken_head_file_gives_its_message(tiny_llama_dir, llama, tmp_path, monkeypatch, kind):
    from tests.tiny import write_broken_head

    bad = write_broken_head(tmp_path / "head", llama, kind)
    monkeypatch.setattr(app, "MODELS", app.Models(app.ModelConfig(model=str(tiny_llama_dir), head=str(bad))))
    session = app.Session()
    frames = race_run("the cat sat", session)
    assert "Could not load the model" in message_of(frames[-1]) and "missing" in message_of(frames[-1])
    assert session.race is None and not session.busy


def test_a_random_eagle3_head_for_the_default_model_races_losslessly(tmp_path, monkeypatch):
    from ddd import load_target, new_eagle3_head

    head_dir = save_head(new_eagle3_head(load_target()), tmp_path / "head")
    monkeypatch.setattr(app, "MODELS", app.Models(app.ModelConfig(head=str(head_dir))))
    session = app.Session()
    race_run("What is the capital of France?", session, [10, *SETTINGS[1:5], 4, 3, 12, 4, "all", -0.3])
    traces = session.race.traces
    assert traces["plain"].text == traces["eagle2"].text == traces["ddd"].text
    assert traces["eagle2"].head_kind == traces["ddd"].head_kind == "eagle3"
