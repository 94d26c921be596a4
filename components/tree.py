"""One step's draft tree as a networkx DiGraph, and the tree figure drawn from it."""
from __future__ import annotations

import math
from typing import Any

import networkx as nx
import plotly.graph_objects as go

from ddd.numbers import readable
from ddd.settings import BEAM_WIDTH
from ddd.trace import RunTrace, Step

from .plotting import figure, message_figure
from .race import DROPPED_SHOWN, METHOD_LABELS, shown_nodes
from .tokens import plot_text, visible

BONUS = "bonus"
COLORS = {
    "root": "#475569",
    "accepted": "#16a34a",
    "bonus": "#f59e0b",
    "rejected": "#e11d48",
    "pruned": "#94a3b8",
}
# A shape per kind besides its colour, so that a reader who cannot tell green from red (about one man in twelve)
# still tells an accepted node from a rejected one; the legend shows each shape beside its name.
SYMBOLS = {
    "root": "circle",
    "accepted": "diamond",
    "bonus": "star",
    "rejected": "x",
    "pruned": "circle-open",
}
STATUS_NAMES = {
    "root": "root (last token)",
    "accepted": "accepted draft",
    "bonus": "bonus token (target)",
    "rejected": "verified, rejected",
    "pruned": "pruned by rerank",
}
BAND_COLORS = ("rgba(148,163,184,0.10)", "rgba(148,163,184,0.20)")
GHOST_COLOR = "rgba(139,92,246,0.12)"
GHOST_LINE = "rgba(139,92,246,0.55)"
LABELLED_LEVEL = 22
# What one figure draws at most, whatever a file says: the levels a screen shows (the app drafts at most 24),
# and the nodes a browser draws quickly (the app's trees verify at most 128; the whole candidate pool of its
# widest setting holds 23,585, drawn as the best of them by cumulative score).
MAX_LEVELS = 32
MAX_NODES = 2_000
GHOST_WIDTH = 0.6  # in levels
# The title sits at the top, where the toolbar shows on hover at the right: lines of at most TITLE_CHARS characters
# (about 260 px at 14 px: whole on a phone, and clear of the toolbar in a figure 420 px wide, as the app's columns
# are), broken between the title's parts; the top margin keeps room for TITLE_LINES of them, so that stepping from a
# one-line title to a two-line one never moves the tree. plotly sets a title of several lines with its first
# baseline at `y` whatever its anchor, so the title is placed by that baseline, in pixels from the top. The checks'
# H values stand above the levels, in three staggered rows NOTE_ROW_PX apart (pixels, not a share of the plot, so
# that a tall tree does not lift them into the title).
TITLE_CHARS, TITLE_LINES = 36, 2
TITLE_BASELINE, TITLE_LINE_PX, TITLE_GAP = 21, 19, 12
NOTE_ROW_PX = 13
NOTES_PX = 3 * NOTE_ROW_PX + 12
LEGEND_GAP_PX = 26  # below the level numbers under the plot
SHORT_LABEL, LONG_LABEL = 6, 14  # characters of a node's label off and on the accepted path
# The accepted path's labels sit above their nodes and the bonus token's below its star, so that the star,
# half a level after the last accepted node, never covers that node's label.
LABEL_POSITIONS = {"root": "middle left", "accepted": "top center", "bonus": "bottom center"}


def build_graph(step: Step, beam_width: int = BEAM_WIDTH.default, show: str = "shown") -> nx.DiGraph:
    """The draft tree of `step`: nodes keyed by pool index (plus "bonus"), edges parent -> child.

    show: "verified" (root and the nodes the target checked), "shown" (those, plus the best
    min(beam_width, DROPPED_SHOWN) candidates of each level the rerank dropped) or "all" (the whole pool).
    At most MAX_LEVELS levels and MAX_NODES nodes are kept (the graph's `hidden_levels` and `hidden_nodes` say
    how many were left out)."""
    graph = nx.DiGraph(step=step.index, draft_calls=step.draft_calls, max_draft_calls=step.max_draft_calls,
                       hidden_levels=0, hidden_nodes=0)
    pool = step.pool
    if not pool:
        return graph
    if show == "all":
        keep = {n.index for n in pool}
    elif show == "verified":
        keep = {n.index for n in pool if n.status != "pruned"}
    else:
        keep = shown_nodes(pool, min(beam_width, DROPPED_SHOWN))
    deepest = max(n.depth for n in pool if n.index in keep)
    within = sum(1 for n in pool if n.index in keep and n.depth <= MAX_LEVELS)
    keep = bounded(pool, keep)
    graph.graph["hidden_levels"] = max(deepest - MAX_LEVELS, 0)
    graph.graph["hidden_nodes"] = within - len(keep)
    on_path = set(step.accepted_path)
    for node in pool:
        if node.index not in keep:
            continue
        graph.add_node(node.index, token_id=node.token_id, text=node.text, depth=node.depth, logprob=node.logprob,
                       score=node.score, rank=node.rank, in_beam=node.in_beam, status=node.status,
                       on_path=node.index in on_path)
    for node in pool:
        if node.index in keep and node.parent in graph:
            graph.add_edge(node.parent, node.index, accepted=node.index in on_path and node.parent in on_path)
    if step.bonus_id is not None:
        last = step.accepted_path[-1] if step.accepted_path else 0
        if last in graph:
            graph.add_node(BONUS, token_id=step.bonus_id, text=step.bonus_text, depth=graph.nodes[last]["depth"] + 1,
                           logprob=None, score=None, rank=None, in_beam=False, status="bonus", on_path=True)
            graph.add_edge(last, BONUS, accepted=True)
    return graph


