"""No input can hurt the app: crafted run files, settings, prompts and seeds each get a clear message.

The same bad inputs are checked three ways: against the loader and the input checks directly (fast, no
server), through gradio_client against the running app on the tiny model (no bare "Error", no hang, and a
normal race still runs afterwards), and in headless Chromium, where script payloads must show as text and
never become elements.
"""
from __future__ import annotations

import copy
import gzip
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from components import RaceFileError
from components.exports import ExportStore
from components.inputs import InputError, race_inputs, replay_speed, step_index
from components.runfile import FileLimits, load_race
from explorer.layout import RACE_OUTPUTS
from explorer.racing import prompt_tokens
from explorer.sessions import Session
from tests.test_components import hand_race
from tests.tiny import RACE_SETTINGS as SETTINGS
from tests.tiny import TREE_MODE, message_of, race_frames

BARE = "has not enabled verbose error reporting"  # gradio_client's words for an exception with no message
CALL_TIMEOUT_S = 60
PAYLOADS = ['<img src=x onerror="window.__xss=1">', "<script>window.__xss=2</script>",
            '<svg onload="window.__xss=3"></svg>', '<a href="javascript:window.__xss=4">link</a>',
            '<iframe srcdoc="<script>parent.__xss=5</script>"></iframe>']


# ---------------------------------------------------------------------------------------------------
# Crafted run files: each a change to a valid race (hand_race) or raw bytes, and the words of its message.
# ---------------------------------------------------------------------------------------------------

DELETE = object()


def race_data() -> dict[str, Any]:
    return copy.deepcopy(hand_race().to_dict())


def changed(changes: dict[str, Any]) -> bytes:
    """A valid race with `changes` applied: dotted paths ("traces.ddd.steps.1.pool.0.parent") to new values."""
    data = race_data()
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        target = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        key = int(last) if isinstance(target, list) else last
        if value is DELETE:
            del target[key]
        else:
            target[key] = value
    return json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")


def raw_json(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1)


POOL = "traces.ddd.steps.1.pool"
STEP = "traces.ddd.steps.1"
DDD = "traces.ddd"
DEEP = 100_000

