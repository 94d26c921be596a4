"""The settings' one declaration (ddd.settings): every way in parses through it, every bad value gets a message that
names the setting and its range, and everything that shows or stores a setting derives from it."""
from __future__ import annotations

import json

import pytest

from components import load_race
from components.inputs import (LABELS, RUN_SETTINGS, TREE_NAMES, TREE_SETTINGS, InputError, checked, label,
                               race_inputs, tree_settings)
from components.narration import candidates_drafted
from components.runfile import race_from_data
from components.views import race_info
from ddd import Generation, RunTrace, Sampling, SettingsError, generate, method_settings
from ddd.cli import build_parser
from ddd.settings import (BEAM_WIDTH, CHECK_STEPS, DRAFT_COST, MAX_NEW_TOKENS, METHOD_DECLARATIONS, SAMPLING_SETTINGS,
                          DDDSettings, Setting, current_names, parse_settings, settings_dict)
from ddd.trace import CostsUsed
from ddd.turns import Entry
from explorer.layout import SETTINGS, widget
from explorer.presets import PRESETS, race_entries, widget_values
from tests.bad_inputs import GOOD
from tests.races import hand_race

# Values no setting may take, each as the page, the API, a command line or Python may send it.
BAD = {"superscript two": "²", "circled one": "①", "Arabic-Indic three": "٣", "5,000 digits as text": "9" * 5000,
       "5,000 digits": 10**5000, "NaN": float("nan"), "infinity": float("inf"), "minus infinity": float("-inf"),
       "empty": "", "nothing": None, "true": True, "a dict": {"a": 1}, "a word": "many", "1e999": "1e999"}
RACE_SETTINGS = {s.name: s for declared in METHOD_DECLARATIONS.values() for s in declared if s.name != "tree"}
ALL_SETTINGS = {**RACE_SETTINGS, MAX_NEW_TOKENS.name: MAX_NEW_TOKENS, **{s.name: s for s in SAMPLING_SETTINGS}}


def method_of(name: str) -> str:
    return next(m for m, declared in METHOD_DECLARATIONS.items() if any(s.name == name for s in declared))


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("name", ALL_SETTINGS)
def test_the_engine_names_the_setting_and_its_range(name, value):
    setting = ALL_SETTINGS[name]
    if setting.kind == "bool" and isinstance(value, bool):
        pytest.skip("true or false is a valid value of a switch")
    with pytest.raises(SettingsError) as info:
        if name in RACE_SETTINGS:
            method_settings(method_of(name), **{name: value})
        elif name == MAX_NEW_TOKENS.name:
            MAX_NEW_TOKENS.parse(value)
        else:
            Sampling(**{name: value})
    message = str(info.value)
    assert message.startswith(name + " ") and info.value.setting is setting
    assert setting.allowed() in message or "lists no draft calls" in message


