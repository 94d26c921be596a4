"""Race files: saving and loading a race, and a message saying why for every file that is not one."""
from __future__ import annotations

import json

import pytest

from components import RaceFileError, load_race
from ddd.trace import SCHEMA_VERSION
from tests.races import hand_race


def test_race_file_round_trip(tmp_path):
    race = hand_race()
    path = race.save(tmp_path / "race.json")
    back = load_race(path)
    assert back.to_dict() == race.to_dict()
    compact = load_race(race.save(tmp_path / "compact.json", compact=True))
    step = compact.traces["ddd"].steps[1]
    assert step.accepted_path == [0, 1, 4] and {n.index for n in step.pool} >= {0, 1, 4, 2, 5, 7}
    assert json.loads(path.read_text())["traces"]["ddd"]["schema_version"] == SCHEMA_VERSION


def test_single_run_trace_file_loads_as_a_race(tmp_path):
    trace = hand_race().traces["ddd"]
    race = load_race(trace.save(tmp_path / "ddd.json"))
    assert race.methods == ["ddd"] and race.prompt == "Say hi"


@pytest.mark.parametrize("content, words", [
    ("{broken", "not a readable JSON"),
    ("[1, 2]", "not an object"),
    (json.dumps({"format": "something-else"}), "not a DDD Explorer recorded run"),
    (json.dumps({"format": "ddd-explorer-race", "version": 2, "traces": {}}), "version 2"),
    (json.dumps({"format": "ddd-explorer-race", "version": 1, "traces": {}}), "holds no runs"),
    (json.dumps({"format": "ddd-explorer-race", "version": 1, "traces": {"ddd": {"schema_version": 0}}}),
     "schema version 0"),
    (json.dumps({"format": "ddd-explorer-race", "version": 1,
                 "traces": {"ddd": {"schema_version": SCHEMA_VERSION, "bogus": 1}}}), "lacks the fields"),
    (json.dumps({"format": "ddd-explorer-race", "version": 1, "traces": {"magic": {}}}), "unknown method"),
])
def test_bad_race_files_say_why(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(RaceFileError, match=words):
        load_race(path)


def test_missing_file():
    with pytest.raises(RaceFileError, match="No recorded run"):
        load_race("/no/such/file.json")