def bounded(pool: list, keep: set[int]) -> set[int]:
    """`keep` within MAX_LEVELS levels and MAX_NODES nodes: the root, the accepted nodes, then the others by
    status (verified before pruned) and cumulative score, each with its ancestors, so every node drawn hangs
    from the root."""
    shallow = [n for n in pool if n.index in keep and n.depth <= MAX_LEVELS]
    if len(shallow) <= MAX_NODES:
        return {n.index for n in shallow}
    parents = {n.index: n.parent for n in pool}
    order = sorted(shallow, key=lambda n: (n.status != "root", n.status != "accepted", n.status == "pruned", -n.score))
    chosen: set[int] = set()
    for node in order:
        chain, index = [], node.index
        while index >= 0 and index not in chosen and len(chain) <= MAX_LEVELS:
            chain.append(index)
            index = parents.get(index, -1)
        if len(chosen) + len(chain) > MAX_NODES:
            break
        chosen.update(chain)
    return chosen


def layout(graph: nx.DiGraph) -> dict[Any, tuple[float, float]]:
    """x = draft level (the bonus token sits half a level after its parent); within a level nodes are
    spread top to bottom in depth-first order, siblings by draft rank, so edges hardly cross."""
    if not graph:
        return {}
    root = next((n for n in graph if graph.nodes[n]["status"] == "root"), next(iter(graph)))
    order: list[Any] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        children = sorted((c for c in graph.successors(node) if c != BONUS),
                          key=lambda c: (graph.nodes[c]["rank"], graph.nodes[c]["score"]), reverse=True)
        stack.extend(children)
    columns: dict[int, list[Any]] = {}
    for node in order:
        columns.setdefault(graph.nodes[node]["depth"], []).append(node)
    pos: dict[Any, tuple[float, float]] = {}
    for depth, nodes in columns.items():
        count = len(nodes)
        for i, node in enumerate(nodes):
            pos[node] = (float(depth), 1 - 2 * (i + 0.5) / count)
    if BONUS in graph:
        parent = next(iter(graph.predecessors(BONUS)))
        px, py = pos[parent]
        pos[BONUS] = (px + 0.5, py)
    return pos


