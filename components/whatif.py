"""The what-if view: per step, the depth a recorded run drafted beside the depth other settings would have drafted
(ddd.whatif), and the tokens each accepted; predicted tokens per second beside the measured ones."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from ddd.numbers import readable
from ddd.trace import RunTrace
from ddd.whatif import WhatIf

from .charts import METHOD_COLORS
from .plotting import figure, message_figure
from .race import METHOD_LABELS
from .tokens import plot_text, visible

TITLE = "What if"
RULE_COLORS = {"ddd": METHOD_COLORS["ddd"], "cost": "#ea580c"}
RULE_SYMBOLS = {"ddd": "circle", "cost": "diamond"}
RECORDED_COLOR = "#64748b"


def rule_text(result: WhatIf) -> str:
    """The replayed rule and its settings, as the summary and the legend name them."""
    s = result.settings
    if result.rule == "ddd":
        checks = s["check_steps"] if isinstance(s["check_steps"], str) else ",".join(map(str, s["check_steps"]))
        return f"DDD at threshold {s['threshold']:g}, checks {checks}"
    if s.get("as_priced"):
        return "Cost rule at the costs it measured, step by step"
    return (f"Cost rule at draft {readable(s['draft_cost'])}, verify base {readable(s['verify_base'])}, per token "
            f"{readable(s['verify_cost'])}")


def _rate(value: float | None) -> str:
    return "–" if value is None else readable(value)


def whatif_summary(trace: RunTrace, results: Sequence[WhatIf], own: Sequence[WhatIf] = ()) -> str:
    """One line: first each rule the race also measured, replayed on its own run (`own`: its prediction beside its
    measurement); then the replayed run's measured decode tokens/s, each rule's predicted from it, and what the
    numbers rest on."""
    if not results:
        return ""
    parts = [f"This race's {METHOD_LABELS[r.rule]} run, replayed on its own record at {rule_text(r)}: "
             f"{_rate(r.tokens_per_s)} decode tokens/s predicted beside {_rate(r.measured_tokens_per_s)} measured."
             for r in own]
    parts.append(f"Recorded {METHOD_LABELS.get(trace.method, trace.method)} run: "
                 f"{_rate(results[0].measured_tokens_per_s)} decode tokens/s measured.")
    for result in results:
        bounds = (f" ({result.bounds} step{'s' if result.bounds != 1 else ''} deeper than recorded: an upper "
                  "estimate)") if result.bounds else ""
        parts.append(f"{rule_text(result)}: {_rate(result.tokens_per_s)} predicted{bounds}.")
    if any(r.rule == "cost" and not r.calibrated for r in results):
        parts.append("No acceptance calibration was recorded: the cost rule took draft probabilities as rates.")
    if not all(r.complete for r in results):
        parts.append("This file keeps only part of each step's candidates, so other trees' counts may be a little "
                     "low.")
    return " ".join(parts)


def whatif_figure(trace: RunTrace | None, results: Sequence[WhatIf], height: int = 520,
                  why: str = "Run or load a greedy race to see what other depth settings would have done.") -> go.Figure:
    """Two panels over the steps: draft calls (the recorded run's line, each rule's markers), and draft tokens
    accepted. A bound (the rule would have drafted deeper than the record reaches) is a hollow marker: its depth
    at least, its accepted tokens at most."""
    if trace is None or not results:
        return message_figure(TITLE, why, height)
    label = METHOD_LABELS.get(trace.method, trace.method)
    texts = {s.index: plot_text(visible(s.text)[:40]) for s in trace.steps}
    recorded = results[0].steps
    xs = [s.index for s in recorded]
    data: list[dict[str, Any]] = [
        dict(type="scatter", meta="recorded-depth", x=xs, y=[s.recorded_calls for s in recorded], mode="lines+markers",
             name=f"recorded {label} depth", line=dict(color=RECORDED_COLOR, width=2, shape="hv"),
             marker=dict(size=5), hovertext=[f"step {s.index}: {s.recorded_calls} draft calls, {s.recorded_accepted} "
                                             f"accepted; emitted {texts.get(s.index, '')}" for s in recorded],
             hoverinfo="text"),
        dict(type="bar", meta="recorded-accepted", x=xs, y=[s.recorded_accepted for s in recorded],
             name=f"recorded {label} accepted", marker=dict(color=RECORDED_COLOR), opacity=0.45, xaxis="x2",
             yaxis="y2", hovertemplate="step %{x}: %{y} accepted (recorded)<extra></extra>"),
    ]
    for result in results:
        data += _rule_traces(result)
    measured = _rate(results[0].measured_tokens_per_s)
    predicted = ", ".join(f"{METHOD_LABELS[r.rule]} {_rate(r.tokens_per_s)}" for r in results)
    notes = [dict(text=text, xref="paper", yref="paper", x=0, y=y, xanchor="left", yanchor="bottom", showarrow=False,
                  font=dict(size=12))
             for text, y in (("draft calls per step (tree depth)", 1.0), ("draft tokens accepted per step", 0.38))]
    return figure(data, dict(
        title=dict(text=f"{TITLE}: {measured} decode tokens/s measured;<br>predicted {predicted}", font=dict(size=14)),
        height=height, margin=dict(l=50, r=10, t=70, b=90), hovermode="closest", barmode="group",
        legend=dict(orientation="h", y=-0.22, yanchor="top", x=0, font=dict(size=10)), annotations=notes,
        uirevision="whatif",
        xaxis=dict(anchor="y", showticklabels=False),
        yaxis=dict(anchor="x", domain=[0.5, 0.95], title=dict(text="calls"), rangemode="tozero"),
        xaxis2=dict(anchor="y2", matches="x", title=dict(text="step")),
        yaxis2=dict(anchor="x2", domain=[0.0, 0.36], title=dict(text="accepted"), rangemode="tozero"),
    ))


def _legend(text: str) -> str:
    """A legend entry in lines of at most 40 characters: plotly never wraps one, and a phone's screen clips it."""
    return "<br>".join(textwrap.wrap(text, 40))


