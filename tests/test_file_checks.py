"""Run files that are valid field by field but would freeze the page or contradict themselves: each is refused
with its own message, or its figures are recomputed from its steps; and whatever a file holds, a step's tree
figure draws a bounded number of shapes, quickly."""
from __future__ import annotations

import copy
import json
import re
import time
from functools import partial

import pytest

import app
from components import RaceFileError, load_race
from components.race import METHOD_LABELS, Race
from components.answer import counters_html
from components.runfile import race_from_data
from components.tree import COLORS, MAX_LEVELS, MAX_NODES, tree_figure
from components.verdict import headline_html, verdict
from components.views import column_views, race_views, step_view
from ddd.metrics import summarize
from ddd.trace import RunTrace, Step
from tests.bad_inputs import race_data
from tests.races import HAND_ANSWER, hand_race, make_trace, node, plain_trace, prefill, spec_step

DDD_STEP = ("traces", "ddd", "steps", 1)
BUILD_S = 2.0  # a step's figure, whatever the file says


def edited(change) -> dict:
    data = race_data()
    change(data)
    return data


def ddd_step(data: dict) -> dict:
    return data["traces"]["ddd"]["steps"][1]


def refused(data: dict, words: str) -> str:
    with pytest.raises(RaceFileError, match=re.escape(words)) as caught:
        race_from_data(copy.deepcopy(data), "crafted.json")
    return str(caught.value)


# ---------------------------------------------------------------------------------------------------
# Files that froze the page: refused, and drawn quickly with bounded shapes even when not checked.
# ---------------------------------------------------------------------------------------------------

def chain_pool(depth: int) -> list[dict]:
    """A chain `depth` levels deep: the root, then one accepted node per level."""
    return [node(i, f" c{i}", i - 1, i, -0.01, "root" if i == 0 else "accepted", in_beam=True).__dict__
            for i in range(depth + 1)]


def wide_pool(count: int, depth: int = 3) -> list[dict]:
    """`count` nodes over `depth` levels under the small pool's accepted path (all but it pruned)."""
    pool = [dict(n.__dict__) for n in spec_step().pool]
    parents = [0, 1, 4]
    while len(pool) < count:
        i = len(pool)
        level = 1 + i % depth
        pool.append(node(i, f" p{i}", parents[level - 1], level, -3.0 - i * 1e-5, "pruned", rank=i % 3).__dict__)
    return pool


def freezing_files() -> dict[str, dict]:
    def calls(data):
        step = ddd_step(data)
        step["draft_calls"] = step["max_draft_calls"] = 4096
        data["traces"]["ddd"]["settings"]["max_draft_calls"] = 6

    def chain(data):
        step = ddd_step(data)
        step["pool"] = chain_pool(4096)
        step["draft_calls"] = step["max_draft_calls"] = 4096
        step["accepted_path"] = list(range(4096))

    def nodes(data):
        ddd_step(data)["pool"] = wide_pool(40_000)

    def settings(data):
        data["traces"]["ddd"]["settings"]["max_draft_calls"] = 4096
    return {"4096-draft-calls": edited(calls), "4096-deep-chain": edited(chain), "40000-nodes": edited(nodes),
            "4096-calls-in-settings": edited(settings)}


@pytest.mark.parametrize("name, words", [
    ("4096-draft-calls", "max_draft_calls is 4096, more than the run's settings allow (6)"),
    ("4096-deep-chain", "more than the run's settings allow"),
    ("40000-nodes", "holds 40,000 nodes; 3 draft calls of its settings make at most 22"),
    ("4096-calls-in-settings", "max_draft_calls is 4096, outside 1..24"),
])
def test_freezing_files_are_refused_with_a_message(name, words):
    refused(freezing_files()[name], words)


@pytest.mark.parametrize("name", ["4096-draft-calls", "4096-deep-chain", "40000-nodes"])
@pytest.mark.parametrize("show", ["shown", "all"])
def test_a_freezing_step_draws_bounded_shapes_quickly_even_unchecked(name, show):
    data = freezing_files()[name]
    trace = RunTrace.from_dict(data["traces"]["ddd"])  # built without the checks: what a bug could let through
    start = time.perf_counter()
    fig = tree_figure(trace.steps[1], trace, show=show)
    fig.to_json()
    took = time.perf_counter() - start
    points = sum(len(t.x) for t in fig.data if t.meta in COLORS)  # nodes drawn, the bonus star included
    assert took < BUILD_S, f"{took:.1f} s"
    assert len(fig.layout.shapes) <= MAX_LEVELS + 1 and points <= MAX_NODES + 1
    assert len(fig.layout.xaxis.tickvals) <= MAX_LEVELS + 1
    if name == "4096-deep-chain" or (name == "40000-nodes" and show == "all"):  # what was left out is said
        assert any(a.name == "hidden" for a in fig.layout.annotations)


