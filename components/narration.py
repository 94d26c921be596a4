"""Plain words for every step of a run, built only from its trace."""
from __future__ import annotations

import math

from ddd.numbers import ms_text, readable
from ddd.trace import RunTrace, Step
from ddd.tree import pool_size

from .race import METHOD_LABELS, TREE_METHODS, Race
from .tokens import quoted

MAX_LISTED = 5
WHY = "**Why this depth:** "


def _listing(texts: list[str], limit: int = MAX_LISTED) -> str:
    shown = ", ".join(quoted(t) for t in texts[:limit])
    return shown + (f" and {len(texts) - limit} more" if len(texts) > limit else "")


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def candidates_drafted(step: Step, trace: RunTrace | None) -> int:
    """Candidates the draft proposed this step: K (the beam width) at the root call, K² per later call (EAGLE-2
    / DDD); falls back to the recorded pool when the settings do not say."""
    width = trace.settings.get("beam_width") if trace is not None else None
    if width and trace is not None and trace.method in TREE_METHODS and step.draft_calls:
        return pool_size(int(width), step.draft_calls) - 1
    return max(len(step.pool) - 1, 0)


def _ms_per_call(step: Step) -> float:
    return step.draft_ms / step.draft_calls if step.draft_calls else 0.0


def _plain_ms_per_token(race: Race | None) -> float | None:
    plain = race.get("plain") if race is not None else None
    if plain is None:
        return None
    steps = [s for s in plain.steps if not s.prefill]
    tokens = sum(len(s.token_ids) for s in steps)
    return sum(s.ms for s in steps) / tokens if tokens else None


def _eagle2_depth(race: Race | None) -> int | None:
    eagle2 = race.get("eagle2") if race is not None else None
    if eagle2 is None:
        return None
    calls = eagle2.settings.get("draft_calls")
    return int(calls) if calls else None


def narrate(step: Step, trace: RunTrace, race: Race | None = None) -> str:
    """What happened in `step` of `trace`, in a few sentences of Markdown."""
    name = METHOD_LABELS.get(trace.method, trace.method)
    tokens = len(step.token_ids)
    if step.prefill:
        first = quoted(step.text) if step.text else "its first token"
        return (f"**Step 0 — prefill.** The target read the {_plural(trace.prompt_tokens, 'prompt token')} in one "
                f"forward pass ({ms_text(step.ms)} ms) and produced {first}. Nothing is drafted before the first token: "
                "the draft head needs the target's features of the prompt first.")
    if not step.draft_calls:
        return (f"**Step {step.index} — {name}.** One target forward ({ms_text(step.ms)} ms) produced one token, "
                f"{quoted(step.text)}. Plain decoding always pays one full forward pass per token.")
    parts = [f"**Step {step.index} — {name}.**"]
    levels = step.draft_calls
    drafted = candidates_drafted(step, trace)
    checked = max(step.verified - 1, 0)
    ranking = ("calibrated path probability (the count with the best expected tokens per plain step)"
               if trace.method == "cost" else "cumulative probability")
    parts.append(f"The draft head proposed {_plural(drafted, 'candidate')} in {_plural(levels, 'level')} "
                 f"({_plural(levels, 'draft call')}, {ms_text(step.draft_ms)} ms); the rerank kept the "
                 f"{checked} with the highest {ranking} and the target checked them all in one "
                 f"forward pass ({ms_text(step.verify_ms)} ms).")
    text, whole = _acceptance(step, trace)
    parts.append(text)
    parts.append(WHY + why_depth(step, trace, race, whole))
    parts.append(_timing(step, race, tokens))
    return " ".join(p for p in parts if p)


def why_depth(step: Step, trace: RunTrace, race: Race | None = None, whole: bool = False) -> str:
    """Why the step's tree stopped at its depth, with the numbers the decision weighed, stated once: DDD's from
    its confidence checks, the cost rule's from its last weighing, a fixed tree's from its settings; `whole`:
    the target accepted every level drafted."""
    name = METHOD_LABELS.get(trace.method, trace.method)
    if step.context_cut:
        return (f"{name} stopped after {_plural(step.draft_calls, 'draft call')}, short of its "
                f"{step.max_draft_calls}: the model's context had room for no deeper level.")
    if trace.method == "ddd":
        return _depth(step, trace, race, whole)
    if trace.method == "cost":
        return _cost_depth(step, whole)
    return _fixed_depth(step, name, whole)