FILE_CASES: list[tuple[str, Callable[[], bytes], str]] = [
    # Not a race at all.
    ("empty-file", lambda: b"", "not a readable JSON"),
    ("broken-json", lambda: b"{not json", "not a readable JSON"),
    ("json-array", lambda: b"[1, 2]", "not an object"),
    ("json-string", lambda: b'"race"', "not an object"),
    ("json-null", lambda: b"null", "not an object"),
    ("json-number", lambda: b"42", "not an object"),
    ("png-bytes", lambda: b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "not UTF-8"),
    ("latin-1", lambda: '{"title": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    ("huge-integer", lambda: b'{"format": ' + b"9" * 5000 + b"}", "not a readable JSON"),
    ("deep-nesting", lambda: b'{"title": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested too deeply"),
    ("deep-nesting-gz", lambda: gz(b"[" * DEEP + b"]" * DEEP), "nested too deeply"),
    ("gzip-of-junk", lambda: gz(b"{oops"), "not a readable JSON"),
    ("truncated-gzip", lambda: gz(changed({}))[:200], "cannot be decompressed"),
    ("gzip-magic-only", lambda: b"\x1f\x8b\x08\x00garbage", "cannot be decompressed"),
    # The wrapper.
    ("format-img", lambda: changed({"format": PAYLOADS[0]}), "not a DDD Explorer recorded run"),
    ("format-script", lambda: changed({"format": PAYLOADS[1]}), "not a DDD Explorer recorded run"),
    ("format-svg", lambda: changed({"format": PAYLOADS[2]}), "not a DDD Explorer recorded run"),
    ("format-missing", lambda: changed({"format": DELETE}), "not a DDD Explorer recorded run"),
    ("format-number", lambda: changed({"format": 7}), "not a DDD Explorer recorded run"),
    ("version-2", lambda: changed({"version": 2}), "version 2"),
    ("version-true", lambda: changed({"version": True}), "version True"),
    ("version-string", lambda: changed({"version": "1"}), "version"),
    ("version-script", lambda: changed({"version": PAYLOADS[1]}), "version"),
    ("traces-missing", lambda: changed({"traces": DELETE}), "lacks the field traces"),
    ("traces-empty", lambda: changed({"traces": {}}), "holds no runs"),
    ("traces-list", lambda: changed({"traces": [1]}), "holds no runs"),
    ("unknown-method", lambda: changed({"traces.magic": {}}), "unknown method"),
    ("method-html", lambda: changed({"traces.<b>x</b>": {}}), "unknown method"),
    ("extra-field", lambda: changed({"extra": 1}), "unexpected field"),
    ("title-number", lambda: changed({"title": 5}), "title must be text"),
    ("title-nested", lambda: changed({"title": [[[[["x"]]]]]}), "title must be text"),
    ("title-too-long", lambda: changed({"title": "t" * 3000}), "characters long"),
    ("title-surrogate", lambda: raw_json(json.dumps({**race_data(), "title": "\ud800"})), "lone surrogate"),
    ("note-list", lambda: changed({"note": ["a"]}), "note must be text"),
    # A run.
    ("trace-not-object", lambda: changed({DDD: "ddd"}), "must be an object"),
    ("schema-0", lambda: changed({f"{DDD}.schema_version": 0}), "schema version 0"),
    ("schema-missing", lambda: changed({f"{DDD}.schema_version": DELETE}), "schema version None"),
    ("method-mismatch", lambda: changed({f"{DDD}.method": "eagle2"}), "filed under"),
    ("method-unknown", lambda: changed({f"{DDD}.method": "beam"}), "not one of"),
    ("trace-extra-field", lambda: changed({f"{DDD}.bogus": 1}), "unexpected field"),
    ("trace-missing-prompt", lambda: changed({f"{DDD}.prompt": DELETE}), "lacks the field prompt"),
    ("prompt-number", lambda: changed({f"{DDD}.prompt": 12}), "prompt must be text"),
    ("prompt-too-long", lambda: changed({f"{DDD}.prompt": "p" * 200_001}), "characters long"),
    ("model-object", lambda: changed({f"{DDD}.model": {"a": 1}}), "model must be text"),
    ("head-number", lambda: changed({f"{DDD}.head": 3}), "head must be text"),
    ("device-too-long", lambda: changed({f"{DDD}.device": "d" * 5000}), "characters long"),
    ("precision-unknown", lambda: changed({f"{DDD}.precision": "float8"}), "not one of"),
    ("prompt-tokens-negative", lambda: changed({f"{DDD}.prompt_tokens": -5}), "outside"),
    ("prompt-tokens-text", lambda: changed({f"{DDD}.prompt_tokens": "many"}), "whole number"),
    ("settings-list", lambda: changed({f"{DDD}.settings": [1]}), "must be an object"),
    ("settings-unknown", lambda: changed({f"{DDD}.settings.depth": 3}), "unexpected field"),
    ("top-k-string", lambda: changed({f"{DDD}.settings.top_k": "8"}), "whole number"),
    ("top-k-zero", lambda: changed({f"{DDD}.settings.top_k": 0}), "outside"),
    ("threshold-nan", lambda: raw_json(json.dumps(race_data()).replace('"threshold": -0.3', '"threshold": NaN')),
     "not a finite number"),
    ("threshold-positive", lambda: changed({f"{DDD}.settings.threshold": 0.5}), "impossible"),
    ("check-steps-word", lambda: changed({f"{DDD}.settings.check_steps": "some"}), "must be a list"),
    ("check-steps-too-deep", lambda: changed({f"{DDD}.settings.check_steps": [60]}), "impossible"),
    ("sampling-temperature", lambda: changed({f"{DDD}.sampling.temperature": -1}), "outside"),
    ("sampling-seed-huge", lambda: changed({f"{DDD}.sampling.seed": 2**70}), "outside"),
    ("sampling-seed-text", lambda: changed({f"{DDD}.sampling.seed": "abc"}), "whole number"),
    ("sampling-unknown", lambda: changed({f"{DDD}.sampling.beam": 1}), "unexpected field"),
    ("summary-partial", lambda: changed({f"{DDD}.summary": {"tau": 1.0}}), "lacks the fields"),
    ("summary-text", lambda: changed({f"{DDD}.summary.tau": "fast"}), "must be a number"),
    # Steps.
    ("steps-string", lambda: changed({f"{DDD}.steps": "abc"}), "must be a list, not text"),
    ("steps-null", lambda: changed({f"{DDD}.steps": None}), "must be a list, not null"),
    ("steps-zero", lambda: changed({f"{DDD}.steps": []}), "is empty"),
    ("steps-too-many", lambda: changed({f"{DDD}.steps": [0] * 5000}), "at most 4096"),
    ("step-number", lambda: changed({STEP: 5}), "must be an object"),
    ("step-index", lambda: changed({f"{STEP}.index": 7}), "outside 1..1"),
    ("step-missing-text", lambda: changed({f"{STEP}.text": DELETE}), "lacks the field text"),
    ("step-extra", lambda: changed({f"{STEP}.speed": 1}), "unexpected field"),
    ("token-ids-string", lambda: changed({f"{STEP}.token_ids": "12"}), "must be a list"),
    ("token-id-negative", lambda: changed({f"{STEP}.token_ids.0": -1}), "outside"),
    ("token-id-float", lambda: changed({f"{STEP}.token_ids.0": 1.5}), "whole number"),
    ("token-id-bool", lambda: changed({f"{STEP}.token_ids.0": True}), "true/false"),
    ("step-text-number", lambda: changed({f"{STEP}.text": 3}), "must be text"),
    ("draft-ms-text", lambda: changed({f"{STEP}.draft_ms": "fast"}), "must be a number"),
    ("draft-ms-nan", lambda: raw_json(json.dumps(race_data()).replace('"draft_ms": 30.0', '"draft_ms": NaN', 1)),
     "not a finite number"),
    ("draft-ms-infinity", lambda: raw_json(json.dumps(race_data()).replace('"draft_ms": 30.0', '"draft_ms": Infinity',
                                                                          1)), "not a finite number"),
    ("draft-ms-negative", lambda: changed({f"{STEP}.draft_ms": -1}), "outside"),
    ("draft-ms-huge", lambda: changed({f"{STEP}.draft_ms": 1e300}), "outside"),
    ("prefill-text", lambda: changed({f"{STEP}.prefill": "yes"}), "true or false"),
    ("confidence-positive", lambda: changed({f"{STEP}.confidence": [1.0]}), "outside"),
    ("checks-missing-stop", lambda: changed({f"{STEP}.checks.0.stop": DELETE}), "lacks the field stop"),
    ("checks-call-zero", lambda: changed({f"{STEP}.checks.0.call": 0}), "outside"),
    ("draft-calls-negative", lambda: changed({f"{STEP}.draft_calls": -1}), "outside"),
    ("verified-huge", lambda: changed({f"{STEP}.verified": 10**9}), "outside"),
    ("bonus-id-text", lambda: changed({f"{STEP}.bonus_id": "x"}), "whole number"),
    ("bonus-text-list", lambda: changed({f"{STEP}.bonus_text": ["x"]}), "must be text"),
    # Draft trees.
    ("pool-string", lambda: changed({POOL: "nodes"}), "must be a list"),
    ("pool-too-big", lambda: changed({POOL: [0] * 40_001}), "at most 40000"),
    ("node-missing-field", lambda: changed({f"{POOL}.1.score": DELETE}), "lacks the field score"),
    ("node-own-parent", lambda: changed({f"{POOL}.1.parent": 1}), "is the node itself"),
    ("node-cycle", lambda: changed({f"{POOL}.1.parent": 4, f"{POOL}.4.parent": 1}), "comes later in the pool"),
    ("node-parent-missing", lambda: changed({f"{POOL}.1.parent": 999}), "is not in the pool"),
    ("root-not-first", lambda: changed({f"{POOL}.0.status": "accepted"}), "must be the root"),
    ("root-with-parent", lambda: changed({f"{POOL}.0.parent": 0}), "must be the root"),
    ("second-root", lambda: changed({f"{POOL}.2.status": "root"}), "only the first node"),
    ("duplicate-index", lambda: changed({f"{POOL}.2.index": 1}), "repeats node"),
    ("depth-mismatch", lambda: changed({f"{POOL}.1.depth": 5}), "its parent's is"),
    ("status-unknown", lambda: changed({f"{POOL}.1.status": "<b>maybe</b>"}), "not one of"),
    ("logprob-positive", lambda: changed({f"{POOL}.1.logprob": 5.0}), "outside"),
    ("rank-negative", lambda: changed({f"{POOL}.1.rank": -1}), "outside"),
    ("in-beam-text", lambda: changed({f"{POOL}.1.in_beam": "no"}), "true or false"),
    ("node-text-too-long", lambda: changed({f"{POOL}.1.text": "n" * 3000}), "characters long"),
    ("node-text-surrogate", lambda: raw_json(json.dumps(race_data()).replace('" the"', '"\\udc00"', 1)),
     "lone surrogate"),
    ("path-skips-root", lambda: changed({f"{STEP}.accepted_path": [1, 4]}), "not a path from the root"),
    ("path-unknown-node", lambda: changed({f"{STEP}.accepted_path": [0, 77]}), "not a node of the pool"),
    ("accepted-past-path", lambda: changed({f"{STEP}.accepted": 3}), "accepted path holds only"),
    ("path-without-pool", lambda: changed({"traces.plain.steps.1.accepted_path": [0]}), "has no draft pool"),
    # A single run file.
    ("single-run-bad-steps", lambda: json.dumps({**race_data()["traces"]["ddd"], "steps": "x"}).encode(),
     "must be a list"),
]
FILE_IDS = [c[0] for c in FILE_CASES]
assert len(set(FILE_IDS)) == len(FILE_IDS)


@pytest.mark.parametrize("name, content, words", FILE_CASES, ids=FILE_IDS)
def test_crafted_run_file_is_refused_with_its_own_message(tmp_path, name, content, words):
    path = tmp_path / f"{name}.json"
    path.write_bytes(content())
    started = time.perf_counter()
    with pytest.raises(RaceFileError, match=words.replace("(", r"\(")):
        load_race(path)
    assert time.perf_counter() - started < 10


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

GOOD = dict(prompt="the cat", max_new_tokens=24, temperature=0.0, top_p=1.0, seed_value=0, precision="float32",
            e_top_k=4, e_calls=4, e_total=20, d_calls=8, d_checks="3,5,7", d_threshold=-0.3)
INPUT_CASES = [
    ("prompt", "", "empty"),
    ("prompt", "   \n", "empty"),
    ("prompt", None, "empty"),
    ("prompt", 42, "must be text"),
    ("prompt", "a\ud800b", "lone surrogate"),
    ("prompt", "x" * 20_001, "20,001 characters"),
    ("max_new_tokens", 0, "between 1 and 512"),
    ("max_new_tokens", 513, "between 1 and 512"),
    ("max_new_tokens", float("nan"), "finite"),
    ("max_new_tokens", 8.5, "whole number"),
    ("max_new_tokens", "many", "must be a number"),
    ("temperature", -0.1, "between 0 and 2"),
    ("temperature", float("inf"), "finite"),
    ("top_p", 0, "between 0.01 and 1"),
    ("seed_value", 2**63, "2^63 - 1"),
    ("seed_value", 2**64 + 5, "2^63 - 1"),
    ("seed_value", -1, "2^63 - 1"),
    ("seed_value", 1.5, "whole number"),
    ("seed_value", float("nan"), "whole number"),
    ("seed_value", "abc", "whole number"),
    ("seed_value", None, "whole number"),
    ("precision", "float8", "precision must be one of"),
    ("precision", None, "precision must be one of"),
    ("e_top_k", 0, "top-k must be between 1 and 32"),
    ("e_calls", 17, "draft calls must be between 1 and 16"),
    ("e_total", 1, "total tokens verified"),
    ("d_calls", None, "empty"),
    ("d_checks", "", "check after calls is empty"),
    ("d_checks", "   ", "check after calls is empty"),
    ("d_checks", None, "check after calls is empty"),
    ("d_checks", ",,,", "lists no draft calls"),
    ("d_checks", "3,99", "99 is outside 1..8"),
    ("d_checks", "0", "0 is outside 1..8"),
    ("d_checks", "-1", "not a draft call number"),
    ("d_checks", "a,b", "not a draft call number"),
    ("d_checks", "5;7", "not a draft call number"),
    ("d_checks", PAYLOADS[0], "not a draft call number"),
    ("d_checks", "\udfff", "lone surrogate"),
    ("d_threshold", float("nan"), "finite"),
    ("d_threshold", float("-inf"), "finite"),
    ("d_threshold", 0.5, "0 or below"),
    ("d_threshold", None, "empty"),
    ("d_threshold", "low", "must be a number"),
]


@pytest.mark.parametrize("field, value, words", INPUT_CASES,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(INPUT_CASES)])
def test_bad_setting_is_named(field, value, words):
    with pytest.raises(InputError, match=words.replace("^", r"\^").replace("(", r"\(")):
        race_inputs(**{**GOOD, field: value}, precisions=["float32", "int8"])


def test_good_settings_come_back_typed():
    checked = race_inputs(**{**GOOD, "seed_value": 2**63 - 1, "d_checks": " 7, 3,,5 ,3", "max_new_tokens": 24.0},
                          precisions=["float32"])
    assert checked.seed == 2**63 - 1 and checked.d_checks == "3,5,7" and checked.max_new_tokens == 24
    assert isinstance(checked.max_new_tokens, int) and race_inputs(**{**GOOD, "d_checks": "ALL"},
                                                                   precisions=["float32"]).d_checks == "all"


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


def test_stop_while_loading_runs_nothing_and_keeps_the_shown_race(page, monkeypatch):
    session, models = Session(race=hand_race()), page.runner.models
    loaded = models.load

    def slow_load(precision=None):
        page.runner.request_stop(session)  # pressed while the model loads
        return loaded(precision)

    monkeypatch.setattr(models, "load", slow_load)
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


# ---------------------------------------------------------------------------------------------------
# In a real browser: script payloads in uploaded files and typed settings show as text, never as elements.
# ---------------------------------------------------------------------------------------------------

# Elements that carry a payload as markup: an attribute naming the marker, or a script or frame holding it.
# Escaped text holding the same words is a text node, so it is not counted.
INJECTED = """[...document.querySelectorAll('*')].filter(e =>
    [...e.attributes].some(a => a.value.includes('__xss')) ||
    (['SCRIPT', 'IFRAME'].includes(e.tagName) && (e.textContent + (e.srcdoc || '')).includes('__xss'))
).map(e => e.outerHTML.slice(0, 120))"""


def upload(browser, path: Path) -> None:
    root = browser.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = browser.send("DOM.querySelector", {"nodeId": root, "selector": "input[type=file]"})["nodeId"]
    browser.send("DOM.setFileInputFiles", {"files": [str(path)], "nodeId": node})


def evil_race() -> bytes:
    """A valid race whose every free text field carries a payload."""
    changes = {"title": PAYLOADS[2], "note": PAYLOADS[1], "traces.plain.steps.1.text": PAYLOADS[4]}
    for method in ("plain", "eagle2", "ddd"):
        changes[f"traces.{method}.prompt"] = PAYLOADS[0]
        changes[f"traces.{method}.model"] = PAYLOADS[3]
        changes[f"traces.{method}.device"] = PAYLOADS[4]
    return changed(changes)


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_script_payloads_stay_text_in_the_browser(app_server, tmp_path):
    from tests.test_browser import Browser, text_of

    browser = Browser(tmp_path / "profile")
    try:
        browser.open(app_server.url)
        browser.wait_for(f"{text_of('ans-ddd')}.trim().length > 0 && !{text_of('ans-ddd')}.includes('no run yet')",
                         90, "the example race")
        info = "(document.querySelector('.race-info')?.innerText || '')"
        # A file refused for its format: the message quotes the payload as text.
        bad = tmp_path / "evil-format.json"
        bad.write_bytes(changed({"format": PAYLOADS[0]}))
        upload(browser, bad)
        browser.wait_for(f"{text_of('message')}.includes('not a DDD Explorer recorded run')", 60, "the refusal")
        assert PAYLOADS[0] in browser.js(text_of("message"))
        # A valid file whose texts are payloads: shown as text in the info line and the answer column.
        good = tmp_path / "evil-race.json"
        good.write_bytes(evil_race())
        upload(browser, good)
        browser.wait_for(f"{info}.includes('onerror')", 60, "the loaded race")
        shown = browser.js(info)
        for payload in (PAYLOADS[2], PAYLOADS[0], PAYLOADS[3], PAYLOADS[1]):
            assert payload in shown, (payload, shown)
        assert PAYLOADS[4] in browser.js(text_of("ans-plain"))
        # A typed setting: the refusal quotes it as text.
        browser.js("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Settings'))"
                   "?.click()")
        field = ("[...document.querySelectorAll('label')].find(l => l.innerText.includes('DDD check after calls'))"
                 "?.closest('.block')?.querySelector('textarea, input')")
        browser.wait_for(f"!!({field})", 20, "the check-after-calls field")
        browser.js(f"""(() => {{ const t = {field}; t.value = {json.dumps(PAYLOADS[0])};
            t.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")
        browser.js("""(() => { const t = document.querySelector('#prompt textarea'); t.value = 'the cat sat';
            t.dispatchEvent(new Event('input', {bubbles: true})); })()""")
        time.sleep(0.5)
        browser.js("document.querySelector('#run').click()")
        browser.wait_for(f"{text_of('message')}.includes('not a draft call number')", 60, "the settings refusal")
        assert PAYLOADS[0] in browser.js(text_of("message"))
        time.sleep(1)  # let any toast render
        assert browser.js("window.__xss") is None
        assert browser.js(INJECTED) == []
    finally:
        browser.close()


def test_gradio_drops_its_old_file_copies(page):
    from components.exports import CACHE_CLEANUP

    demo = page.demo
    assert demo.delete_cache == CACHE_CLEANUP and CACHE_CLEANUP[1] <= 3600