def _label(text: str, limit: int) -> str:
    shown = visible(text)
    return plot_text(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def _hover(data: dict[str, Any]) -> str:
    token = plot_text(visible(data["text"]))
    if data["status"] == "bonus":
        return (f"<b>{token}</b><br>token id {data['token_id']}<br>bonus token: chosen by the target itself"
                "<br>after the last accepted draft token")
    if data["status"] == "root":
        return f"<b>{token}</b><br>token id {data['token_id']}<br>root: the target's last token, not yet verified"
    return (f"<b>{token}</b><br>token id {data['token_id']}<br>draft probability {math.exp(data['logprob']):.3f}"
            f" (log {data['logprob']:.2f})<br>cumulative score {data['score']:.2f} (p = {readable(math.exp(data['score']))})"
            f"<br>rank {data['rank']} among its siblings<br>{STATUS_NAMES[data['status']]}"
            + ("<br>expanded by a draft call" if data["in_beam"] else ""))


def tree_figure(step: Step | None, trace: RunTrace | None = None, *, show: str = "shown", height: int | None = None,
                title: str | None = None) -> go.Figure:
    """The draft tree of one step: levels left to right in bands, each node coloured and shaped by what became of it."""
    method = METHOD_LABELS.get(trace.method, trace.method) if trace is not None else "Draft"
    fixed = height or 480
    if step is None:
        return message_figure(title or f"{method} draft tree", "No step to show yet.", fixed)
    head = title or f"{method} · step {step.index}"
    if step.prefill:
        return message_figure(head, "Prefill: the target read the prompt and produced the first token.<br>"
                               "No draft tree in this step.", fixed)
    if not step.pool:
        return message_figure(head, "This step was not recorded with its draft tree.", fixed)
    width = int((trace.settings.get("beam_width") if trace is not None else None) or BEAM_WIDTH.default)
    graph = build_graph(step, width, show)
    pos = layout(graph)
    levels = min(max(step.draft_calls, max((d for _, d in graph.nodes(data="depth")), default=0)), MAX_LEVELS)
    ghost = step.max_draft_calls > step.draft_calls and step.draft_calls <= MAX_LEVELS
    shapes, notes = _bands(step, levels)
    checks = _check_notes(step, levels) + _hidden_note(graph, step)
    per_level: dict[float, int] = {}
    for x, _ in pos.values():
        per_level[x] = per_level.get(x, 0) + 1
    if height is None:  # tall enough for the fullest level, within reason
        height = int(min(max(14 * max(per_level.values()) + 150, 440), 900))
    traces = _edge_traces(graph, pos) + _node_traces(graph, pos, per_level)
    if ghost:
        why = "the context was full" if step.context_cut else f"{method} stopped"
        traces.append(dict(type="scatter", meta="ghost", x=[None], y=[None], mode="markers",
                         name=f"levels not drafted ({why})",
                         marker=dict(symbol="square", size=12, color=GHOST_COLOR, line=dict(color=GHOST_LINE, width=1))))
    last = levels + (0.7 + GHOST_WIDTH if ghost else 0.7)
    lines = wrapped([head, f"{step.draft_calls} draft call{'s' if step.draft_calls != 1 else ''}",
                     f"{step.accepted} accepted"])
    top = TITLE_BASELINE + TITLE_LINE_PX * (max(len(lines), TITLE_LINES) - 1) + TITLE_GAP + (NOTES_PX if checks else 0)
    bottom = 40
    return figure(traces, dict(
        title=dict(text="<br>".join(lines), font=dict(size=14), y=1 - TITLE_BASELINE / height, yanchor="bottom"),
        height=height, shapes=shapes, annotations=notes + checks,
        margin=dict(l=10, r=10, t=top, b=bottom), hovermode="closest",
        legend=dict(orientation="h", x=0, xanchor="left", y=-LEGEND_GAP_PX / max(height - top - bottom, 1),
                    yanchor="top", font=dict(size=10)),
        xaxis=dict(range=[-1.0, last], tickmode="array", tickvals=list(range(0, levels + 1)),
                   ticktext=["root"] + [str(i) for i in range(1, levels + 1)], title=None, showgrid=False,
                   zeroline=False),
        yaxis=dict(visible=False, range=[-1.08, 1.08]),
        uirevision=f"tree-{trace.method if trace else ''}",
    ))


def wrapped(parts: list[str], width: int = TITLE_CHARS) -> list[str]:
    """The title's parts (a part may itself hold " · ") as lines of at most `width` characters, broken only between
    parts, so that a narrow figure shows the whole title and its first line keeps clear of plotly's toolbar."""
    pieces = [piece for part in parts for piece in part.split(" · ")]
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 3 + len(piece) <= width:
            lines[-1] += " · " + piece
        else:
            lines.append(piece)
    return lines


def _hidden_note(graph: nx.DiGraph, step: Step) -> list[dict]:
    """What the figure left out, said on the figure: levels past MAX_LEVELS, candidates past MAX_NODES."""
    parts = []
    if graph.graph["hidden_levels"]:
        parts.append(f"levels {MAX_LEVELS + 1}–{MAX_LEVELS + graph.graph['hidden_levels']} not drawn")
    if graph.graph["hidden_nodes"]:
        drawn = graph.number_of_nodes() - (BONUS in graph)
        parts.append(f"the best {drawn:,} of {drawn + graph.graph['hidden_nodes']:,} candidates drawn")
    if not parts:
        return []
    return [dict(x=1, y=-0.02, xref="paper", yref="paper", xanchor="right", yanchor="top", showarrow=False,
                 text="; ".join(parts), font=dict(size=11, color="#b45309"), name="hidden")]


def _bands(step: Step, levels: int) -> tuple[list[dict], list[dict]]:
    """A band per drafted level (at most MAX_LEVELS), and one narrow band for the levels DDD chose not to draft
    (drawn a column each, they took most of the width), with its note."""
    shapes = [dict(type="rect", xref="x", yref="paper", x0=level - 0.5, x1=level + 0.5, y0=0, y1=1,
                   fillcolor=BAND_COLORS[level % 2], line=dict(width=0), layer="below") for level in range(1, levels + 1)]
    if step.max_draft_calls <= step.draft_calls or step.draft_calls > MAX_LEVELS:
        return shapes, []
    band = levels + 0.55
    shapes.append(dict(type="rect", xref="x", yref="paper", x0=band, x1=band + GHOST_WIDTH, y0=0, y1=1,
                       fillcolor=GHOST_COLOR, line=dict(width=1, color=GHOST_LINE, dash="dot"), layer="below"))
    skipped = (f"level {step.max_draft_calls}" if step.max_draft_calls == step.draft_calls + 1
               else f"levels {step.draft_calls + 1}–{step.max_draft_calls}")
    return shapes, [dict(x=band + GHOST_WIDTH / 2, y=0.5, xref="x", yref="paper", text=f"{skipped} not drafted",
                         textangle=-90, showarrow=False, font=dict(size=11, color="rgba(109,40,217,0.8)"))]


def _check_notes(step: Step, levels: int) -> list[dict]:
    """H at each check above its level (of the levels drawn), on three staggered rows so that neighbouring values
    never meet."""
    checks = sorted((c for c in step.checks if c.call <= levels), key=lambda c: c.call)
    if not checks:
        return []
    notes = [dict(x=0, y=1.0, xref="x", yref="paper", yanchor="bottom", showarrow=False, text="H:",
                  font=dict(size=10, color="#475569"))]
    for row, check in enumerate(checks):
        notes.append(dict(x=check.call, y=1.0, yshift=NOTE_ROW_PX * (row % 3), xref="x", yref="paper", yanchor="bottom",
                          showarrow=False, text=f"{check.confidence:.2f}" + (" stop" if check.stop else ""),
                          font=dict(size=10, color="#dc2626" if check.stop else "#15803d")))
    return notes


def _edge_traces(graph: nx.DiGraph, pos: dict) -> list[dict]:
    """One trace for the accepted path, one for the rest (None breaks the polyline between edges)."""
    traces = []
    for accepted in (False, True):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for a, b, edge in graph.edges(data=True):
            if bool(edge.get("accepted")) == accepted:
                (x0, y0), (x1, y1) = pos[a], pos[b]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        if xs:
            traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                               line=dict(color=COLORS["accepted"] if accepted else "rgba(100,116,139,0.35)",
                                         width=3 if accepted else 1)))
    return traces