def _acceptance(step: Step, trace: RunTrace) -> tuple[str, bool]:
    """What the target accepted, and whether that was every level the draft built."""
    nodes = {n.index: n for n in step.pool}
    path = [nodes[i] for i in step.accepted_path[1:] if i in nodes]
    accepted_texts = [n.text for n in path[: step.accepted]]
    bonus = quoted(step.bonus_text) if step.bonus_id is not None else "a token of its own"
    greedy = float(trace.sampling.get("temperature", 0.0) or 0.0) == 0.0
    last = step.accepted_path[step.accepted] if len(step.accepted_path) > step.accepted else 0
    verified_children = [n for n in step.pool if n.parent == last and n.status != "pruned"]
    other_rejected = sum(1 for n in step.pool if n.status == "rejected") - len(verified_children)
    why = "did not match the target's own choice" if greedy else "failed the sampling test against the target's probabilities"
    if step.accepted == 0:
        if verified_children:
            text = (f"Nothing was accepted: at the first level the target wanted {bonus}, and the "
                    f"{_plural(len(verified_children), 'candidate')} drafted there ({_listing([n.text for n in verified_children])}) "
                    f"{why}. ")
        else:
            text = "Nothing was accepted. "
        text += (f"Every deeper candidate hung from a rejected one, so the whole tree was rejected. The step still "
                 f"emitted one token, the target's own {bonus}: no gain over a plain step, and the drafting time was spent for nothing.")
        return text, False
    text = (f"The target accepted {_plural(step.accepted, 'draft token')} ({_listing(accepted_texts)})")
    if path:
        text += f", a path the draft had given cumulative probability {math.exp(path[step.accepted - 1].score):.2f}"
    text += f", then added {bonus} itself (the bonus token)."
    deepest = max((n.depth for n in step.pool if n.status != "pruned"), default=0)
    whole = step.accepted >= step.draft_calls or (not verified_children and step.accepted >= deepest)
    if whole:
        text += " That is every level the draft built."
    elif verified_children:
        text += (f" At level {step.accepted + 1} the {_plural(len(verified_children), 'candidate')} checked there "
                 f"({_listing([n.text for n in verified_children])}) {why}.")
        dropped = [n for n in step.pool if n.parent == last and n.status == "pruned" and n.token_id == step.bonus_id]
        if dropped:
            text += f" The draft had proposed {bonus} there too, but the rerank dropped it as too unlikely."
    else:
        text += f" The draft tree had nothing verified below level {step.accepted}, so the target took over there."
    if other_rejected > 0:
        text += (f" The other {_plural(other_rejected, 'rejected candidate')} lay on branches that left the "
                 "accepted path.")
    return text, whole


def _fixed_depth(step: Step, name: str, whole: bool) -> str:
    text = f"{name} drafts a fixed {_plural(step.draft_calls, 'level')}, its setting, so it stopped there"
    if whole:
        text += " although the target accepted all of them: a deeper draft might have given more tokens this step"
    return text + "."


def _depth(step: Step, trace: RunTrace, race: Race | None, whole: bool) -> str:
    """DDD's depth decision and, when the whole draft was accepted, what that decision cost."""
    calls, limit = step.draft_calls, step.max_draft_calls
    eagle2 = _eagle2_depth(race)
    per_call = _ms_per_call(step)
    if not step.checks:
        return (f"DDD drafted all {_plural(limit, 'level')}, its maximum, without checking its confidence: none of "
                "its checks comes before its last draft call.")
    last = step.checks[-1]
    earlier = [c for c in step.checks if not c.stop]
    if last.stop:
        text = (f"DDD stopped after {_plural(calls, 'draft call')}: the beam held only "
                f"{_share(last.confidence)} of the draft probability (H = {last.confidence:.2f}, below the "
                f"threshold {_threshold(trace)}), so it judged deeper levels unlikely to be accepted.")
        saved = limit - calls
        if saved > 0:
            text += f" That saved {_plural(saved, 'draft call')} (about {ms_text(saved * per_call)} ms) against its maximum of {limit}"
            if eagle2 is not None and eagle2 != calls:
                diff = eagle2 - calls
                text += (f", and it drafted {abs(diff)} {'fewer' if diff > 0 else 'more'} level{'s' if abs(diff) != 1 else ''}"
                         f" than EAGLE-2's fixed {eagle2}")
            text += "."
        if eagle2 is not None and calls > eagle2 and earlier:
            text += (f" It went deeper than EAGLE-2 because the beam was still confident at the earlier "
                     f"check{'s' if len(earlier) > 1 else ''} (H = {', '.join(f'{c.confidence:.2f}' for c in earlier)}).")
        if whole:
            text += (" This time the judgement was cautious: the target accepted every level drafted, so going "
                     "deeper might have given more tokens.")
        return text
    checks = ", ".join(f"{c.confidence:.2f}" for c in earlier)
    text = (f"DDD's beam stayed confident at every check (H = {checks}, all at or above the threshold "
            f"{_threshold(trace)}), so it drafted all {_plural(limit, 'level')}, its maximum")
    if eagle2 is not None and calls > eagle2:
        text += (f": {calls - eagle2} deeper than EAGLE-2's fixed {eagle2}, at a cost of about "
                 f"{ms_text((calls - eagle2) * per_call)} ms of extra drafting")
    return text + "."