def _rule_traces(result: WhatIf) -> list[dict[str, Any]]:
    """A rule's depth and accepted markers: exact steps filled, bounds hollow and named apart in the legend."""
    name = rule_text(result)
    color, symbol = RULE_COLORS[result.rule], RULE_SYMBOLS[result.rule]
    out = []
    for bound in (False, True):
        steps = [s for s in result.steps if s.bound == bound]
        if not steps:
            continue
        shape = dict(color=color, size=9 if bound else 7, symbol=f"{symbol}-open" if bound else symbol,
                     line=dict(color=color, width=2))
        tail = "-bound" if bound else ""
        out.append(dict(
            type="scatter", meta=f"{result.rule}-depth{tail}", x=[s.index for s in steps], y=[s.calls for s in steps],
            mode="markers", marker=shape, legendgroup=result.rule,
            name=_legend(f"{name}: depth at least (deeper than recorded)" if bound else f"{name}: depth"),
            hovertext=[f"step {s.index}: {'at least ' if bound else ''}{s.calls} draft calls, {s.verified} verified; "
                       f"recorded {s.recorded_calls}" for s in steps], hoverinfo="text"))
        out.append(dict(
            type="scatter", meta=f"{result.rule}-accepted{tail}", x=[s.index for s in steps],
            y=[s.accepted for s in steps], mode="markers", marker=shape, legendgroup=result.rule, xaxis="x2",
            yaxis="y2", name=_legend(f"{name}: accepted at most" if bound else f"{name}: accepted"),
            hovertext=[f"step {s.index}: {'at most ' if bound else ''}{s.accepted} accepted; recorded "
                       f"{s.recorded_accepted}" for s in steps], hoverinfo="text"))
    return out