def _node_traces(graph: nx.DiGraph, pos: dict, per_level: dict[float, int]) -> list[dict]:
    """A trace per node status. Labels only where they fit: always on the root, the accepted path and the
    bonus token; elsewhere only in levels of at most LABELLED_LEVEL nodes (every node keeps its hover text)."""
    traces = []
    for status in ("pruned", "rejected", "root", "accepted", "bonus"):
        nodes = [n for n, s in graph.nodes(data="status") if s == status]
        if not nodes:
            continue
        always = status in ("root", "accepted", "bonus")
        # Token text is escaped (plotly draws a subset of HTML in labels) and cut short off the accepted path,
        # where labels share the width with their neighbours; the hover text keeps it whole.
        labels = [_label(graph.nodes[n]["text"], LONG_LABEL if always else SHORT_LABEL)
                  if always or per_level[pos[n][0]] <= LABELLED_LEVEL else "" for n in nodes]
        traces.append(dict(
            type="scatter", meta=status, x=[pos[n][0] for n in nodes], y=[pos[n][1] for n in nodes],
            mode="markers+text", text=labels, textposition=LABEL_POSITIONS.get(status, "middle right"),
            textfont=dict(size=12 if always else 10, color="#0f172a" if status != "pruned" else "#64748b"),
            marker=dict(color=COLORS[status], size=15 if status == "bonus" else 12 if always else 9,
                        symbol=SYMBOLS[status], line=dict(width=1.5 if status == "pruned" else 0.5,
                                                          color=COLORS[status] if status == "pruned" else "white")),
            hovertext=[_hover(graph.nodes[n]) for n in nodes], hoverinfo="text",
            name=f"{STATUS_NAMES[status]} ({len(nodes)})",
        ))
    return traces