def largest_step(width: int = 32, calls: int = 24, total: int = 128) -> Step:
    """The largest pool the app's settings make: `width` at the root call, width² per later call."""
    pool, beam = [node(0, "<", -1, 0, 0.0, "root")], [0]
    for depth in range(1, calls + 1):
        children = []
        for parent in beam:
            for rank in range(width):
                i = len(pool)
                pool.append(node(i, f" t{i}", parent, depth, -0.1 * (rank + 1), "pruned", rank=rank,
                                 token_id=1000 + i, score=pool[parent].score - 0.1 * (rank + 1)))
                children.append(i)
        beam = sorted(children, key=lambda i: -pool[i].score)[:width]
        for i in beam:
            pool[i].in_beam = depth < calls
    kept = sorted(range(1, len(pool)), key=lambda i: -pool[i].score)[:total - 1]
    for i in kept:
        pool[i].status = "rejected"
    path = [0, next(i for i in kept if pool[i].parent == 0)]
    pool[path[1]].status = "accepted"
    # The answer plain decoding gives in the hand race (tests/races.py), as greedy runs of one race agree.
    pool[path[1]].token_id, pool[path[1]].text = HAND_ANSWER[0]
    return spec_step(pool=pool, path=tuple(path), accepted=1, calls=calls, limit=calls, bonus=HAND_ANSWER[1])


def test_the_largest_pool_the_app_makes_loads_and_draws_each_step_within_two_seconds():
    step = largest_step()
    assert len(step.pool) == 1 + 32 + 23 * 32 * 32
    settings = {"beam_width": 32, "max_draft_calls": 24, "check_steps": "all", "threshold": -0.3, "total_tokens": 128}
    ddd = make_trace("ddd", [prefill(), step], settings=settings)
    data = {"format": "ddd-explorer-race", "version": 1, "traces": {"plain": plain_trace(2).to_dict(),
                                                                    "ddd": ddd.to_dict()}}
    race = race_from_data(json.loads(json.dumps(data)))
    for show in ("verified", "shown", "all"):
        start = time.perf_counter()
        view = step_view(race, 1, show=show)
        view.trees["ddd"].to_json()
        assert time.perf_counter() - start < BUILD_S, show
    fig = view.trees["ddd"]
    assert sum(len(t.x) for t in fig.data if t.meta in COLORS) <= MAX_NODES + 1
    assert any("of 23,585 candidates drawn" in a.text for a in fig.layout.annotations)


# ---------------------------------------------------------------------------------------------------
# Files that contradict themselves: refused, or their figures recomputed from the steps.
# ---------------------------------------------------------------------------------------------------

def test_a_summary_that_contradicts_the_steps_is_recomputed():
    data = race_data()
    data["traces"]["ddd"]["summary"] = {**data["traces"]["ddd"]["summary"], "tau": 40.0, "tokens_per_s": 9e9}
    race = race_from_data(data)
    assert race.traces["ddd"].summary == summarize(race.traces["ddd"].steps)
    assert race.traces["ddd"].summary["tau"] == hand_race().traces["ddd"].summary["tau"]


def test_token_ids_repeated_fifty_times_are_refused():
    data = edited(lambda d: ddd_step(d).update(token_ids=ddd_step(d)["token_ids"] * 50))
    refused(data, "token_ids holds 150 tokens, but a step that accepted 2 draft tokens emits 3")


def test_all_timings_zero_are_refused_and_never_become_a_speed():
    def zero(data):
        for trace in data["traces"].values():
            for step in trace["steps"]:
                step["draft_ms"] = step["verify_ms"] = step["other_ms"] = 0.0
    refused(edited(zero), "took no time")
    race = hand_race()  # and were such runs shown anyway, no speed is derived from them
    for trace in race.traces.values():
        for step in trace.steps:
            step.draft_ms = step.verify_ms = step.other_ms = 0.0
    assert verdict(race.traces) is None
    headline = headline_html(race.traces)
    assert "no timed decode step" in headline and "nan" not in headline
    assert "decode tokens/s</span> <span class=\"v\">–" in counters_html("ddd", race.traces["ddd"].steps)
    assert "nan" not in json.dumps([str(v) for v in race_views(race)["summary"].values.tolist()])


