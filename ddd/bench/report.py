"""Rendering a benchmark report (the dict `ddd.bench.summary` builds) as tables, Markdown and an offline HTML page
with plotly figures. Nothing here runs a model."""
from __future__ import annotations

import html
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from ddd.trace import CHAIN_ENDS


def _fmt(value: Any, kind: str = "f2") -> str:
    if value is None:
        return ""
    if kind == "pct":
        return f"{100 * value:.1f}"
    if kind == "int":
        return f"{value:.0f}"
    if kind == "f1":
        return f"{value:.1f}"
    if kind == "x":
        return f"{value:.2f}x"
    return f"{value:.2f}"


def _ratio(value: float | None, reference: float | None) -> str:
    return _fmt(value / reference, "x") if value is not None and reference else ""


OVERALL_COLUMNS = (
    ("tokens/s", "tokens_per_s", "f2"), ("speedup", "speedup", "x"), ("tau", "tau", "f2"),
    ("mean draft depth", "mean_draft_depth", "f2"), ("acceptance %", "acceptance_rate", "pct"),
    ("draft %", "draft_share", "pct"), ("verify %", "verify_share", "pct"), ("other %", "other_share", "pct"),
    ("target forwards", "target_forwards", "f1"), ("new tokens", "new_tokens", "f1"), ("prefill ms", "prefill_ms", "f1"),
)


CHAIN_END_LABELS = {"tree_end": "tree ended there", "pruned": "drafted, pruned",
                    "outside_vocab": "outside draft vocabulary", "not_drafted": "not among the drafts"}


