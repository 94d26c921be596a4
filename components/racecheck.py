"""A race's runs checked against each other, after each run has been checked on its own (components/runcheck.py):
one prompt, model, precision and sampling; the texts shown are the tokens' own; greedy runs agree; no speculative
run steps faster, or dispatches more operations a token, than the race's own plain decoding allows."""
from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from ddd.settings import Sampling
from ddd.trace import RunTrace

from .race import METHOD_LABELS
from .runcheck import Fail
from .tokens import excerpt

SHARED = ("prompt", "prompt_tokens", "precision", "model", "device")  # one of each per race
# A speculative step runs the target on at least the token a plain step runs it on, and drafts besides, so it is
# never faster than the race's own plain forwards beyond noise. On the shipped examples a speculative run's median
# decode step is 1.30 to 2.37 times plain decoding's, and its fastest step 1.33 to 2.32 times plain's fastest.
# Below these (a tenth under the median, a quarter under the fastest: timer noise), the timings are made up, and
# so would be the speed-up.
MIN_STEP_RATIO = 0.9  # of plain decoding's median decode step, for a speculative run's median
MIN_FASTEST_RATIO = 0.75  # of plain decoding's fastest decode step, for any speculative decode step
# What the cost rule measured a plain step at (the fixed part of its steps: a target forward and the rule's own
# bookkeeping, which on a tiny model outweighs the forward) lies within this factor of the race's own steps: above
# plain decoding's fastest over it, below its slowest step of any method times it.
STEP_MS_FACTOR = 3.0
# Greedy verification reproduces plain decoding token for token, except on a GPU in half precision, where a near-tie
# can break differently in a tree's forward than in a plain one (docs/usage.md, "Precision modes").
HALF_PRECISIONS = ("float16", "bfloat16")
# A speculative step's operations a token, at most this times plain decoding's a token for each draft call made and
# one more for the rest: a draft call dispatches fewer operations than a target forward (about 75 against 141 on the
# tests' two-layer model, fewer still against a deeper target), and the rest of a step at most 1.15 plain steps.
OPS_FACTOR = 2.0
# A special token as a tokenizer spells it alone ("<|im_end|>", "</s>"): decoded text leaves it out.
SPECIAL = re.compile(r"<[^<>\s]{1,40}>")
Where = Callable[[str], str]  # a run's place in its file, by method ("traces.ddd", or "the run")


def check_tokens(traces: dict[str, RunTrace], fail: Fail, where: Where = "traces.{}".format) -> None:
    """The texts shown are the tokens' own: the file spells each token one way, every step's text shows its tokens in
    order, and greedy runs emit the same tokens and so the same text, up to the shortest."""
    spelt = _spellings(traces, fail, where)
    for name, trace in traces.items():
        _shown(trace, spelt, where(name), fail)
    _greedy(traces, fail, where)


def _spellings(traces: dict[str, RunTrace], fail: Fail, where: Where) -> dict[int, str]:
    """Each token's text, as the draft pools and bonus tokens spell it (one text per token across the file)."""
    spelt: dict[int, tuple[str, str]] = {}  # a token: its text and the first field that spells it
    for name, trace in traces.items():
        for position, step in enumerate(trace.steps):
            at = f"{where(name)}.steps[{position}]"
            given = [(n.token_id, n.text, f"{at}.pool[{i}].text") for i, n in enumerate(step.pool)]
            if step.bonus_id is not None:
                given.append((step.bonus_id, step.bonus_text, f"{at}.bonus_text"))
            for token, text, field in given:
                first, first_field = spelt.setdefault(token, (text, field))
                if text != first:
                    raise fail(field, f"spells token {token} {excerpt(text)}, but {first_field} spells it "
                                      f"{excerpt(first)}: a token has one text")
    return {token: text for token, (text, _) in spelt.items()}


def _shown(trace: RunTrace, spelt: dict[int, str], where: str, fail: Fail) -> None:
    """The run's text shows the text of each of its tokens the file spells, in order. A step may leave half a
    character to the next (the engine holds it back until it completes), so tokens are sought in the run's text from
    where the last one was found, not in their own step's. Spellings are read without their surrounding spaces (a
    tokenizer may drop a word's leading space when it spells the word alone); a token that spells part of a
    character (U+FFFD), no visible text, or a special token (SPECIAL: the text leaves those out) is passed over."""
    text = "".join(step.text for step in trace.steps)
    start = 0
    for position, step in enumerate(trace.steps):
        for token in step.token_ids:
            spelling = spelt.get(token, "").strip()
            if not spelling or "\ufffd" in spelling or SPECIAL.fullmatch(spelling):
                continue
            found = text.find(spelling, start)
            if found < 0:
                raise fail(f"{where}.steps[{position}].text", f"is {excerpt(step.text)}, and the run's text from there "
                                                              f"on never shows token {token} ({excerpt(spelling)}, "
                                                              "as the file spells it), which its token_ids hold")
            start = found + len(spelling)