def _share(log_p: float) -> str:
    """exp(log_p) as a percentage that stays readable when it is tiny."""
    p = math.exp(log_p)
    return f"{p:.0%}" if p >= 0.01 else f"{readable(p * 100, 1)}%"


def _threshold(trace: RunTrace) -> str:
    value = trace.settings.get("threshold")
    return f"{float(value):g}" if value is not None else "x"


def _num(value: float) -> str:
    """A token count or a time in plain steps: two decimals, or two significant digits where those show 0.00."""
    return f"{value:.2f}" if abs(value) >= 0.1 or value == 0 else readable(value, 2)


def _cost_depth(step: Step, whole: bool) -> str:
    """The cost rule's depth decision from its last weighing (ddd/costs.py): E tokens expected in T plain steps
    make (E + 1) / T per step; one more level paid only if what it adds, dE / dT, beat that."""
    calls, limit = step.draft_calls, step.max_draft_calls
    if not step.checks:
        return (f"The cost rule drafted {_plural(calls, 'level')}, its maximum: with a {limit}-call limit there was "
                "no deeper level to weigh.")
    last = step.checks[-1]
    expected, time, gain, extra = last.expected or 0.0, last.time or 1.0, last.gain or 0.0, last.time_gain or 0.0
    rate = (expected + 1) / time
    now = (f"its best tree after call {last.call}, {_plural(last.verified or 1, 'verified token')}, expected "
           f"E = {_num(expected)} accepted tokens in T = {_num(time)} plain steps, (E + 1) / T = {_num(rate)} tokens "
           "per plain step")
    if extra > 0:
        forecast = (f"one more level was forecast to add dE = {_num(gain)} tokens for dT = {_num(extra)} steps, "
                    f"dE / dT = {_num(gain / extra)} per step")
    else:  # verifying fewer tokens made the deeper tree no slower: the rates themselves compare
        deeper = (expected + gain + 1) / (time + extra)
        forecast = (f"one more level was forecast to add dE = {_num(gain)} tokens and dT = {_num(extra)} steps, "
                    f"(E + dE + 1) / (T + dT) = {_num(deeper)} per step")
    if last.stop:
        text = (f"The cost rule stopped after {_plural(calls, 'draft call')}: {now}; {forecast}, not above "
                f"{_num(rate)}, so drafting deeper would have slowed the step.")
        if whole:
            text += " The target accepted every level drafted, so this time one more might have paid."
        return text + _priced(step)
    return (f"The cost rule drafted all {_plural(limit, 'level')}, its maximum: at its last weighing, {now}; "
            f"{forecast}, above {_num(rate)}, so only the {limit}-call limit stopped it.") + _priced(step)


def _priced(step: Step) -> str:
    """The costs the step was weighed with (docs/algorithms.md, "Measured costs"), as one sentence."""
    c = step.costs
    if c is None:  # a file from before steps recorded them: the run's settings priced it
        return ""
    where = (f"measured on this machine as it decoded (a plain step {readable(c.step_ms)} ms)" if c.measured
             else "the run's settings, pinned or not yet timed")
    text = (f" Priced at a draft call {readable(c.draft_cost)}, a tree forward {readable(c.verify_base)} more "
            f"than a one-token one and each verified token {readable(c.verify_cost)} plain steps: {where}.")
    if c.retimed:
        text += (f" This step verified {_plural(step.verified, 'token')} rather than its best tree, to time that "
                 "size again.")
    return text


def _timing(step: Step, race: Race | None, tokens: int) -> str:
    per_token = step.ms / tokens if tokens else step.ms
    text = (f"Time: {ms_text(step.draft_ms)} ms drafting + {ms_text(step.verify_ms)} ms verifying + {ms_text(step.other_ms)} ms "
            f"other = {ms_text(step.ms)} ms for {_plural(tokens, 'token')}, {ms_text(per_token)} ms per token")
    plain = _plain_ms_per_token(race)
    if plain:
        verdict = "faster" if per_token < plain else "slower"
        text += f" (plain decoding: {ms_text(plain)} ms per token, so this step was {verdict})"
    return text + "."
