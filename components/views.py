"""Every view of a race at once, and of one step: what the app's callbacks hand to its components."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ddd.numbers import readable
from ddd.settings import COST_SETTINGS, METHOD_DECLARATIONS, PIN_COSTS, Setting
from ddd.trace import RunTrace

from .about import about_markdown
from .answer import answer_html, counters_html
from .charts import SUMMARY_HEADERS, depth_figure, summary_rows, timeline_figure
from .narration import narrate
from .race import COLUMN_METHODS, METHOD_LABELS, RACE_METHODS, TREE_METHODS, Race
from .tokens import escape, isolated
from .tree import tree_figure
from .verdict import headline_html

# What the cost rule prices a step with, said together as the costs it used (views' cost_words).
COST_NAMES = {PIN_COSTS.name, *(s.name for s in COST_SETTINGS)}

# The step-through's play button, in the app and on a saved or static page.
PLAY, PAUSE = "\u25b6 Play", "\u275a\u275a Pause"

CSS = """
.answer { white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px;
  line-height: 1.55; min-height: 140px; max-height: 360px; overflow-y: auto; padding: 8px 10px;
  border: 1px solid #e2e8f0; border-radius: 8px; background: #fff; color: #0f172a; }
.answer.empty { color: #94a3b8; font-style: italic; }
.small .answer { min-height: 48px; max-height: 150px; font-size: 12px; }
.tok-draft { background: #dcfce7; border-radius: 3px; }
.tok-target { background: #fef3c7; border-radius: 3px; }
.step.cur { outline: 2px solid #f59e0b; border-radius: 3px; background: #fff7ed; }
.cursor { color: #9333ea; animation: blink 1s steps(1) infinite; }
@keyframes blink { 50% { opacity: 0; } }
.counters { display: flex; flex-wrap: wrap; gap: 4px; align-items: center; font-size: 12px; margin-bottom: 4px;
  min-height: 68px; align-content: flex-start; }
.counters b { margin-right: 6px; font-size: 14px; }
.badge { background: #f1f5f9; border-radius: 10px; padding: 1px 8px; white-space: nowrap; }
.badge .k { color: #475569; }
.badge .v { font-weight: 600; color: #0f172a; font-variant-numeric: tabular-nums; }
.status { color: #7c3aed; margin-left: 6px; }
.legend-line { font-size: 12px; color: #475569; }
.legend-line .tok-draft, .legend-line .tok-target { padding: 0 4px; }
.note-box { border-left: 4px solid #f59e0b; background: #fffbeb; padding: 6px 10px; border-radius: 4px; }
.error-box { border-left: 4px solid #dc2626; background: #fef2f2; padding: 6px 10px; border-radius: 4px; }
.race-info { font-size: 13px; }
#intro p { font-size: 14px; margin: 0; }
.headline { border-left: 5px solid #7c3aed; background: #f5f3ff; padding: 8px 12px; border-radius: 6px;
  font-size: 16px; color: #1e1b4b; }
.headline.tie { border-left-color: #64748b; background: #f8fafc; color: #0f172a; }
.headline.empty { font-size: 13px; color: #475569; background: #f8fafc; border-left-color: #cbd5e1; }
.headline .why { font-size: 12px; font-weight: normal; color: #475569; margin-top: 3px; }
#summary th, #summary th * { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; word-break: keep-all !important; }
/* A figure's label takes a line of its own above the figure: floating over its top left, it covered the title. */
.block:has(.js-plotly-plot) > [data-testid="block-label"] { position: static; }
@media (max-width: 600px) {
  /* A phone's first screen shows a race: the title, the verdict and the columns come before the prompt, the
     lesson's button and the settings (the intro's words are in the About tab). */
  #intro { order: -5; } #intro p { display: none; } #message { order: -4; } #headline { order: -3; }
  #race-columns { order: -2; } #lesson-open { order: -1; }
  /* ... and the prompt with Run inside the second screen: shorter answers (each scrolls), the example prompts
     under Run. */
  #race-columns .answer { max-height: 150px; }
  #ask .block:has(> .gallery) { order: 1; }
  .tab-container button, [role="tab"] { padding-left: 8px !important; padding-right: 8px !important; }
  /* On a phone the figures' toolbar sat on their titles; pinch zoom does its job there. */
  .js-plotly-plot .modebar-container { display: none !important; }
}
"""


@dataclass
class StepView:
    index: int
    texts: dict[str, str]  # by method (TREE_METHODS): the text so far, the step outlined
    trees: dict[str, go.Figure]  # by method: the step's draft tree
    narration: str
    depth: go.Figure


def column_views(race: Race | None, shade: bool = True, methods: tuple[str, ...] | None = None) -> list[str]:
    """Answer HTML of each column of `methods` (by default the race's own: plain, EAGLE-2, DDD, and the cost rule
    where it ran), then their counters."""
    answers, counts = [], []
    for method in methods or (race.columns() if race else RACE_METHODS):
        trace = race.get(method) if race else None
        answers.append(answer_html(trace, shade=shade, placeholder="(no run yet)" if trace is None else ""))
        status = "not run" if race is not None and trace is None else ""
        if trace is not None and trace.stop_reason:
            status = f"done: {trace.stop_reason}"
        counts.append(counters_html(method, trace.steps if trace else [], status))
    return answers + counts


def race_info(race: Race | None) -> str:
    if race is None:
        return "No run loaded yet."
    any_trace = next((race.traces[m] for m in ("ddd", "eagle2", "cost") if m in race.traces),
                     next(iter(race.traces.values())))
    sampling = any_trace.sampling
    mode = "greedy" if not sampling.get("temperature") else escape(
        f"sampling (temperature {sampling.get('temperature')}, top-p {sampling.get('top_p')}, "
        f"seed {sampling.get('seed')})")
    title = f"<b>{escape(isolated(race.title))}</b> · " if race.title else ""
    parts = [f"{title}Prompt: “{escape(isolated(race.prompt[:300]))}”",
             f"Model {escape(isolated(source_name(any_trace.model)))} ({escape(any_trace.precision)}, "
             f"{escape(isolated(any_trace.device))}), head: {escape(isolated(source_name(any_trace.head)))}, {mode}."]
    for method in race.methods:
        if METHOD_DECLARATIONS.get(method):
            parts.append(escape(f"{METHOD_LABELS[method]}: {settings_words(race.traces[method])}."))
    if race.note:
        parts.append(escape(isolated(race.note)))
    return "<br>".join(parts)


def settings_words(trace: RunTrace) -> str:
    """A run's settings as the Settings panel names them (their declared labels), each value as a reader writes it;
    the cost rule's costs as it priced its steps (`cost_words`). Plain text: the caller escapes it."""
    declared = {s.name: s for s in METHOD_DECLARATIONS.get(trace.method, ())}
    words = [f"{_label_of(declared.get(name), name)} {setting_words(declared.get(name), value)}"
             for name, value in trace.settings.items() if name not in COST_NAMES]
    if COST_NAMES & set(declared):
        words.append(cost_words(trace))
    return ", ".join(words)


def _label_of(setting: Setting | None, name: str) -> str:
    # A file may carry a setting no declaration names (a newer engine's): its key then reads as words.
    return setting.label if setting is not None else name.replace("_", " ")


def setting_words(setting: Setting | None, value: Any) -> str:
    """One setting's value in words: yes/no, a list in brackets, a number without float noise."""
    kind = setting.kind if setting is not None else ""
    if isinstance(value, bool) or kind == "bool":
        return "yes" if value else "no"
    if kind == "calls":
        return "(every call)" if value == "all" else f"({', '.join(str(c) for c in value)})"
    if kind == "tree":
        depth = max((len(p) for p in value), default=0)
        same = [list(p) for p in value] == [list(p) for p in setting.default]
        return "(EAGLE-1's 25-node tree)" if same else f"({len(value)} paths, {depth} levels deep)"
    if isinstance(value, (int, float)):
        return readable(value, 4) if isinstance(value, float) else f"{value:,}"
    return str(value)


def cost_words(trace: RunTrace) -> str:
    """The costs the cost rule priced its steps with: where it measured them, the last measured ones (its settings
    hold only where the measuring started), else those it kept."""
    used = [s.costs for s in trace.steps if s.costs is not None]
    measured = next((s for s in reversed(trace.steps) if s.costs is not None and s.costs.measured), None)
    if measured is not None:
        how, costs = f"costs measured on this machine as it decoded (as of step {measured.index})", measured.costs
    else:
        fixed = trace.settings.get(PIN_COSTS.name)
        how = "costs kept fixed" if fixed else "costs not measured in this run"
        costs = used[-1] if used else trace.settings
    values = costs if isinstance(costs, dict) else vars(costs)
    shown = ", ".join(f"{s.label} {readable(values[s.name])}" for s in COST_SETTINGS
                      if isinstance(values.get(s.name), (int, float)))
    return f"{how}: {shown} (in plain decoding steps)" if shown else how


def source_name(source: str | None) -> str:
    """A model or head as a reader should see it: the shipped head by that name, a local directory by its own
    name only (the machine's checkout path means nothing to anyone else), anything else as it is."""
    if not source:
        return "none"
    path = Path(source)
    if path.parts[-2:] == ("assets", "head"):
        return "shipped head"
    return path.name if path.is_absolute() else source


def step_count(race: Race | None) -> int:
    return race.decode_steps() if race else 0


def _at(trace: RunTrace | None, index: int):
    if trace is None or not trace.steps:
        return None
    return trace.steps[min(index, len(trace.steps) - 1)]


def step_view(race: Race | None, index: int, shade: bool = True, show: str = "shown") -> StepView:
    """Views of step `index` for EAGLE-2, DDD and the cost rule (a run that had already finished shows its last
    step; a column the race lacks says so)."""
    texts, trees, words = {}, {}, []
    for method in TREE_METHODS:
        trace = race.get(method) if race else None
        step = _at(trace, index)
        if trace is None or step is None:
            texts[method] = answer_html(None, placeholder="(no run)")
            trees[method] = tree_figure(None, trace)
            continue
        finished = index >= len(trace.steps)
        texts[method] = answer_html(trace, upto=step.index, current=step.index, shade=shade)
        trees[method] = tree_figure(step, trace, show=show)
        prefix = (f"*{METHOD_LABELS[trace.method]} had already finished; its last step:* "
                  if finished else "")
        words.append(prefix + narrate(step, trace, race))
    return StepView(index, texts, trees, "\n\n".join(words) or "Nothing to narrate yet.",
                    depth_figure(race, current=index if race else None))


def race_views(race: Race | None, shade: bool = True) -> dict[str, Any]:
    """Everything that depends on the whole race (figures are built once per race, not per step)."""
    return {
        "columns": column_views(race, shade, COLUMN_METHODS),  # every column: a race without one clears it
        "timeline": timeline_figure(race),
        "summary": summary_table(race),
        "about": about_markdown(race),
        "info": race_info(race),
        "headline": headline_html(race.traces if race else {}),
        "steps": step_count(race),
    }


def summary_table(race: Race | None) -> pd.DataFrame:
    return pd.DataFrame(summary_rows(race), columns=SUMMARY_HEADERS).astype(str)
