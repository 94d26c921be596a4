"""No input can hurt the app: crafted run files, settings, prompts and seeds each get a clear message.

The bad inputs (tests/bad_inputs.py) are checked three ways: against the loader and the input checks
directly (fast, no server), through gradio_client against the running app on the tiny model (no bare
"Error", no hang, and a normal race still runs afterwards), and in headless Chromium (tests/test_browser.py),
where script payloads must show as text and never become elements.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import time
from pathlib import Path

import pytest

from components import RaceFileError
from components.exports import ExportStore
from components.inputs import InputError, race_inputs, replay_speed, step_index
from components.jsonfile import FileLimits
from components.runfile import load_race
from explorer.layout import RACE_OUTPUTS
from explorer.queueing import Work
from explorer.racing import prompt_tokens
from explorer.sessions import Session
from tests.bad_inputs import FILE_CASES, FILE_IDS, GOOD, INPUT_CASES, PAYLOADS, changed, race_data
from tests.races import hand_race
from tests.tiny import RACE_SETTINGS as SETTINGS
from tests.tiny import TREE_MODE, message_of, race_frames

BARE = "has not enabled verbose error reporting"  # gradio_client's words for an exception with no message
CALL_TIMEOUT_S = 60


@pytest.mark.parametrize("name, content, words", FILE_CASES, ids=FILE_IDS)
def test_crafted_run_file_is_refused_with_its_own_message(tmp_path, name, content, words):
    path = tmp_path / f"{name}.json"
    path.write_bytes(content())
    with pytest.raises(RaceFileError, match=words.replace("(", r"\(")):
        load_race(path)


def test_gzipped_and_plain_files_load_alike_within_size_limits(tmp_path):
    race = hand_race()
    plain, packed = race.save(tmp_path / "race.json"), race.save(tmp_path / "race.json.gz")
    assert packed.read_bytes()[:2] == b"\x1f\x8b" and packed.stat().st_size < plain.stat().st_size
    assert load_race(packed).to_dict() == load_race(plain).to_dict() == race.to_dict()
    small = FileLimits(file_bytes=2**20, json_bytes=4 * 2**20)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (5 * 2**20)))  # 5 KB that decompress to 5 MB
    with pytest.raises(RaceFileError, match="decompresses to more than 4 MB"):
        load_race(bomb, small)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2**20 + 1))
    with pytest.raises(RaceFileError, match="at most 1 MB"):
        load_race(big, small)
    with pytest.raises(RaceFileError, match="not a file"):
        load_race(tmp_path)
    with pytest.raises(RaceFileError, match="No recorded run"):
        load_race(tmp_path / "missing.json")


def test_export_store_keeps_few_recent_gzipped_files(tmp_path):
    store = ExportStore(max_files=3, max_age_s=3600, folder=tmp_path / "exports")
    race = hand_race()
    first = store.save(race, "<script>x</script> über")
    assert Path(first).name.startswith("ddd-race-script-x--script") and first.endswith(".json.gz")
    assert load_race(first).title == race.title
    second = store.save(race, "again", replacing=first)
    assert not Path(first).exists() and Path(second).exists()
    for i in range(5):
        store.save(race, f"race {i}")
    assert len(store.files()) == 3
    old = Path(store.save(race, "old"))
    stale = time.time() - 7200
    os.utime(old, (stale, stale))
    store.save(race, "new")
    assert not old.exists()
    store.remove(str(tmp_path / "elsewhere.json.gz"))  # not its own file: left alone, no error


# ---------------------------------------------------------------------------------------------------
# Settings, prompts, seeds: the checks themselves.
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, words", INPUT_CASES,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(INPUT_CASES)])
def test_bad_setting_is_named(field, value, words):
    with pytest.raises(InputError, match=re.escape(words)):
        race_inputs(**{**GOOD, field: value}, precisions=["float32", "int8"])


def test_good_settings_come_back_typed():
    checked = race_inputs(**{**GOOD, "seed": 2**63 - 1, "check_steps": " 7, 3,,5 ,3", "max_new_tokens": 24.0},
                          precisions=["float32"])
    assert checked.sampling.seed == 2**63 - 1 and checked.tree["check_steps"] == (3, 5, 7)
    assert checked.max_new_tokens == 24 and isinstance(checked.max_new_tokens, int)
    assert race_inputs(**{**GOOD, "check_steps": "ALL"}, precisions=["float32"]).tree["check_steps"] == "all"


def test_prompt_limit_is_in_tokens(llama):
    assert prompt_tokens(llama, "the cat sat", 24, "cpu") > 3
    with pytest.raises(InputError, match="reads at most 256 tokens"):
        prompt_tokens(llama, "🙂" * 300, 24, "cpu")  # few characters, many tokens
    with pytest.raises(InputError, match="context of 256 tokens: shorten the prompt or lower max new tokens"):
        prompt_tokens(llama, "the cat sat " * 10, 240, "cpu")


def test_prompt_token_budget_of_the_device(default_like_target):
    with pytest.raises(InputError, match="reads at most 512 prompt tokens"):
        prompt_tokens(default_like_target, "one two " * 400, 64, "cpu")
    assert prompt_tokens(default_like_target, "one two " * 400, 64, "cuda") > 512


@pytest.fixture(scope="module")
def default_like_target(tmp_path_factory):
    """The tiny model with a long context, so that the device budget (not the context) is what limits."""
    from tests.tiny import load_tiny, save_tiny_model

    return load_tiny(save_tiny_model(tmp_path_factory.mktemp("long-context"), max_positions=4096))


@pytest.mark.parametrize("value, expected", [("2×", 2.0), ("0.5×", 0.5), (4, 4.0), (None, 1.0)])
def test_replay_speed(value, expected):
    assert replay_speed(value) == expected


@pytest.mark.parametrize("value", ["0×", "-1", "fast", "nan", "1e9"])
def test_bad_replay_speed(value):
    with pytest.raises(InputError, match="replay speed"):
        replay_speed(value)


@pytest.mark.parametrize("value, expected", [(None, 0), (float("nan"), 0), (float("inf"), 0), (-3, 0), (2.7, 2),
                                             (99, 5), ("x", 0)])
def test_step_index_stays_in_range(value, expected):
    assert step_index(value, 5) == expected


# ---------------------------------------------------------------------------------------------------
# The app's callbacks: Stop at every stage, one-step races, escaped messages.
# ---------------------------------------------------------------------------------------------------

def test_stop_while_queued_cancels_the_race(page):
    session = Session()
    page.runner.mark_queued(session)
    assert page.runner.request_stop(session).startswith("Stopped: the race waiting")
    frames = race_frames(page, "the cat sat", session)
    assert len(frames) == 1 and "nothing ran" in message_of(frames[0]) and session.race is None
    assert not session.queued and not session.stop_requested and not session.busy


def test_stop_while_waiting_for_another_race_ends_it_at_once(page):
    runner, session = page.runner, Session()
    ahead = runner.line.join(Work("another pair", 8, 3))  # another visitor's race has the turn
    try:
        frames = runner.run_race("the cat sat", *SETTINGS, True, TREE_MODE, session)
        first = page.ui.named(next(frames))
        assert "1 race ahead of this one" in message_of(first) and session.waiting
        assert runner.request_stop(session).startswith("Stopped: the race waiting")
        started = time.monotonic()
        rest = [page.ui.named(f) for f in frames]
        assert "nothing ran" in message_of(rest[-1]) and time.monotonic() - started < 2
        assert session.race is None and not session.busy and not session.waiting and not session.stop_requested
    finally:
        runner.line.leave(ahead, finished=False)
    assert race_frames(page, "the cat sat", session)[-1]["summary"] is not None  # and its next Run races


def test_stop_while_loading_runs_nothing_and_keeps_the_shown_race(page, monkeypatch):
    session, models = Session(race=hand_race()), page.runner.models
    acquire = models.acquire

    def slow_load(choice=None, precision=None):
        page.runner.request_stop(session)  # pressed while the model loads
        return acquire(choice, precision)

    monkeypatch.setattr(models, "acquire", slow_load)
    frames = race_frames(page, "the cat sat", session)
    assert "Stopped while the model was loading" in message_of(frames[-1])
    assert session.race.title == "hand race" and not session.busy


def test_stop_before_the_first_token_keeps_the_shown_race(page, monkeypatch):
    session = Session(race=hand_race())

    class StopWhileWaiting:
        """The model lock, taken just as Stop is pressed: no method has produced a token yet."""

        def __enter__(self):
            page.runner.request_stop(session)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(page.runner.models, "lock", StopWhileWaiting())
    frames = race_frames(page, "the cat sat", session)
    assert "Stopped before any method produced a token" in message_of(frames[-1])
    assert session.race.title == "hand race" and not session.busy


def test_a_one_step_race_gets_a_working_slider(tmp_path, page):
    data = race_data()
    for trace in data["traces"].values():
        trace["steps"], trace["summary"] = trace["steps"][:1], {}
        trace["text"] = trace["steps"][0]["text"]
    path = tmp_path / "one-step.json"
    path.write_text(json.dumps(data))
    out = page.ui.named(page.viewer.load_file(str(path), True, TREE_MODE, Session()))
    assert out["slider"]["maximum"] > out["slider"]["minimum"] and not out["slider"]["interactive"]
    assert message_of(out) == ""


def test_error_messages_are_escaped(tmp_path, page):
    path = tmp_path / "evil.json"
    path.write_bytes(changed({"format": PAYLOADS[0]}))
    text = message_of(page.ui.named(page.viewer.load_file(str(path), True, TREE_MODE, Session())))
    assert "<img" not in text and "&lt;img src=x onerror=" in text


# ---------------------------------------------------------------------------------------------------
# Over HTTP: every bad input through gradio_client, then a normal race.
# ---------------------------------------------------------------------------------------------------

def run_case(client, api_name: str, *args) -> tuple[str, str]:
    """("message", text) when the app answered with its own message, ("error", text) when the call raised."""
    try:
        job = client.submit(*args, api_name=api_name)
        result = job.result(timeout=CALL_TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"{api_name}{args!r:.80} hung for {CALL_TIMEOUT_S} s")
    except Exception as err:  # noqa: BLE001 - gradio_client raises AppError and friends; its text is the point
        return "error", str(err)
    if api_name in ("/run", "/load_file"):
        out = dict(zip(RACE_OUTPUTS, result))
        return "message", str(out["message"].get("value", "") if isinstance(out["message"], dict) else out["message"])
    return "message", str(result)


def api_cases(tmp_path: Path) -> list[tuple[str, str, tuple]]:
    """(case id, api name, arguments): every crafted file as an upload, every bad setting as a run."""
    from gradio_client import handle_file

    cases = []
    for name, content, _ in FILE_CASES:
        path = tmp_path / f"{name}.json"
        path.write_bytes(content())
        cases.append((f"file-{name}", "/load_file", (handle_file(str(path)), True, TREE_MODE)))
    order = list(GOOD)
    for i, (field, value, _) in enumerate(INPUT_CASES):
        if field == "prompt" and isinstance(value, int):
            continue  # Gradio's textbox turns it into the text "42": a valid prompt over HTTP
        if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
            value = str(value)  # NaN and infinities travel as text: JSON has no literal for them
        args = [GOOD[k] if k != field else value for k in order]
        cases.append((f"run-{field}-{i}", "/run", (*args, True, TREE_MODE)))
    long_prompt = ("the cat sat " * 200, "shorten the prompt")
    emoji = ("🙂" * 300, "shorten the prompt")
    for i, (prompt, _) in enumerate((long_prompt, emoji)):
        cases.append((f"run-tokens-{i}", "/run", (prompt, *SETTINGS, True, TREE_MODE)))
    for value in (-5, 10**9, "x"):
        cases.append((f"step-{value}", "/show_step", (value, True, TREE_MODE)))
    for value in ("0×", "fast", None):
        cases.append((f"replay-{value}", "/replay", (True, value)))
    for value in ("no such example", PAYLOADS[0], None):
        cases.append((f"example-{value}", "/open_example", (value, True, TREE_MODE)))
    cases.append(("stop-idle", "/stop", ()))
    return cases


@pytest.mark.slow
def test_over_a_hundred_bad_inputs_over_http_then_a_normal_race(app_server, tmp_path):
    from gradio_client import Client

    client = Client(app_server.url, verbose=False)
    cases = api_cases(tmp_path)
    assert len(cases) >= 100
    bare, silent = [], []
    for case, api_name, args in cases:
        kind, text = run_case(client, api_name, *args)
        if BARE in text or text.strip() in ("Error", "None"):
            bare.append((case, text[:200]))
        elif api_name in ("/run", "/load_file") and kind == "message" and not text:
            silent.append(case)
    assert not bare, f"{len(bare)} bare errors: {bare[:10]}"
    assert not silent, f"no message for {silent}"
    final = dict(zip(RACE_OUTPUTS, client.predict("the cat sat", *SETTINGS, True, TREE_MODE, api_name="/run")))
    assert [row[0] for row in final["summary"]["data"]] == ["Plain", "EAGLE-2", "DDD"]
    assert final["download"]["value"].endswith(".json.gz")


def test_gradio_drops_its_old_file_copies(page):
    from components.exports import CACHE_CLEANUP

    demo = page.demo
    assert demo.delete_cache == CACHE_CLEANUP and CACHE_CLEANUP[1] <= 3600


def test_a_file_name_with_a_lone_surrogate_gets_a_message(tmp_path):
    """What an upload over raw HTTP may name a file ("\\ud800.json"): no system can open it, and the message says so
    in text that any page and log can carry."""
    with pytest.raises(RaceFileError) as caught:
        load_race(tmp_path / "\ud800.json")
    message = str(caught.value)
    assert "lone surrogate" in message and "Rename the file" in message
    message.encode("utf-8")  # no surrogate of its own