@pytest.mark.parametrize("change, words", [
    (lambda d: ddd_step(d).update(verified=40_000), "verified is 40000, more than the 8 tokens its settings verify"),
    (lambda d: ddd_step(d).update(verified=7), "verified is 7 but the pool holds 6 verified nodes"),
    (lambda d: ddd_step(d).update(accepted=3, token_ids=[101, 104, 107, 99], accepted_path=[0, 1, 4, 7],
                                  draft_calls=2), "is 3, more than the 2 levels drafted"),
    (lambda d: ddd_step(d)["pool"][7].update(status="accepted"), "does not list the nodes the pool marks accepted"),
    (lambda d: ddd_step(d).update(token_ids=[5, 104, 99]), "are not the tokens of the accepted path"),
    (lambda d: ddd_step(d).update(token_ids=[101, 104, 5]), "neither the bonus token nor drafted"),
    (lambda d: d["traces"]["eagle2"]["steps"][1].update(draft_calls=2), "deeper than the 2 levels drafted"),
    (lambda d: ddd_step(d)["pool"][2].update(rank=7), "beyond a beam of 3"),
    (lambda d: ddd_step(d).update(checks=[{"call": 3, "confidence": -0.9, "stop": True},
                                          {"call": 3, "confidence": -0.9, "stop": True}]), "distinct draft calls"),
    (lambda d: d["traces"]["eagle2"]["steps"][1].update(checks=[{"call": 1, "confidence": -0.1, "stop": False}]),
     "only DDD and the cost rule check"),
    (lambda d: d["traces"]["plain"]["steps"][1].update(token_ids=[1, 2]), "a plain decoding step emits one"),
    (lambda d: d["traces"]["plain"]["steps"][1].update(prefill=True), "for no other step"),
    (lambda d: d["traces"]["ddd"].update(prompt_tokens=10**6), "a race here reads 1 to 4,096 prompt tokens"),
    (lambda d: d["traces"]["ddd"].update(text="something else"), "differs from the text its steps emitted"),
    (lambda d: d["traces"]["ddd"]["sampling"].update(temperature=5.0), "temperature is 5.0, outside 0..2"),
    (lambda d: d["traces"]["eagle2"]["settings"].update(draft_calls=17), "draft_calls is 17, outside 1..16"),
    (lambda d: d["traces"]["plain"].update(steps=[prefill().to_dict()] + [
        Step(index=i, token_ids=[i], text=" w", accepted=0, verify_ms=5.0).to_dict() for i in range(1, 600)]),
     "emit 600 tokens; a race here writes at most 512"),
], ids=["verified-40000", "verified-not-pool", "accepted-past-depth", "status-not-on-path", "tokens-not-path",
        "last-token-unknown", "pool-deeper-than-calls", "rank-past-beam", "repeated-check", "eagle2-checks",
        "plain-two-tokens", "second-prefill", "prompt-tokens", "text-not-steps", "temperature-past-app",
        "draft-calls-past-app", "tokens-past-max"])
def test_a_step_that_contradicts_itself_is_refused(change, words):
    refused(edited(change), words)


@pytest.mark.parametrize("field, value", [("prompt", "another prompt"), ("precision", "int8"),
                                          ("sampling", {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": 0}),
                                          ("model", "another-model"), ("prompt_tokens", 9)])
def test_columns_of_different_races_are_refused(field, value):
    words = "sample alike" if field == "sampling" else "share one prompt, model, device and precision"
    refused(edited(lambda d: d["traces"]["ddd"].update({field: value})), words)


def test_a_file_without_plain_decoding_says_there_is_nothing_to_compare():
    data = race_data()
    del data["traces"]["plain"]
    race = race_from_data(data)
    headline = race_views(race)["headline"]
    assert "no plain decoding run" in headline and "Run or load" not in headline
    single = race_from_data(race_data()["traces"]["ddd"])
    assert "no plain decoding run" in race_views(single)["headline"]


def test_narration_and_headline_of_an_accepted_file_use_its_checked_numbers():
    race = hand_race()
    text = step_view(race, 1).narration
    assert "kept the 5 with the highest" in text  # verified 6, the root included
    assert "× plain" in headline_html(race.traces) and "nan" not in headline_html(race.traces)


# ---------------------------------------------------------------------------------------------------
# The counters and the headline say the same speed.
# ---------------------------------------------------------------------------------------------------

def counter_rate(html: str) -> float:
    return float(re.search(r"decode tokens/s</span> <span class=\"v\">([0-9.]+)</span>", html).group(1))


def headline_ratios(html: str) -> dict[str, float]:
    return {m: float(r) for m, r in re.findall(r"(EAGLE-2|DDD) ([0-9.]+)× plain", html)}


def timed(race: Race, factor: float) -> Race:
    """The same race as a machine `factor` times slower (below 1: faster) would have recorded it."""
    race = copy.deepcopy(race)
    for trace in race.traces.values():
        for step in trace.steps:
            step.draft_ms, step.verify_ms, step.other_ms = (x * factor for x in
                                                            (step.draft_ms, step.verify_ms, step.other_ms))
    return race


@pytest.mark.parametrize("factor", [0.01, 1, 100])
def test_counters_and_headline_agree_on_recorded_races(llama, llama_head, factor):
    """On any machine, however fast: the numbers are written in plain digits and agree with each other."""
    from tests.tiny import record_tiny_race

    races = [load_race(path) for path in sorted(app.EXAMPLES_DIR.glob("*.json"))]
    races.append(record_tiny_race(llama, llama_head))
    for race in map(partial(timed, factor=factor), races):
        columns = [c for c in column_views(race) if isinstance(c, str)]
        counters = {m: next(c for c in columns if c.startswith(f'<div class="counters"><b>{METHOD_LABELS[m]}</b>'))
                    for m in ("plain", "eagle2", "ddd")}
        ratios = headline_ratios(headline_html(race.traces))
        assert set(ratios) == {"EAGLE-2", "DDD"}, race.title
        for method, label in (("eagle2", "EAGLE-2"), ("ddd", "DDD")):
            counted = counter_rate(counters[method]) / counter_rate(counters["plain"])
            assert counted == pytest.approx(ratios[label], rel=0.05), (race.title, method)
        assert "prefill" in counters["plain"]
