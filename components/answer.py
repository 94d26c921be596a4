"""A method's answer as HTML: tokens shaded by how they were made, plus its live counters."""
from __future__ import annotations

from ddd.metrics import summarize
from ddd.numbers import readable
from ddd.trace import RunTrace, Step

from .race import METHOD_LABELS
from .tokens import escape, tamed
from .verdict import decode_tokens_per_s

LEGEND = ('<span class="tok-draft">accepted draft tokens</span> '
          '<span class="tok-target">tokens the target produced itself (bonus)</span>')


def split_step(step: Step) -> list[tuple[str, str]]:
    """The step's text as (kind, text) pieces: "draft" for accepted draft tokens, "target" for what the
    target itself produced (the bonus token, plain decoding, the prefill)."""
    if not step.text:
        return []
    if step.accepted <= 0 or not step.pool:
        return [("target", step.text)]
    nodes = {n.index: n for n in step.pool}
    drafted = "".join(nodes[i].text for i in step.accepted_path[1:1 + step.accepted] if i in nodes)
    if drafted and step.text.startswith(drafted):
        rest = step.text[len(drafted):]
        return [("draft", drafted)] + ([("target", rest)] if rest else [])
    return [("draft", step.text)]  # multi-byte text the tokens split oddly: count it as drafted


def answer_html(trace: RunTrace | None, *, upto: int | None = None, current: int | None = None,
                shade: bool = True, placeholder: str = "", cursor: bool = False) -> str:
    """The text of `trace` up to step `upto`; the step `current` is outlined."""
    steps = trace.steps if trace is not None else []
    if upto is not None:
        steps = steps[: upto + 1]
    if not steps:
        return f'<div class="answer empty">{escape(placeholder)}</div>'
    speculative = bool(trace is not None and trace.method != "plain")
    parts = []
    for step in steps:
        classes = "step cur" if current is not None and step.index == current else "step"
        pieces = []
        for kind, text in split_step(step):
            css = f"tok-{kind}" if shade and speculative else "tok-plain"
            pieces.append(f'<span class="{css}">{escape(tamed(text))}</span>')
        if pieces:
            parts.append(f'<span class="{classes}" title="step {step.index}">{"".join(pieces)}</span>')
        elif current is not None and step.index == current:  # its bytes complete a character in a later step
            parts.append(f'<span class="{classes}" title="step {step.index}: no complete character yet">·</span>')
    tail = '<span class="cursor">▍</span>' if cursor else ""
    return f'<div class="answer">{"".join(parts)}{tail}</div>'


def counters(steps: list[Step]) -> dict[str, float | None]:
    """The counters' figures: decode speed as the verdict measures it (the prefill apart, each step at the median
    time of its shape), the prefill's own time, and the wall time of the whole answer."""
    summary: dict[str, float | None] = dict(summarize(steps))
    summary["elapsed_s"] = summary["total_ms"] / 1000
    summary["decode_tokens_per_s"] = decode_tokens_per_s(steps)
    return summary


def counters_html(method: str, steps: list[Step], status: str = "") -> str:
    """tokens · decode tokens/s · prefill · target forwards · tau · elapsed, as one line of badges."""
    s = counters(steps) if steps else None
    name = METHOD_LABELS.get(method, method)
    if s is None:
        return f'<div class="counters"><b>{escape(name)}</b> <span class="status">{escape(status or "waiting")}</span></div>'
    rate = s["decode_tokens_per_s"]
    items = [
        ("tokens", f"{s['new_tokens']}"),
        ("decode tokens/s", readable(rate) if rate else "–"),
        ("prefill", f"{s['prefill_ms']:.0f} ms"),
        ("target forwards", f"{s['target_forwards']}"),
        ("tau", f"{s['tau']:.2f}" if method != "plain" else "1.00"),
        ("elapsed", f"{s['elapsed_s']:.2f} s"),
    ]
    badges = "".join(f'<span class="badge"><span class="k">{k}</span> <span class="v">{v}</span></span>'
                     for k, v in items)
    return (f'<div class="counters"><b>{escape(name)}</b> {badges}'
            f'<span class="status">{escape(status)}</span></div>')
