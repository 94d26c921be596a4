"""The views, built from traces alone: hand-built steps with known answers, recorded tiny-model runs, and
every shipped example at every step."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from components import Race, RaceFileError
from components.about import about_markdown, cost_model_rows
from components.answer import answer_html, counters_html, split_step
from components.charts import PHASE_COLORS, SUMMARY_HEADERS, depth_figure, summary_rows, timeline_figure
from components.narration import candidates_drafted, narrate
from components.race import shown_nodes
from components.replay import duration, frame_times, steps_done
from components.tokens import visible
from components.tree import BONUS, COLORS, GHOST_COLOR, build_graph, layout, tree_figure
from components.verdict import verdict
from ddd.metrics import summarize
from ddd.trace import SCHEMA_VERSION, DepthCheck, DraftNode, RunTrace, Step
from tests.tiny import record_tiny_race, render_everything

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "assets" / "examples").glob("*.json"))


# ---------------------------------------------------------------------------------------------------
# Hand-built traces.
# ---------------------------------------------------------------------------------------------------

def node(index, text, parent, depth, logprob, status, rank=0, in_beam=False, token_id=None, score=None):
    return DraftNode(index=index, token_id=100 + index if token_id is None else token_id, text=text, parent=parent,
                     depth=depth, logprob=logprob, score=logprob if score is None else score, rank=rank,
                     in_beam=in_beam, status=status)


def small_pool(statuses: dict[int, str] | None = None) -> list[DraftNode]:
    """root -> ' the'(1) -> ' cat'(4) -> ' sat'(7); siblings and pruned candidates around them."""
    s = {1: "accepted", 2: "rejected", 3: "pruned", 4: "accepted", 5: "rejected", 6: "pruned", 7: "rejected",
         8: "pruned"}
    s.update(statuses or {})
    return [
        node(0, "\n", -1, 0, 0.0, "root"),
        node(1, " the", 0, 1, -0.1, s[1], rank=0, in_beam=True),
        node(2, " a", 0, 1, -2.5, s[2], rank=1, in_beam=True),
        node(3, " one", 0, 1, -4.0, s[3], rank=2),
        node(4, " cat", 1, 2, -0.2, s[4], rank=0, in_beam=True, score=-0.3),
        node(5, " dog", 1, 2, -1.9, s[5], rank=1, score=-2.0),
        node(6, " big", 2, 2, -0.5, s[6], rank=0, score=-3.0),
        node(7, " sat", 4, 3, -0.4, s[7], rank=0, score=-0.7),
        node(8, " ran", 4, 3, -2.0, s[8], rank=1, score=-2.3),
    ]


def spec_step(index=1, *, accepted=2, path=(0, 1, 4), bonus=(99, " on"), calls=3, limit=3, checks=(), pool=None,
              draft_ms=30.0, verify_ms=60.0, other_ms=5.0, text=None):
    pool = small_pool() if pool is None else pool
    nodes = {n.index: n for n in pool}
    drafted = "".join(nodes[i].text for i in path[1:1 + accepted])
    return Step(index=index, token_ids=[nodes[i].token_id for i in path[1:1 + accepted]] + [bonus[0]],
                text=drafted + bonus[1] if text is None else text, accepted=accepted, draft_ms=draft_ms,
                verify_ms=verify_ms, other_ms=other_ms, pool=pool, draft_calls=calls, max_draft_calls=limit,
                verified=sum(1 for n in pool if n.status != "pruned"), accepted_path=list(path), bonus_id=bonus[0],
                bonus_text=bonus[1], checks=[DepthCheck(*c) for c in checks],
                confidence=[c[1] for c in checks])


def prefill(ms=120.0, text="Hello"):
    return Step(index=0, token_ids=[7], text=text, accepted=0, verify_ms=ms, prefill=True)


def make_trace(method, steps, settings=None, temperature=0.0):
    defaults = {"plain": {}, "eagle2": {"top_k": 3, "draft_calls": 3, "total_tokens": 8},
                "ddd": {"top_k": 3, "max_draft_calls": 6, "check_steps": [3, 5], "threshold": -0.3,
                        "total_tokens": 8}}
    trace = RunTrace(method=method, settings=settings or defaults[method],
                     sampling={"temperature": temperature, "top_p": 1.0, "top_k": 0, "seed": 0}, model="hand-made",
                     head="hand-made", prompt="Say hi", prompt_tokens=5, steps=steps,
                     text="".join(s.text for s in steps), stop_reason="max_new_tokens")
    trace.summary = summarize(steps)
    return trace


def plain_trace(n=6, ms=50.0):
    return make_trace("plain", [prefill()] + [Step(index=i, token_ids=[i], text=f" w{i}", accepted=0, verify_ms=ms)
                                              for i in range(1, n + 1)])


def hand_race():
    eagle2 = make_trace("eagle2", [prefill(), spec_step(1), spec_step(2, accepted=0, path=(0,), bonus=(98, " hey"))])
    ddd = make_trace("ddd", [
        prefill(),
        spec_step(1, calls=3, limit=6, checks=[(3, -0.9, True)]),  # early stop: ghost levels 4..6
        spec_step(2, calls=6, limit=6, checks=[(3, -0.1, False), (5, -0.2, False)]),  # deeper than EAGLE-2's 3
    ])
    return Race(traces={"plain": plain_trace(), "eagle2": eagle2, "ddd": ddd}, title="hand race")


def by_meta(fig, meta):
    return [t for t in fig.data if t.meta == meta]


# ---------------------------------------------------------------------------------------------------
# Tree.
# ---------------------------------------------------------------------------------------------------

def test_graph_nodes_edges_and_accepted_path():
    step = spec_step()
    graph = build_graph(step, top_k=3, show="all")
    assert graph.number_of_nodes() == 9 + 1  # the whole pool plus the bonus token
    assert graph.nodes[BONUS]["depth"] == 3 and graph.nodes[BONUS]["token_id"] == 99
    accepted_edges = {(a, b) for a, b, d in graph.edges(data=True) if d["accepted"]}
    assert accepted_edges == {(0, 1), (1, 4), (4, BONUS)}
    verified = build_graph(step, show="verified")
    assert {n for n in verified if n != BONUS} == {0, 1, 2, 4, 5, 7}
    assert shown_nodes(step.pool, top_k=0) == {0, 1, 2, 4, 5, 7}  # verified only
    assert shown_nodes(step.pool, top_k=1) == set(range(9))  # + the best dropped candidate of each level


def test_shown_nodes_keeps_parents_of_kept_candidates():
    pool = small_pool() + [node(9, " x", 3, 2, -0.1, "pruned", score=-0.05)]  # the best of level 2, under 3
    keep = shown_nodes(pool, top_k=1)
    assert 9 in keep and 3 in keep  # its dropped parent comes along, so it hangs from the root


def test_layout_levels_left_to_right_siblings_by_rank():
    graph = build_graph(spec_step(), top_k=3, show="all")
    pos = layout(graph)
    for n, data in graph.nodes(data=True):
        expected = data["depth"] - (0.5 if n == BONUS else 0)  # the bonus: half a level after its parent
        assert pos[n][0] == expected
    assert pos[1][1] > pos[2][1] > pos[3][1]  # rank 0 on top
    assert all(-1 <= y <= 1 for _, y in pos.values())


def test_tree_figure_colours_bands_ghosts_and_labels():
    step = spec_step(calls=3, limit=6, checks=[(3, -0.9, True)])
    trace = make_trace("ddd", [prefill(), step])
    fig = tree_figure(step, trace, show="all")
    counts = {t.meta: len(t.x) for t in fig.data if t.meta in COLORS}
    assert counts == {"root": 1, "accepted": 2, "rejected": 3, "pruned": 3, "bonus": 1}
    for meta, colour in COLORS.items():
        assert by_meta(fig, meta)[0].marker.color == colour
    assert by_meta(fig, "bonus")[0].marker.symbol == "star"
    labels = list(by_meta(fig, "accepted")[0].text) + list(by_meta(fig, "root")[0].text)
    assert labels == ["␣the", "␣cat", "↵"]
    bands = [s for s in fig.layout.shapes if s.fillcolor != GHOST_COLOR]
    ghosts = [s for s in fig.layout.shapes if s.fillcolor == GHOST_COLOR]
    assert len(bands) == 3 and len(ghosts) == 1 and 3.5 < ghosts[0].x0 < ghosts[0].x1 < 4.5  # one narrow band
    assert any(a.text == "levels 4–6 not drafted" for a in fig.layout.annotations)
    assert any(a.text == "-0.90 stop" for a in fig.layout.annotations)
    assert list(fig.layout.xaxis.ticktext) == ["root", "1", "2", "3"]
    # The bonus star sits beside the last accepted node, whose label is above it, not under the star.
    assert by_meta(fig, "accepted")[0].textposition == "top center"
    assert by_meta(fig, "bonus")[0].x[0] == by_meta(fig, "accepted")[0].x[-1] + 0.5
    edges = [t for t in fig.data if t.mode == "lines" and t.line.color == COLORS["accepted"]]
    assert len(edges) == 1 and len([x for x in edges[0].x if x is not None]) == 6  # 3 accepted edges
    hover = by_meta(fig, "accepted")[0].hovertext[0]
    assert "token id 101" in hover and f"{math.exp(-0.1):.3f}" in hover and "rank 0" in hover
    assert by_meta(fig, "ghost")  # legend entry for the levels DDD chose not to draft


def test_tree_figure_eagle2_has_no_ghosts_and_handles_prefill_and_missing():
    step = spec_step()
    fig = tree_figure(step, make_trace("eagle2", [prefill(), step]))
    assert not [s for s in fig.layout.shapes if s.fillcolor == GHOST_COLOR]
    assert "Prefill" in tree_figure(prefill(), make_trace("eagle2", [prefill()])).layout.annotations[0].text
    assert "No step" in tree_figure(None, None).layout.annotations[0].text
    bare = spec_step()
    bare.pool = []
    assert "not recorded" in tree_figure(bare, make_trace("eagle2", [bare])).layout.annotations[0].text


def test_tree_labels_are_escaped_and_short_off_the_path():
    pool = small_pool()
    pool[1].text, pool[2].text, pool[3].text = "<b>", '"', " a-very-long-token"
    step = spec_step(pool=pool, text="<b> cat on")
    fig = tree_figure(step, make_trace("eagle2", [prefill(), step]), show="all")
    assert by_meta(fig, "accepted")[0].text[0] == "&lt;b&gt;"
    assert "&lt;b&gt;" in by_meta(fig, "accepted")[0].hovertext[0]
    assert by_meta(fig, "pruned")[0].text[0] == "␣a-ve…"
    assert by_meta(fig, "rejected")[0].text[0] == '"'  # plotly does not decode &quot;: quotes stay quotes


def big_step(top_k=10, calls=6, total=60) -> Step:
    """A full-size pool: top_k at the root call, top_k² per later call, total-1 kept."""
    pool = [node(0, "<", -1, 0, 0.0, "root")]
    beam = [0]
    for depth in range(1, calls + 1):
        children = []
        for parent in beam:
            for r in range(top_k if depth > 1 or parent == 0 else 0):
                index = len(pool)
                score = pool[parent].score - 0.3 * (r + 1) - 0.05 * depth
                pool.append(node(index, f" t{index}", parent, depth, -0.3 * (r + 1), "pruned", rank=r, score=score))
                children.append(index)
        beam = sorted(children, key=lambda i: -pool[i].score)[:top_k]
        for i in beam:
            pool[i].in_beam = depth < calls
    kept = sorted(range(1, len(pool)), key=lambda i: -pool[i].score)[: total - 1]
    path = [0]
    for i in kept:
        pool[i].status = "rejected"
    while True:
        kids = [i for i in kept if pool[i].parent == path[-1]]
        if not kids or len(path) > 3:
            break
        path.append(max(kids, key=lambda i: pool[i].score))
        pool[path[-1]].status = "accepted"
    return spec_step(pool=pool, path=tuple(path), accepted=len(path) - 1, calls=calls, limit=11,
                     text="".join(pool[i].text for i in path[1:]) + " on")


def test_a_sixty_node_tree_draws_every_candidate_in_the_whole_pool_view():
    step = big_step()
    trace = make_trace("ddd", [prefill(), step], settings={"top_k": 10, "max_draft_calls": 11, "threshold": -0.3})
    for show in ("verified", "shown", "all"):
        fig = tree_figure(step, trace, show=show)
        fig.to_json()
    assert sum(len(t.x) for t in fig.data if t.meta in COLORS) == len(step.pool) + 1


# ---------------------------------------------------------------------------------------------------
# Charts, answer, summary.
# ---------------------------------------------------------------------------------------------------

def test_depth_figure_depths_checks_threshold_and_cursor():
    race = hand_race()
    fig = depth_figure(race, current=2)
    assert list(by_meta(fig, "ddd-depth")[0].y) == [3, 6]
    assert list(by_meta(fig, "eagle2-depth")[0].y) == [3, 3]
    assert list(by_meta(fig, "stop")[0].y) == [-0.9]
    assert list(by_meta(fig, "go-on")[0].y) == [-0.1, -0.2]
    assert set(by_meta(fig, "threshold")[0].y) == {-0.3}
    assert list(by_meta(fig, "ddd-accepted")[0].y) == [2, 2]
    assert list(by_meta(fig, "eagle2-accepted")[0].y) == [2, 0]
    cursor = [s for s in fig.layout.shapes if s.name == "current"]
    assert len(cursor) == 1 and cursor[0].x0 == 2
    assert "Run or load" in depth_figure(None).layout.annotations[0].text


def test_timeline_adds_up_each_method_and_phase():
    race = hand_race()
    fig = timeline_figure(race)
    total = sum(sum(t.x) for t in fig.data if str(t.meta).endswith("-steps"))
    assert total == pytest.approx(sum(s.ms for tr in race.traces.values() for s in tr.steps) / 1000)
    marks = by_meta(fig, "tokens")[0]
    assert len(marks.x) == sum(len(t.steps) for t in race.traces.values())
    for phase, colour in PHASE_COLORS.items():
        assert by_meta(fig, f"{phase}-total")[0].marker.color == colour
    ddd_end = max(x for x, y in zip(marks.x, marks.y) if y == "DDD")
    assert ddd_end == pytest.approx(sum(s.ms for s in race.traces["ddd"].steps) / 1000)


def test_summary_rows_speedup_and_columns():
    rows = summary_rows(hand_race())
    assert [r[0] for r in rows] == ["Plain", "EAGLE-2", "DDD"]
    assert all(len(r) == len(SUMMARY_HEADERS) for r in rows)
    assert rows[0][4] == "1.00×" and rows[0][7] == "–"
    ddd = verdict(hand_race().traces).standings[2]
    assert rows[2][4].startswith(f"{ddd.speedup:.2f}×")  # the headline's figure, not tokens/s with the prefill


def test_answer_shading_and_current_step():
    step = spec_step()
    assert split_step(step) == [("draft", " the cat"), ("target", " on")]
    trace = make_trace("ddd", [prefill(), step])
    html = answer_html(trace, current=1)
    assert '<span class="tok-draft"> the cat</span><span class="tok-target"> on</span>' in html
    assert 'class="step cur" title="step 1"' in html
    assert "tok-draft" not in answer_html(trace, shade=False)
    assert "tok-draft" not in answer_html(plain_trace())
    assert "&lt;b&gt;" in answer_html(make_trace("plain", [prefill(text="<b>")]))  # escaped
    line = counters_html("ddd", trace.steps, "done")
    for word in ("tokens", "tokens/s", "target forwards", "tau", "elapsed"):
        assert word in line


def test_visible_whitespace():
    assert visible(" a\n\tb") == "␣a↵⇥b"
    assert visible("") == "∅" and visible("\x07") == "\\x07"


# ---------------------------------------------------------------------------------------------------
# Narration.
# ---------------------------------------------------------------------------------------------------

def test_narration_early_stop():
    race = hand_race()
    step = race.traces["ddd"].steps[1]
    text = narrate(step, race.traces["ddd"], race)
    assert "DDD stopped after 3 draft calls" in text and "H = -0.90" in text and "threshold -0.3" in text
    assert "saved 3 draft calls" in text and "about 30 ms" in text  # 10 ms per call x 3
    assert f"{math.exp(-0.9):.0%}" in text
    assert "accepted 2 draft tokens ('␣the', '␣cat')" in text and "'␣on' itself" in text
    assert "candidates in 3 levels" in text and f"{candidates_drafted(step, race.traces['ddd'])}" in text


def test_narration_tiny_beam_share_is_readable():
    race = hand_race()
    step = spec_step(1, calls=3, limit=6, checks=[(3, -6.13, True)])
    assert "held only 0.2% of the draft probability" in narrate(step, race.traces["ddd"], race)


def test_narration_deeper_than_eagle2():
    race = hand_race()
    text = narrate(race.traces["ddd"].steps[2], race.traces["ddd"], race)
    assert "drafted all 6 levels" in text and "3 deeper than EAGLE-2's fixed 3" in text
    assert "-0.10, -0.20" in text


def test_narration_stopped_but_still_deeper_than_eagle2():
    race = hand_race()
    step = spec_step(3, calls=5, limit=6, checks=[(3, -0.2, False), (5, -0.8, True)])
    text = narrate(step, race.traces["ddd"], race)
    assert "DDD stopped after 5 draft calls" in text and "2 more levels than EAGLE-2's fixed 3" in text
    assert "went deeper than EAGLE-2" in text and "H = -0.20" in text


def test_narration_nothing_accepted():
    race = hand_race()
    step = race.traces["eagle2"].steps[2]
    text = narrate(step, race.traces["eagle2"], race)
    assert "Nothing was accepted" in text and "'␣hey'" in text
    assert "'␣the', '␣a'" in text and "did not match" in text
    sampled = make_trace("eagle2", [prefill(), step], temperature=0.8)
    assert "sampling test" in narrate(step, sampled, None)


def test_narration_all_accepted():
    pool = small_pool({7: "accepted"})
    step = spec_step(accepted=3, path=(0, 1, 4, 7))
    step.pool = pool
    trace = make_trace("eagle2", [prefill(), step])
    text = narrate(step, trace, None)
    assert "accepted 3 draft tokens ('␣the', '␣cat', '␣sat')" in text
    assert "every level the draft built" in text


def test_narration_states_the_depth_decision_once():
    race = hand_race()
    pool = small_pool({7: "accepted"})
    stopped = spec_step(accepted=3, path=(0, 1, 4, 7), calls=3, limit=6, checks=[(3, -0.9, True)], pool=pool)
    text = narrate(stopped, race.traces["ddd"], race)
    assert "every level the draft built" in text and "judged deeper levels unlikely" in text
    assert "cautious" in text and "could have given even more" not in text
    assert text.count("deeper") == 2  # the decision, and what it cost this time: once each
    fixed = narrate(spec_step(accepted=3, path=(0, 1, 4, 7), pool=small_pool({7: "accepted"})),
                    race.traces["eagle2"], race)
    assert "EAGLE-2 drafts a fixed 3 levels" in fixed


def test_narration_prefill_plain_and_timing():
    race = hand_race()
    assert "prefill" in narrate(race.traces["ddd"].steps[0], race.traces["ddd"], race)
    assert "One target forward" in narrate(race.traces["plain"].steps[1], race.traces["plain"], race)
    text = narrate(race.traces["ddd"].steps[1], race.traces["ddd"], race)
    assert "30 ms drafting + 60 ms verifying + 5 ms other = 95 ms for 3 tokens" in text
    assert "plain decoding: 50 ms per token" in text


# ---------------------------------------------------------------------------------------------------
# Race files, replay, about.
# ---------------------------------------------------------------------------------------------------

def test_race_file_round_trip(tmp_path):
    race = hand_race()
    path = race.save(tmp_path / "race.json")
    back = Race.load(path)
    assert back.to_dict() == race.to_dict()
    compact = Race.load(race.save(tmp_path / "compact.json", compact=True))
    step = compact.traces["ddd"].steps[1]
    assert step.accepted_path == [0, 1, 4] and {n.index for n in step.pool} >= {0, 1, 4, 2, 5, 7}
    assert json.loads(path.read_text())["traces"]["ddd"]["schema_version"] == SCHEMA_VERSION


def test_single_run_trace_file_loads_as_a_race(tmp_path):
    trace = hand_race().traces["ddd"]
    race = Race.load(trace.save(tmp_path / "ddd.json"))
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
        Race.load(path)


def test_missing_file():
    with pytest.raises(RaceFileError, match="No recorded run"):
        Race.load("/no/such/file.json")


def test_replay_clock():
    race = hand_race()
    total = duration(race)
    assert total == pytest.approx(max(sum(s.ms for s in t.steps) for t in race.traces.values()) / 1000)
    times = frame_times(race, fps=10, speed=1)
    assert times[0] == 0 and times[-1] == pytest.approx(total) and times == sorted(times)
    assert steps_done(race, "plain", 0) == 0 and steps_done(race, "plain", total) == 7
    assert steps_done(race, "ddd", 0.121) == 1  # the 120 ms prefill is done


def test_about_fills_in_the_cost_model():
    race = hand_race()
    rows = {r["method"]: r for r in cost_model_rows(race)}
    ddd = race.summary("ddd")
    assert rows["DDD"]["ms_per_token"] == pytest.approx(
        (ddd["draft_ms_per_step"] + ddd["verify_ms_per_step"]) / ddd["tau"])
    text = about_markdown(race)
    assert "2409.00142" in text and "2406.16858" in text and "(draft time + verify time) / tau" in text
    assert f"{rows['DDD']['ms_per_token']:.1f}" in text
    assert "Run or load" in about_markdown(None)


# ---------------------------------------------------------------------------------------------------
# Recorded runs: tiny-model traces and every shipped example.
# ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_race(llama, llama_head):
    return record_tiny_race(llama, llama_head, "the cat sat")


def test_recorded_tiny_race_renders_every_step(tiny_race, tmp_path):
    back = Race.load(tiny_race.save(tmp_path / "tiny.json", compact=True))
    assert render_everything(back) == back.decode_steps() > 1
    for method in ("eagle2", "ddd"):
        for a, b in zip(tiny_race.traces[method].steps, back.traces[method].steps):
            assert a.accepted_path == b.accepted_path and a.draft_calls == b.draft_calls
            kept = {n.index for n in a.pool if n.status != "pruned"}
            assert kept <= {n.index for n in b.pool}


@pytest.mark.skipif(not EXAMPLES, reason="no recorded examples in assets/examples yet")
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_shipped_example_replays_without_a_model(path):
    race = Race.load(path)
    assert race.methods == ["plain", "eagle2", "ddd"] and race.title
    assert render_everything(race) > 1
    assert race.traces["plain"].text == race.traces["ddd"].text or race.traces["ddd"].sampling.get("temperature")


@pytest.mark.skipif(not EXAMPLES, reason="no recorded examples in assets/examples yet")
def test_a_shipped_example_shows_ddd_drafting_deeper_than_eagle2():
    deeper = 0
    for path in EXAMPLES:
        race = Race.load(path)
        fixed = race.traces["eagle2"].settings["draft_calls"]
        deeper += sum(s.draft_calls > fixed for s in race.traces["ddd"].steps if not s.prefill)
    assert deeper > 0