@pytest.mark.parametrize("value", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("name", [n for n in GOOD if n not in ("prompt", "precision")])
def test_the_app_names_the_setting_with_its_label(name, value):
    if ALL_SETTINGS[name].kind == "bool" and isinstance(value, bool):
        pytest.skip("true or false is a valid value of a switch")
    if name == CHECK_STEPS.name and isinstance(value, (list, tuple)):
        pytest.skip("a list of draft calls is a valid value")
    with pytest.raises(InputError) as info:
        race_inputs(**{**GOOD, name: value}, precisions=["float32"])
    setting = ALL_SETTINGS[name]
    assert str(info.value).startswith(label(setting) + " ")


ITEMS = {**{k: v for k, v in BAD.items() if k not in ("empty", "a word")}, "a list": [5], "zero": 0, "65": 65}


@pytest.mark.parametrize("item", ITEMS.values(), ids=ITEMS.keys())
def test_each_of_ddds_checks_is_parsed_alike(item):
    for value in ([5, item], (item,)) + (("5," + item,) if isinstance(item, str) else ()):
        with pytest.raises(SettingsError, match="^check_steps must be 'all' or draft calls from 1 to 64"):
            method_settings("ddd", check_steps=value)
        with pytest.raises(InputError, match="^DDD: check after calls must be 'all' or draft calls from 1 to 24"):
            tree_settings({**{n: GOOD[n] for n in TREE_NAMES}, "check_steps": value})


@pytest.mark.parametrize("text, value", [("8", 8), (" 8 ", 8), ("8.0", 8), (8.0, 8), ("+8", 8)])
def test_whole_numbers_come_as_text_or_numbers(text, value):
    assert method_settings("eagle2", beam_width=text).beam_width == value


def test_the_app_allows_less_than_the_engine_where_declared():
    assert method_settings("eagle2", draft_calls=64).draft_calls == 64
    with pytest.raises(InputError, match="EAGLE-2: draft calls must be a whole number from 1 to 16, not 17"):
        race_inputs(**{**GOOD, "draft_calls": 17}, precisions=["float32"])
    assert race_inputs(**{**GOOD, "max_new_tokens": 1}, precisions=["float32"]).max_new_tokens == 1


def test_declared_defaults_are_the_settings_classes_defaults():
    for method, declared in METHOD_DECLARATIONS.items():
        settings = method_settings(method)
        assert [getattr(settings, s.name) for s in declared] == [s.default for s in declared]
    assert settings_dict(DDDSettings()) == {"beam_width": 10, "max_draft_calls": 11, "check_steps": [5, 7, 9],
                                            "threshold": -0.3, "total_tokens": 60}
    assert Sampling() == Sampling(temperature=0.0, top_p=1.0, top_k=0, seed=0)


def test_the_panel_derives_from_the_declaration():
    assert SETTINGS == [s.name for s in RUN_SETTINGS] + ["precision"] + TREE_NAMES + ["race_cost"]
    assert TREE_NAMES == ["beam_width", "draft_calls", "total_tokens", "max_draft_calls", "check_steps", "threshold",
                          "pin_costs", "draft_cost", "verify_base", "verify_cost"]
    assert LABELS["beam_width"] == "EAGLE-2 / DDD: beam width" and LABELS["threshold"] == "DDD: threshold on H"
    assert LABELS["draft_cost"] == "Cost rule: draft call cost"  # named after the fourth column, which alone takes it
    for setting in (*RUN_SETTINGS, *TREE_SETTINGS):
        low, high = setting.bounds(ui=True)
        made = widget(setting, setting.ui_value(setting.start(ui=True)))
        assert made.label == label(setting) and made.info == setting.help
        if setting.step is not None:
            assert made.maximum == high and low <= made.minimum <= low + setting.step
            setting.parse(made.minimum, ui=True)  # a slider starts at a value its setting accepts
    assert widget(MAX_NEW_TOKENS, 64).minimum == 8  # the slider's first step; the API may still send 1
    assert widget(DRAFT_COST, 0.06).minimum == 0.01  # a draft call always costs something: 0 is refused


@pytest.mark.parametrize("sent, shown", [(1.0000001, "not 1.0000001."), ("1.0000001", "not 1.0000001."),
                                         (-1e-09, "not -0.000000001."), (1 + 2**-52, "not 1.0000000000000002.")])
def test_a_range_message_shows_the_value_as_sent_not_rounded_onto_the_limit(sent, shown):
    with pytest.raises(InputError) as caught:
        checked(DRAFT_COST, sent)
    assert str(caught.value).endswith(shown) and str(caught.value).startswith(label(DRAFT_COST))


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_is_valid_in_the_app(name):
    values = widget_values(PRESETS[name])
    tree = tree_settings(values)
    entries = race_entries(tree)
    for method in ("eagle2", "ddd"):
        parse_settings(method, entries[method].settings, ui=True).validate()
    assert PRESETS["papers (GPU)"] == {s.name: s.default for s in TREE_SETTINGS}


def test_generate_leaves_the_callers_sampling_alone(llama):
    sampling = Sampling(temperature=0.5, seed=3)
    run = generate(llama, None, "the cat", "plain", max_new_tokens=2, sampling=sampling, temperature=0.9, seed=7)
    list(run)
    assert sampling == Sampling(temperature=0.5, seed=3)
    assert run.sampling == Sampling(temperature=0.9, seed=7) and run.sampling is not sampling
    assert run.trace.sampling["temperature"] == 0.9


def test_an_unknown_method_is_refused_everywhere(llama):
    for make in (lambda: generate(llama, None, "hi", "beam"),
                 lambda: Generation(llama, None, "hi", "beam", settings=DDDSettings()),
                 lambda: Entry("beam"), lambda: Entry(None)):
        with pytest.raises(SettingsError, match="choose one of plain, eagle, eagle2, ddd"):
            make()
    with pytest.raises(SettingsError, match="takes Eagle2Settings, not DDDSettings"):
        Generation(llama, None, "hi", "eagle2", settings=DDDSettings())


def test_a_recorded_example_still_loads_and_shows_beam_width():
    """The shipped examples were recorded when the beam width was stored as top_k."""
    raw = json.loads(open("assets/examples/code.json").read())
    assert "top_k" in raw["traces"]["ddd"]["settings"]
    race = load_race("assets/examples/code.json")
    for method in ("eagle2", "ddd"):
        settings = race.traces[method].settings
        assert "top_k" not in settings and settings["beam_width"] == raw["traces"][method]["settings"]["top_k"]
        assert list(settings)[0] == "beam_width"  # renamed in place
    step = next(s for s in race.traces["ddd"].steps if not s.prefill)
    width = race.traces["ddd"].settings["beam_width"]
    assert candidates_drafted(step, race.traces["ddd"]) == width + (step.draft_calls - 1) * width * width
    trace = RunTrace.from_dict(raw["traces"]["eagle2"])
    assert trace.settings["beam_width"] == raw["traces"]["eagle2"]["settings"]["top_k"]
    assert trace.sampling["top_k"] == 0  # the sampling top-k keeps its name


def test_old_names_are_renamed_only_where_they_are_old():
    assert current_names("ddd", {"top_k": 4, "threshold": -1}) == {"beam_width": 4, "threshold": -1}
    assert current_names("plain", {"top_k": 4}) == {"top_k": 4}
    data = hand_race().to_dict()
    data["traces"]["ddd"]["settings"] = {"top_k": 4, "max_draft_calls": 6, "check_steps": "all", "threshold": -0.3,
                                         "total_tokens": 8}
    assert race_from_data(data).traces["ddd"].settings["beam_width"] == 4


def test_the_command_lines_list_every_declared_setting():
    help_text = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    for method, declared in METHOD_DECLARATIONS.items():
        for setting in declared:
            assert f"{setting.name} ({method}):" in help_text
    for setting in (MAX_NEW_TOKENS, *SAMPLING_SETTINGS):
        assert f"--{setting.name.replace('_', '-')}" in help_text


def test_a_setting_is_one_frozen_declaration():
    assert isinstance(BEAM_WIDTH, Setting) and BEAM_WIDTH.old_names == ("top_k",)
    with pytest.raises(AttributeError):
        BEAM_WIDTH.high = 5  # type: ignore[misc]


def test_the_race_info_names_settings_by_their_labels_and_the_costs_the_rule_measured():
    race = load_race("assets/examples/maths.json")
    cost = race.traces["cost"]
    cost.settings["pin_costs"] = False
    for step in cost.steps:  # measured from step 2 on, the last time at step 5
        if not step.prefill:
            step.costs = CostsUsed(0.0712, 0.1234, 0.0311, measured=2 <= step.index <= 5)
    info = race_info(race)
    for raw in ("pin_costs", "draft_cost", "verify_base", "verify_cost", "beam_width", "max_draft_calls",
                "check_steps", "total_tokens", "False", "True", "[[", "'all'"):
        assert raw not in info, raw
    line = next(part for part in info.split("<br>") if part.startswith("Cost rule:"))
    assert f"{BEAM_WIDTH.label} 8" in line
    assert ("costs measured on this machine as it decoded (as of step 5): draft call cost 0.0712, verify base cost "
            "0.123, verify cost per token 0.0311") in line
    assert "0.06" not in line  # the costs it started from, which its settings hold
    assert f"{CHECK_STEPS.label} (every call)" in info and "threshold on H -0.3" in info
    cost.settings["pin_costs"] = True
    for step in cost.steps:
        step.costs = None
    assert "costs kept fixed: draft call cost 0.06, verify base cost 0.09" in race_info(race)
    race.traces["ddd"].settings["check_steps"] = [5, 7]
    race.title = "<b>pin_costs</b>"
    info = race_info(race)
    assert f"{CHECK_STEPS.label} (5, 7)" in info and "<b>pin_costs" not in info  # escaped
