"""Charts over whole runs: depth & confidence per step, the race timeline, and the summary table."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from ddd.numbers import readable
from ddd.trace import RunTrace

from .plotting import figure, message_figure
from .race import METHOD_LABELS, TREE_METHODS, Race
from .tokens import plot_text, visible
from .verdict import decode_tokens_per_s, shares_lead, verdict

METHOD_COLORS = {"plain": "#64748b", "eagle": "#0ea5e9", "eagle2": "#2563eb", "ddd": "#9333ea", "cost": "#0d9488"}
# EAGLE-2's purple-blue and DDD's purple look alike to a deuteranope (CIELAB distance about 5 once simulated), so
# each method's depth line and accepted bars carry a shape of their own too: EAGLE-2 a thick stepped line with no
# markers, DDD circles, the cost rule diamonds; the bars a fill pattern per method.
METHOD_SYMBOLS = {"ddd": "circle", "cost": "diamond"}
METHOD_PATTERNS = {"eagle2": "", "ddd": "/", "cost": "."}
PHASE_COLORS = {"draft": "#60a5fa", "verify": "#f472b6", "other": "#cbd5e1"}
LEGEND_GAP_PX = 24  # from the plot's bottom edge to a legend under it: room for the tick labels
PANEL_GAP_PX = 48  # between the timeline's panels: the upper one's tick labels, then the lower one's title
SUMMARY_HEADERS = ["method", "tokens", "time (s)", "decode tokens/s", "speedup vs plain", "tau", "target forwards",
                   "mean draft depth", "acceptance rate", "prefill ms", "draft ms/step", "verify ms/step",
                   "other ms/step"]


def _decode_steps(trace: RunTrace | None):
    return [s for s in trace.steps if not s.prefill] if trace is not None else []


def depth_figure(race: Race | None, current: int | None = None, height: int = 600) -> go.Figure:
    """Per step: DDD's (and the cost rule's) chosen depth vs EAGLE-2's fixed depth, H at each check vs the threshold,
    tokens per step."""
    runs = {m: race.get(m) if race else None for m in TREE_METHODS}
    ddd = runs["ddd"]
    if not any(_decode_steps(trace) for trace in runs.values()):
        return message_figure("Depth & confidence", "Run or load a race to see draft depth and confidence per step.", height)
    # Three stacked panels sharing the step axis: x/y (depth), x2/y2 (confidence), x3/y3 (tokens).
    domains = {"": (0.66, 1.0), "2": (0.31, 0.59), "3": (0.0, 0.22)}
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for method, trace in runs.items():
        steps = _decode_steps(trace)
        if not steps:
            continue
        label = METHOD_LABELS[method]
        fixed = method == "eagle2"
        data.append(dict(
            type="scatter", meta=f"{method}-depth", x=[s.index for s in steps], y=[s.draft_calls for s in steps],
            name=f"{label} depth", mode="lines" if fixed else "lines+markers", legendgroup=method,
            line=dict(color=METHOD_COLORS[method], shape="hv" if fixed else "linear", width=3 if fixed else 2),
            marker=dict(size=7, symbol=METHOD_SYMBOLS.get(method, "circle")),
            hovertemplate=f"{label} step %{{x}}: %{{y}} draft calls<extra></extra>"))
        data.append(dict(
            type="bar", meta=f"{method}-accepted", x=[s.index for s in steps], y=[s.accepted for s in steps],
            name=f"{label} accepted", legendgroup=method, opacity=0.75,
            marker=dict(color=METHOD_COLORS[method], pattern=dict(shape=METHOD_PATTERNS.get(method, ""))),
            xaxis="x3", yaxis="y3", hovertemplate=f"{label} step %{{x}}: %{{y}} draft tokens accepted<extra></extra>"))
    steps = _decode_steps(ddd)
    if steps:
        limit = max(s.max_draft_calls for s in steps)
        shapes.append(dict(type="line", xref="x domain", yref="y", x0=0, x1=1, y0=limit, y1=limit,
                           line=dict(color="#a78bfa", dash="dot", width=1)))
        notes.append(dict(xref="x domain", yref="y", x=0, y=limit, yanchor="bottom", xanchor="left", showarrow=False,
                          text=f"DDD max {limit}", font=dict(size=10, color="#7c3aed")))
        for stop in (False, True):
            xs, ys, texts = [], [], []
            for s in steps:
                for check in s.checks:
                    if check.stop == stop:
                        xs.append(s.index)
                        ys.append(check.confidence)
                        texts.append(f"step {s.index}, after draft call {check.call}: H = {check.confidence:.3f}"
                                     f" → {'stop' if stop else 'draft deeper'}")
            if xs:
                data.append(dict(type="scatter", meta="stop" if stop else "go-on", x=xs, y=ys, mode="markers",
                                 name="H → stop" if stop else "H → go deeper", xaxis="x2", yaxis="y2",
                                 marker=dict(color="#dc2626" if stop else "#16a34a", size=8,
                                             symbol="x" if stop else "circle"),
                                 hovertext=texts, hoverinfo="text"))
        threshold = ddd.settings.get("threshold")
        if threshold is not None:
            threshold = float(threshold)
            xs = [s.index for s in steps]
            data.append(dict(type="scatter", meta="threshold", x=[min(xs), max(xs)], y=[threshold, threshold],
                             mode="lines", name=f"threshold {threshold:g}", xaxis="x2", yaxis="y2",
                             line=dict(color="#dc2626", dash="dash", width=1.5), hoverinfo="skip"))
    if current is not None:
        shapes.append(dict(type="line", name="current", xref="x", yref="paper", x0=current, x1=current, y0=0, y1=1,
                           line=dict(color="#f59e0b", width=2)))
    titles = ("draft calls per step (tree depth)", "DDD confidence H at each check",
              "draft tokens accepted per step (+1 bonus each)")  # short: a phone shows it whole
    for (suffix, (low, high)), text in zip(domains.items(), titles):
        notes.append(dict(text=text, xref="paper", yref="paper", x=0, y=high, xanchor="left", yanchor="bottom",
                          showarrow=False, font=dict(size=12)))
    layout: dict[str, Any] = dict(
        height=height, barmode="group", margin=dict(l=50, r=10, t=60, b=90), hovermode="closest",
        legend=dict(orientation="h", y=-0.2, yanchor="top", x=0, font=dict(size=10)), shapes=shapes, annotations=notes,
        uirevision="depth")
    axis_titles = {"": "calls", "2": "H", "3": "accepted"}
    for suffix, (low, high) in domains.items():
        axis: dict[str, Any] = dict(anchor=f"y{suffix}", showticklabels=suffix == "3")
        if suffix:
            axis["matches"] = "x"
        if suffix == "3":
            axis["title"] = dict(text="step")
        layout[f"xaxis{suffix}"] = axis
        layout[f"yaxis{suffix}"] = dict(anchor=f"x{suffix}", domain=[low, high], title=dict(text=axis_titles[suffix]),
                                        rangemode="tozero" if suffix != "2" else "normal")
    return figure(data, layout)


def timeline_figure(race: Race | None, height: int = 420) -> go.Figure:
    """Each method's steps on a shared clock (every run starts at 0 s): draft / verify / other time per step,
    a dot per step sized by its tokens, and below it the total time split per method."""
    methods = race.methods if race else []
    if not methods:
        return message_figure("Timeline", "Run or load a race to see the timeline.", height)
    labels = [METHOD_LABELS[m] for m in methods]
    data: list[dict[str, Any]] = []
    phases = {p: dict(x=[], base=[], y=[], text=[]) for p in PHASE_COLORS}
    marks: dict[str, list[Any]] = dict(x=[], y=[], size=[], text=[], color=[])
    for method, label in zip(methods, labels):
        clock = 0.0
        for step in race.traces[method].steps:
            for phase, ms in (("draft", step.draft_ms), ("verify", step.verify_ms), ("other", step.other_ms)):
                if ms <= 0:
                    continue
                phases[phase]["x"].append(ms / 1000)
                phases[phase]["base"].append(clock)
                phases[phase]["y"].append(label)
                phases[phase]["text"].append(f"{label} step {step.index}: {phase} {ms:.1f} ms")
                clock += ms / 1000
            marks["x"].append(clock)
            marks["y"].append(label)
            marks["size"].append(5 + 2 * min(len(step.token_ids), 10))
            marks["color"].append(METHOD_COLORS[method])
            marks["text"].append(f"{label} step {step.index} ends at {clock:.2f} s: {len(step.token_ids)} token(s) "
                                 + plot_text(visible(step.text)[:60]))
    for phase, values in phases.items():
        data.append(dict(type="bar", meta=f"{phase}-steps", orientation="h", name=phase, legendgroup=phase,
                         marker=dict(color=PHASE_COLORS[phase], line=dict(width=0.3, color="white")),
                         hovertext=values.pop("text"), hoverinfo="text", **values))
    data.append(dict(type="scatter", meta="tokens", x=marks["x"], y=marks["y"], mode="markers", name="tokens out",
                     marker=dict(size=marks["size"], color=marks["color"], line=dict(width=1, color="white")),
                     hovertext=marks["text"], hoverinfo="text"))
    for phase in PHASE_COLORS:
        totals = [sum(getattr(s, f"{phase}_ms") for s in race.traces[m].steps) / 1000 for m in methods]
        data.append(dict(type="bar", meta=f"{phase}-total", x=totals, y=labels, orientation="h", name=phase,
                         showlegend=False, legendgroup=phase, xaxis="x2", yaxis="y2",
                         marker=dict(color=PHASE_COLORS[phase]),
                         hovertemplate=f"%{{y}}: {phase} %{{x:.2f}} s<extra></extra>"))
    top, bottom = 40, 30
    # The gap between the panels is kept in pixels: as a share of the plot, a short figure set the lower panel's
    # title on the upper panel's tick labels.
    gap = min(PANEL_GAP_PX / max(height - top - bottom, 1), 0.3)
    lower = 0.4 * (1 - gap)  # the lower panel's top; the upper panel takes the rest above the gap
    notes = [dict(text=text, xref="paper", yref="paper", x=0, y=y, xanchor="left", yanchor="bottom", showarrow=False,
                  font=dict(size=12))
             for text, y in (("each step on a shared wall clock (s)", 1.0), ("where the time went (s)", lower))]
    # The legend goes under the plot: at its top right plotly's toolbar covered it, and on a narrow screen its
    # rows wrapped down onto the first panel's title.
    return figure(data, dict(
        height=height, barmode="stack", margin=dict(l=70, r=10, t=top, b=bottom), bargap=0.35, uirevision="timeline",
        legend=dict(orientation="h", x=0, xanchor="left", y=-LEGEND_GAP_PX / max(height - top - bottom, 1),
                    yanchor="top", font=dict(size=10)), annotations=notes,
        xaxis=dict(anchor="y", rangemode="tozero"),
        yaxis=dict(anchor="x", domain=[lower + gap, 1.0], autorange="reversed", categoryorder="array",
                   categoryarray=labels),
        xaxis2=dict(anchor="y2", rangemode="tozero"),
        yaxis2=dict(anchor="x2", domain=[0.0, lower], autorange="reversed", categoryorder="array",
                    categoryarray=labels),
    ))


def summary_rows(race: Race | None) -> list[list[Any]]:
    """One row per method (columns SUMMARY_HEADERS): decode tokens/s and the speedup are the headline's figures
    (components.verdict: the prefill apart, each step at the median time of its shape); time (s) is the wall time
    of the whole answer, the prefill included."""
    if race is None:
        return []
    result = verdict(race.traces)
    standings = {s.name: s for s in result.standings} if result else {}
    rows = []
    for method in race.methods:
        s = race.summary(method)
        rate = decode_tokens_per_s(race.traces[method].steps)
        standing = standings.get(method)
        speed = "–" if standing is None else f"{standing.speedup:.2f}×" + (
            " (too close to call)" if standing.tie and method != result.reference else "") + (
            " (shares the lead)" if shares_lead(result, method) else "")
        speculative = method != "plain"
        rows.append([
            METHOD_LABELS[method], s.get("new_tokens", 0), round(s.get("total_ms", 0.0) / 1000, 2),
            readable(rate) if rate else "–",
            speed, round(s.get("tau", 0.0), 2), s.get("target_forwards", 0),
            round(s.get("mean_draft_depth", 0.0), 2) if speculative else "–",
            f"{s.get('acceptance_rate', 0.0):.0%}" if speculative else "–", round(s.get("prefill_ms", 0.0)),
            round(s.get("draft_ms_per_step", 0.0), 1), round(s.get("verify_ms_per_step", 0.0), 1),
            round(s.get("other_ms_per_step", 0.0), 1),
        ])
    return rows