def tables(report: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, shared by the Markdown and HTML writers."""
    out = []
    labels, cats = report["methods"], report["categories"]
    out.append(("All questions (median tokens/s and speedup over questions; tau, acceptance and time shares "
                "pooled over steps; forwards and tokens per question)",
                ["method", *[c[0] for c in OVERALL_COLUMNS]],
                [[label, *[_fmt(report["overall"][label].get(key), kind) for _, key, kind in OVERALL_COLUMNS]]
                 for label in labels]))
    for title, key, kind in (("Speedup vs plain by category (median of per-question ratios)", "speedup", "x"),
                             ("tokens/s by category (median)", "tokens_per_s", "f2"),
                             ("tau by category", "tau", "f2"),
                             ("Mean draft depth by category", "mean_draft_depth", "f2")):
        shown = [label for label in labels if report["overall"][label].get(key) is not None]
        if not shown:
            continue
        body = [[cat, *[_fmt(report["by_category"][cat][label].get(key), kind) for label in shown]] for cat in cats]
        body.append(["**all**", *[_fmt(report["overall"][label].get(key), kind) for label in shown]])
        out.append((title, ["category", *shown], body))
    ended = [label for label in labels
             if report["overall"][label].get(f"chain_end_{CHAIN_ENDS[0]}_share") is not None]
    if ended:
        out.append(("Where the accepted chains ended: the target's next token after the last accepted node "
                    "(% of speculative steps)",
                    ["method", *[CHAIN_END_LABELS[r] for r in CHAIN_ENDS]],
                    [[label, *[_fmt(report["overall"][label].get(f"chain_end_{r}_share"), "pct") for r in CHAIN_ENDS]]
                     for label in ended]))
    counted = [label for label in labels if report["overall"][label].get("ops_per_token") is not None]
    if counted:
        plain = report["overall"].get("plain", {})
        per_token, per_step = plain.get("ops_per_token"), plain.get("ops_per_step")
        out.append(("Operations dispatched (ddd/ops.py; the same on any machine): per generated token and per decode "
                    "step, pooled over steps; a step's drafting per draft call; the rest of a step (the target's "
                    "forward over the tree, acceptance, cache, record) against a plain step",
                    ["method", "ops per token", "vs plain", "ops per step", "per draft call", "rest per step",
                     "rest vs a plain step"],
                    [[label, _fmt(o["ops_per_token"], "int"), _ratio(o["ops_per_token"], per_token),
                      _fmt(o["ops_per_step"], "int"), _fmt(o["ops_per_draft_call"], "f1"),
                      _fmt(o["ops_rest_per_step"], "int"), _ratio(o["ops_rest_per_step"], per_step)]
                     for label in counted for o in [report["overall"][label]]]))
    spread = {label: report["overall"][label].get("depth_shares") for label in labels}
    spread = {label: shares for label, shares in spread.items() if shares}
    if spread:
        depths = sorted({d for shares in spread.values() for d in shares}, key=int)
        out.append(("Depth distribution: draft calls per speculative step (% of steps)", ["method", *depths],
                    [[label, *[_fmt(shares.get(d), "pct") if d in shares else "" for d in depths]]
                     for label, shares in spread.items()]))
    sweep = report.get("sweep")
    if sweep:
        out.append((f"Sweep of {sweep['method']}.{sweep['setting']} (plain: "
                    f"{_fmt(sweep['reference_tokens_per_s'])} tokens/s)",
                    [sweep["setting"], "tokens/s", "speedup", "tau", "mean draft depth", "acceptance %",
                     "target forwards", "draft %", "verify %"],
                    [[p["value"], _fmt(p["tokens_per_s"]), _fmt(p["speedup"], "x"), _fmt(p["tau"]),
                      _fmt(p["mean_draft_depth"]), _fmt(p["acceptance_rate"], "pct"), _fmt(p["target_forwards"], "f1"),
                      _fmt(p["draft_share"], "pct"), _fmt(p["verify_share"], "pct")] for p in sweep["points"]]))
    mism = report["identity"]["mismatches"]
    if mism:
        out.append(("Greedy outputs that differ from plain",
                    ["question", "category", "method", "first different token", "tokens (plain)", "tokens"],
                    [[m["question_id"], m["category"], m["method"], str(m["first_difference"]),
                      str(m["reference_tokens"]), str(m["tokens"])] for m in mism]))
    return out


def identity_line(report: dict[str, Any]) -> str:
    ident = report["identity"]
    if not ident["checked"]:
        return f"Output identity: not checked ({ident['reason']})."
    if not ident["compared"]:
        return "Output identity: only plain ran, nothing to compare."
    n = report["settings"]["questions"]
    if not ident["mismatches"]:
        return (f"Output identity: all {n} greedy outputs of {', '.join(ident['compared'])} equal plain's, "
                "token for token.")
    bad = OrderedDict.fromkeys(m["method"] for m in ident["mismatches"])
    return (f"Output identity: {len(ident['mismatches'])} output(s) differ from plain's ({', '.join(bad)}); "
            "listed below.")


def setting_lines(report: dict[str, Any]) -> list[str]:
    s, m = report["settings"], report.get("machine", {})
    lines = [
        f"questions: {s['questions']} from {s['questions_file']}" + (f" (limit {s['limit']})" if s["limit"] else ""),
        f"model: {s.get('model')}; head: {s.get('head')}; precision: {m.get('precision')}; device: {m.get('device')}"
        + (f" ({m['gpu']})" if m.get("gpu") else ""),
        f"max_new_tokens: {s['max_new_tokens']}; repeats: {s['repeats']}; "
        + ("operations counted (speeds slowed by counting); " if s.get("count_ops") else "")
        + f"temperature: {s['sampling']['temperature']} (seed {s['sampling']['seed']})",
        f"machine: {m.get('cpu_model')} ({m.get('cpu_count')} CPUs, torch threads {m.get('torch_threads')}, "
        f"load average at start {m.get('load_average_at_start')}); torch {m.get('torch')}, "
        f"transformers {m.get('transformers')}; {m.get('platform')}",
        f"run: {s.get('started')} to {s.get('finished')}" + (" (interrupted)" if report.get("interrupted") else ""),
    ]
    for run in s["runs"]:
        lines.append(f"{run['label']}: " + (json.dumps(run["settings"]) if run["settings"] else "(no settings)"))
    for item in report.get("skipped", []):
        lines.append(f"skipped {item['question_id']} ({item['category']}): {item['reason']}")
    return lines


def write_markdown(report: dict[str, Any], path: Path) -> Path:
    parts = ["# Speed benchmark", "", identity_line(report), ""]
    for title, header, body in tables(report):
        parts += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        parts += ["| " + " | ".join(row) + " |" for row in body]
        parts.append("")
    parts += ["## Settings and machine", ""] + [f"- {line}" for line in setting_lines(report)] + [""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def figures(report: dict[str, Any]) -> list[Any]:
    labels, cats = report["methods"], report["categories"]
    groups = ["all", *cats]
    palette = qualitative.Plotly
    color = {label: palette[i % len(palette)] for i, label in enumerate(labels)}

    def value(label, group, key):
        source = report["overall"][label] if group == "all" else report["by_category"][group][label]
        return source.get(key)

    figs = []
    for key, title, ytitle in (("speedup", "Speedup vs plain (median of per-question ratios)", "speedup (x)"),
                               ("tokens_per_s", "tokens/s (median over questions)", "tokens/s"),
                               ("tau", "tau: tokens per target forward", "tau"),
                               ("mean_draft_depth", "Mean draft depth (draft calls per step)", "draft calls")):
        fig = go.Figure()
        for label in labels:
            if key == "speedup" and label == report["settings"]["reference"]:
                continue
            ys = [value(label, g, key) for g in groups]
            if all(y is None for y in ys):
                continue
            fig.add_bar(name=label, x=groups, y=ys, marker_color=color[label], hovertemplate="%{x}<br>" + label + ": %{y:.3f}<extra></extra>")
        if not fig.data:
            continue
        if key == "speedup":
            fig.add_hline(y=1, line_dash="dash", line_color="gray", annotation_text="plain")
        fig.update_layout(title=title, barmode="group", yaxis_title=ytitle, xaxis_title="category",
                          legend_title="method", height=430)
        figs.append(fig)

    per_q = go.Figure()
    for label in labels:
        if label == report["settings"]["reference"]:
            continue
        rows = [r for r in report["rows"] if r["method"] == label and r["speedup"] is not None]
        if rows:
            per_q.add_box(name=label, y=[r["speedup"] for r in rows], boxpoints="all", jitter=0.4, pointpos=0,
                          marker_color=color[label],
                          text=[f"{r['question_id']} ({r['category']})" for r in rows])
    if per_q.data:
        per_q.add_hline(y=1, line_dash="dash", line_color="gray")
        per_q.update_layout(title="Per-question speedup vs plain", yaxis_title="speedup (x)", showlegend=False,
                            height=430)
        figs.append(per_q)

    shown = [label for label in labels if report["overall"][label].get("draft_share") is not None]
    if shown:
        shares = go.Figure()
        for part in ("draft", "verify", "other"):
            shares.add_bar(name=part, x=shown, y=[100 * report["overall"][label][f"{part}_share"] for label in shown],
                           hovertemplate="%{x}: %{y:.1f}%<extra>" + part + "</extra>")
        shares.update_layout(title="Where decode time goes (share of decode-step time, prefill excluded)",
                             barmode="stack", yaxis_title="% of decode time", height=430)
        figs.append(shares)

    sweep = report.get("sweep")
    if sweep and sweep["points"]:
        points = sweep["points"]
        try:
            xs: list[Any] = [float(p["value"]) for p in points]
            order = sorted(range(len(points)), key=lambda i: xs[i])
        except ValueError:
            xs, order = [p["value"] for p in points], list(range(len(points)))
        xs = [xs[i] for i in order]
        curve = make_subplots(rows=1, cols=3, subplot_titles=("speedup vs plain", "tau", "tokens/s"))
        for col, key in enumerate(("speedup", "tau", "tokens_per_s"), 1):
            curve.add_scatter(x=xs, y=[points[i][key] for i in order], mode="lines+markers", name=key,
                              row=1, col=col)
            curve.update_xaxes(title_text=sweep["setting"], row=1, col=col)
        curve.add_hline(y=1, line_dash="dash", line_color="gray", row=1, col=1)
        if sweep.get("reference_tokens_per_s"):
            curve.add_hline(y=sweep["reference_tokens_per_s"], line_dash="dash", line_color="gray", row=1, col=3)
        curve.update_layout(title=f"Sweep of {sweep['method']}.{sweep['setting']}", showlegend=False, height=430)
        figs.append(curve)
    return figs


def write_html(report: dict[str, Any], path: Path) -> Path:
    esc = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>Speed benchmark</title>",
             "<style>body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1300px}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}"
             "li{margin:.15em 0}</style></head><body>",
             "<h1>Speed benchmark</h1>", f"<p>{esc(identity_line(report))}</p>"]
    for i, fig in enumerate(figures(report)):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    for title, header, body in tables(report):
        parts.append(f"<h2>{esc(title)}</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
        for row in body:
            parts.append("<tr>" + "".join(f"<td>{esc(c.replace('**', ''))}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Settings and machine</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in setting_lines(report)) + "</ul>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def write_outputs(report: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    return {"json": json_path, "markdown": write_markdown(report, out / "results.md"),
            "html": write_html(report, out / "report.html")}
