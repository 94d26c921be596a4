"""The draft tree view: which nodes it draws, where, in which colours and with which labels."""
from __future__ import annotations

import math

from components.race import shown_nodes
from components.tree import BONUS, COLORS, GHOST_COLOR, build_graph, layout, tree_figure
from ddd.trace import Step
from tests.races import by_meta, make_trace, node, prefill, small_pool, spec_step


def test_graph_nodes_edges_and_accepted_path():
    step = spec_step()
    graph = build_graph(step, beam_width=3, show="all")
    assert graph.number_of_nodes() == 9 + 1  # the whole pool plus the bonus token
    assert graph.nodes[BONUS]["depth"] == 3 and graph.nodes[BONUS]["token_id"] == 99
    accepted_edges = {(a, b) for a, b, d in graph.edges(data=True) if d["accepted"]}
    assert accepted_edges == {(0, 1), (1, 4), (4, BONUS)}
    verified = build_graph(step, show="verified")
    assert {n for n in verified if n != BONUS} == {0, 1, 2, 4, 5, 7}
    assert shown_nodes(step.pool, dropped=0) == {0, 1, 2, 4, 5, 7}  # verified only
    assert shown_nodes(step.pool, dropped=1) == set(range(9))  # + the best dropped candidate of each level


def test_shown_nodes_keeps_parents_of_kept_candidates():
    pool = small_pool() + [node(9, " x", 3, 2, -0.1, "pruned", score=-0.05)]  # the best of level 2, under 3
    keep = shown_nodes(pool, dropped=1)
    assert 9 in keep and 3 in keep  # its dropped parent comes along, so it hangs from the root


def test_layout_levels_left_to_right_siblings_by_rank():
    graph = build_graph(spec_step(), beam_width=3, show="all")
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


def big_step(beam_width=10, calls=6, total=60) -> Step:
    """A full-size pool: beam_width at the root call, beam_width² per later call, total-1 kept."""
    pool = [node(0, "<", -1, 0, 0.0, "root")]
    beam = [0]
    for depth in range(1, calls + 1):
        children = []
        for parent in beam:
            for r in range(beam_width if depth > 1 or parent == 0 else 0):
                index = len(pool)
                score = pool[parent].score - 0.3 * (r + 1) - 0.05 * depth
                pool.append(node(index, f" t{index}", parent, depth, -0.3 * (r + 1), "pruned", rank=r, score=score))
                children.append(index)
        beam = sorted(children, key=lambda i: -pool[i].score)[:beam_width]
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
    trace = make_trace("ddd", [prefill(), step], settings={"beam_width": 10, "max_draft_calls": 11, "threshold": -0.3})
    for show in ("verified", "shown", "all"):
        fig = tree_figure(step, trace, show=show)
        fig.to_json()
    assert sum(len(t.x) for t in fig.data if t.meta in COLORS) == len(step.pool) + 1