def _greedy(traces: dict[str, RunTrace], fail: Fail, where: Where) -> None:
    """Greedy runs (on a GPU in half precision aside) emit the same tokens up to the shortest, and runs that emitted
    the same tokens show the same text."""
    runs = [(name, t) for name, t in traces.items() if Sampling(**t.sampling).greedy
            and not (t.device.startswith("cuda") and t.precision in HALF_PRECISIONS)]
    if len(runs) < 2:
        return
    first_name, first = runs[0]
    first_ids = [token for step in first.steps for token in step.token_ids]
    for name, trace in runs[1:]:
        ids = [token for step in trace.steps for token in step.token_ids]
        for position, (theirs, ours) in enumerate(zip(first_ids, ids)):
            if theirs != ours:
                raise fail(f"{where(name)}.steps", f"emit token {ours} as token {position + 1} of the answer, where "
                                                   f"{where(first_name)} emits {theirs}: greedy runs of one race emit "
                                                   "the same tokens")
        if ids == first_ids and trace.text != first.text:
            raise fail(f"{where(name)}.text", f"differs from {where(first_name)}.text, yet both runs emitted the same "
                                              "tokens, which spell one text")


def check_race(traces: dict[str, RunTrace], fail: Fail) -> None:
    """The runs of one race answered one prompt on one model, in one precision and with one sampling."""
    names = list(traces)
    first = traces[names[0]]
    for name in names[1:]:
        trace = traces[name]
        for field in SHARED:
            if getattr(trace, field) != getattr(first, field):
                raise fail(f"traces.{name}.{field}", f"differs from traces.{names[0]}.{field}: the runs of one race "
                                                     "share one prompt, model, device and precision")
        if Sampling(**trace.sampling) != Sampling(**first.sampling):
            raise fail(f"traces.{name}.sampling", f"differs from traces.{names[0]}.sampling: the runs of one race "
                                                  "sample alike")
    heads = {t.head for t in traces.values() if t.method != "plain"}
    if len(heads) > 1:
        raise fail("traces", f"draft with different heads ({', '.join(METHOD_LABELS[m] for m in names)})")
    check_tokens(traces, fail)
    _paces(traces, fail)
    _ops_ceiling(traces, fail)


def _ops_ceiling(traces: dict[str, RunTrace], fail: Fail) -> None:
    """No speculative step dispatches more operations a token than its draft calls and one target forward can
    (OPS_FACTOR), against plain decoding's in the same race."""
    plain = [s.ops.total for s in traces["plain"].steps if not s.prefill and s.ops] if "plain" in traces else []
    if not plain:
        return
    per_token = max(plain)  # a plain step emits one token
    for name, trace in traces.items():
        for position, step in enumerate(trace.steps):
            if name == "plain" or step.prefill or step.ops is None:
                continue
            count, most = step.ops.total / len(step.token_ids), OPS_FACTOR * (step.draft_calls + 1) * per_token
            if count > most:
                raise fail(f"traces.{name}.steps[{position}].ops", f"count {count:,.0f} operations a token, more than "
                                                                   f"{OPS_FACTOR:g} x ({step.draft_calls} draft calls "
                                                                   f"+ 1) x plain decoding's {per_token:,} a token in "
                                                                   "this race")


def typical_step_ms(trace: RunTrace) -> float | None:
    """The median time of a run's decode steps (the prefill apart); None without one."""
    times = [s.ms for s in trace.steps if not s.prefill]
    return statistics.median(times) if times else None


def _paces(traces: dict[str, RunTrace], fail: Fail) -> None:
    """No speculative run steps faster than the race's own plain forwards allow (MIN_STEP_RATIO, MIN_FASTEST_RATIO);
    what the cost rule measured a plain step at agrees with them (STEP_MS_FACTOR)."""
    plain = [s.ms for s in traces["plain"].steps if not s.prefill] if "plain" in traces else []
    if not plain:
        return
    typical_plain, fastest = statistics.median(plain), min(plain)
    slowest = max(s.ms for t in traces.values() for s in t.steps if not s.prefill)
    for name, trace in traces.items():
        if name == "plain":
            continue
        typical = typical_step_ms(trace)
        label = METHOD_LABELS[name]
        if typical is not None and typical < MIN_STEP_RATIO * typical_plain:
            raise fail(f"traces.{name}.steps", f"take {typical:.3g} ms each (the median decode step), under plain "
                                               f"decoding's {typical_plain:.3g} ms: a {label} step runs the target on "
                                               "at least the token a plain step does, and drafts besides")
        for position, step in enumerate(trace.steps):
            at = f"traces.{name}.steps[{position}]"
            if not step.prefill and step.ms < MIN_FASTEST_RATIO * fastest:
                raise fail(at, f"took {step.ms:.3g} ms, well under plain decoding's fastest step ({fastest:.3g} ms): a "
                               f"{label} step runs the target on at least the token a plain step does")
            measured = step.costs.step_ms if step.costs is not None and step.costs.measured else None
            if measured is not None and not fastest / STEP_MS_FACTOR <= measured <= slowest * STEP_MS_FACTOR:
                raise fail(f"{at}.costs.step_ms", f"says a plain step took {measured:.3g} ms, but this race's "
                                                  f"steps took {fastest:.3g} (plain decoding's fastest) to "
                                                  f"{slowest:.3g} ms")
