"""A lesson in seven chapters, from why plain decoding is slow to DDD and the cost rule, built from one recorded race.

Each chapter is one figure, drawn by the race view's own figure code (components.tree, .charts), a few sentences
and one question. Every number in the sentences and every answer is read from the race (LESSON_METHODS on one
prompt, a shipped example recorded by `python app.py --record-examples`): nothing is typed in, so a race recorded
again gives a lesson with its own numbers. The app shows the lesson in its Lesson panel (explorer/lesson.py);
components/lesson_page.py writes it as one HTML page (the static page's lesson.html, the app's hand-out).
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from ddd.bench.projection import BAND
from ddd.costs import StepCosts
from ddd.numbers import readable
from ddd.trace import RunTrace, Step
from ddd.whatif import ddd_whatif, own_costs

from .charts import depth_figure, timeline_figure
from .lesson_reading import (accepted_texts, bonus_words, counted, decode_steps, first_detour, machine_words, median_of,
                             number_choices, tau_of, varied_threshold, verified_of)
from .narration import candidates_drafted, why_depth
from .race import METHOD_LABELS, Race
from .tokens import isolated, markdown_literal
from .tree import tree_figure
from .verdict import SMALLEST_CALLED, decode_tokens_per_s, speed_ratio, too_close, verdict
from .views import source_name

# The race the lesson reads: plain decoding, EAGLE's static tree, EAGLE-2, DDD and the cost rule on one prompt.
LESSON_METHODS = ("plain", "eagle", "eagle2", "ddd", "cost")
TITLES = ("Why plain decoding is slow", "Draft and verify", "Trees: more guesses per forward",
          "EAGLE-2: a tree that follows the probabilities", "DDD: how deep to draft",
          "The cost rule: tokens per unit of time", "Measuring honestly")
FIGURE_HEIGHT = 440


# A run's pair's costs on ZeroGPU's GPU, in plain steps (None: not projected): ddd.bench.projection.zerogpu_costs,
# passed in by the app and the export, since the views compute nothing of a model.
GpuCosts = Callable[[RunTrace], StepCosts | None]


class LessonError(ValueError):
    """A race the lesson cannot be built from; the message says what it lacks."""


@dataclass(frozen=True)
class Question:
    ask: str  # Markdown
    choices: tuple[str, ...]  # plain text
    answer: int  # the right choice's index, read from the race
    why: str  # Markdown: the answer's explanation, with the race's numbers

    def reply(self, choice: int) -> str:
        """What the page shows once `choice` is picked: right or not, then why."""
        verdict_line = ("**Right.**" if choice == self.answer else
                        f"**Not quite: the answer is “{markdown_literal(self.choices[self.answer])}”.**")
        return f"{verdict_line} {self.why}"

    def revealed(self) -> str:
        """The answer as a presenter shows it to the room, or a hand-out's answers page prints it."""
        return f"**Answer: {markdown_literal(self.choices[self.answer])}.** {self.why}"


@dataclass(frozen=True)
class TryIt:
    """Where the last chapter sends a student: the race's example with DDD at a threshold that shows its point."""

    example: str  # the example's file stem
    threshold: float
    text: str  # Markdown

    def query(self) -> str:
        """The app's link (explorer/lesson.py reads it): the example shown, its prompt and threshold filled in."""
        return f"?example={self.example}&threshold={readable(self.threshold)}"


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    text: str  # Markdown
    figure: go.Figure
    question: Question
    try_it: TryIt | None = None

    @property
    def anchor(self) -> str:
        """The chapter's name in links: #chapter-N on a lesson page, ?chapter=N in the app."""
        return f"chapter-{self.number}"


@dataclass(frozen=True)
class Lesson:
    title: str
    intro: str  # Markdown
    chapters: tuple[Chapter, ...]


def lesson_race(races: Iterable[tuple[str, Race]]) -> tuple[str, Race] | None:
    """The first (key, race) that holds every method the lesson reads."""
    return next(((key, race) for key, race in races if all(m in race.traces for m in LESSON_METHODS)), None)


def build_lesson(race: Race, example: str, gpu: StepCosts | None, whatif: bool = True) -> Lesson:
    """The seven chapters of `race` (the shipped example `example`); `gpu`: the cost rule's costs for the race's pair
    on ZeroGPU's GPU as the GPU projection has them (None: the projection lacks the pair); `whatif`: whether its
    readers have the app's What if panel (the static page's have not)."""
    missing = [METHOD_LABELS[m] for m in LESSON_METHODS if not decode_steps(race.get(m))]
    if missing:
        needed = ", ".join(METHOD_LABELS[m] for m in LESSON_METHODS)
        raise LessonError(f"The lesson needs a race with a decoded run of each of {needed}; this one lacks "
                          f"{', '.join(missing)}.")
    result = verdict(race.traces)
    if result is None:
        raise LessonError("The lesson needs a race whose runs were timed: this one has no verdict.")
    speeds = {s.name: s for s in result.standings}
    plain = race.traces["plain"]
    intro = (f"Seven short chapters on speculative decoding, each with one question to answer before the page "
             f"says why. Every figure and number comes from one recorded race: the model "
             f"{markdown_literal(source_name(plain.model))} ({markdown_literal(plain.precision)} on "
             f"{markdown_literal(plain.device)}) answering “{markdown_literal(isolated(race.prompt))}” five ways.")
    chapters = (_slow(race), _draft_verify(race), _trees(race, speeds), _eagle2(race), _ddd(race), _cost(race, gpu),
                _honest(race, result, example, whatif))
    return Lesson(f"Lesson: how speculative decoding works ({markdown_literal(isolated(race.title or example))})",
                  intro, chapters)


# -- the chapters --------------------------------------------------------------------------------------------------


def _slow(race: Race) -> Chapter:
    plain = race.traces["plain"]
    steps = decode_steps(plain)
    forwards, tokens = len(steps), sum(len(s.token_ids) for s in steps)
    prefill = next((s for s in plain.steps if s.prefill), None)
    median = statistics.median(s.ms for s in steps)
    total_s = sum(s.ms for s in steps) / 1000
    forward_share = sum(s.verify_ms for s in steps) / max(sum(s.ms for s in steps), 1e-9)
    text = (f"A language model writes one token at a time. To choose the next token, the **target** model runs one "
            f"**forward pass** over everything written so far, and that pass yields one token. Here plain decoding "
            f"first read the {counted(plain.prompt_tokens, 'prompt token')} in one forward (the *prefill*, "
            f"{prefill.ms if prefill else 0:.0f} ms, which also gives the first token), then wrote "
            f"{counted(tokens, 'more token')} in {counted(forwards, 'more forward')}, a median of {median:.0f} ms each "
            f"({total_s:.1f} s on the clock, {forward_share:.0%} of it inside the target's forwards).\n\n"
            "A forward is the same work whether the next token is hard to guess or obvious, so the time grows with "
            "the length of the answer. The figure shows the run on a clock: one bar per forward, one dot per token.")
    choices = number_choices(forwards, {1, max(2, forwards // 4), forwards, 2 * forwards})
    question = Question(
        f"After the prefill, plain decoding wrote {counted(tokens, 'more token')}. How many forward passes of the target "
        "did that take?", choices, choices.index(str(forwards)),
        f"{counted(forwards, 'forward')}: one per token. Together they took {total_s:.1f} s on the clock (a median of "
        f"{median:.0f} ms each), and a longer answer costs proportionally more. The next chapters keep the same model "
        "and the same answer, and cut the number of forwards.")
    return Chapter(1, TITLES[0], text, timeline_figure(Race(traces={"plain": plain}), height=300), question)


def _showcase(trace: RunTrace) -> Step:
    """The step that shows drafting best: the most draft tokens accepted and a rejected guess after them (the
    earliest of equals)."""
    steps = decode_steps(trace)
    return max(steps, key=lambda s: (s.accepted, any(n.status == "rejected" for n in s.pool), -s.index))


def _draft_verify(race: Race) -> Chapter:
    eagle2, plain = race.traces["eagle2"], race.traces["plain"]
    step = _showcase(eagle2)
    accepted = accepted_texts(step)
    emitted = len(step.token_ids)
    checked = max(step.verified - 1, 0)
    same = [t for s in eagle2.steps for t in s.token_ids] == [t for s in plain.steps for t in s.token_ids]
    greedy = not float(eagle2.sampling.get("temperature", 0.0) or 0.0)
    lossless = (f"EAGLE-2's whole answer here is plain decoding's, token for token "
                f"({counted(sum(len(s.token_ids) for s in plain.steps), 'token')})."
                if same else "This race sampled, so the answers differ by chance; each token still has exactly the "
                             "distribution plain sampling gives it.")
    text = (f"Speculative decoding adds a small, fast **draft head** that guesses the next few tokens, one after "
            f"another: a *chain* of guesses. The target then checks them all in **one** forward: it computes its own "
            f"choice at every position at once, and keeps the guesses up to the first one that differs from its own "
            f"(the **accepted prefix**). At that position it writes its own choice, the **bonus token**.\n\n"
            f"In step {step.index} (figure: the green path) EAGLE-2's draft offered {counted(checked, 'guess', 'guesses')} "
            f"(a small tree: the next chapters come to trees); "
            f"the target accepted {counted(step.accepted, 'draft token')} ({accepted}) and added {bonus_words(step)} itself, "
            f"in one forward of {step.verify_ms:.0f} ms. A guess is kept only where it is the target's own choice"
            + (" (greedy decoding)" if greedy else " (by a test against the target's probabilities)")
            + f", so nothing changes in the answer: the method is **lossless**. {lossless}")
    choices = number_choices(emitted, {1, step.accepted, emitted, checked})
    question = Question(
        f"In step {step.index} the target accepted {counted(step.accepted, 'draft token')}. How many tokens did that step "
        "add to the answer?", choices, choices.index(str(emitted)),
        f"{emitted}: the {counted(step.accepted, 'accepted draft token')} plus the bonus token, {bonus_words(step)}, which the "
        "target chose after them in the same forward. Even a step whose every guess is wrong adds one token, so a "
        "speculative step never makes fewer tokens than a plain one; what it can lose is the time spent drafting.")
    figure = tree_figure(step, eagle2, show="verified", height=FIGURE_HEIGHT,
                         title=f"EAGLE-2 · step {step.index} · guesses checked")
    return Chapter(2, TITLES[1], text, figure, question)


def _trees(race: Race, speeds: dict[str, Any]) -> Chapter:
    eagle, eagle2 = race.traces["eagle"], race.traces["eagle2"]
    steps = decode_steps(eagle)
    # A step whose accepted path took a guess other than the draft's first: a chain would have stopped there.
    detours = [s for s in steps if first_detour(s) is not None]
    step = max(detours or steps, key=lambda s: (s.accepted, -s.index))
    size = Counter(verified_of(s) for s in steps).most_common(1)[0][0]
    size2 = Counter(verified_of(s) for s in decode_steps(eagle2)).most_common(1)[0][0]
    levels = Counter(n.depth for n in step.pool if n.depth > 0)
    shape = ", ".join(str(levels[d]) for d in sorted(levels))
    detour = first_detour(step)
    where = (f" In step {step.index} the accepted path went through guess number {detour.rank + 1} at level "
             f"{detour.depth}: a chain of first guesses would have stopped there." if detour else "")
    tau, tau2 = tau_of(eagle), tau_of(eagle2)
    verify, verify2 = median_of(s.verify_ms for s in steps), median_of(s.verify_ms for s in decode_steps(eagle2))
    text = (f"A chain is lost at its first wrong guess. A **tree** keeps several guesses for a position: **EAGLE** "
            f"drafts the same fixed tree every step, {counted(size - 1, 'candidate')} on {counted(len(levels), 'level')} "
            f"({shape} per level), and the target checks every branch in one forward, each candidate seeing only "
            f"its own ancestors.{where}\n\n"
            f"Over the race EAGLE made {tau:.2f} tokens per forward (*tau*) against EAGLE-2's {tau2:.2f} with "
            f"{counted(size2 - 1, 'candidate')} a step. But a forward over {size} tokens is not free on "
            f"{machine_words(eagle)}: it took a median {verify:.0f} ms, against {verify2:.0f} ms over EAGLE-2's "
            f"{size2}.")
    ratio, low, high = speed_ratio(eagle, eagle2)
    tie = too_close(ratio, low, high)
    choices = ("EAGLE's static tree", "EAGLE-2's smaller tree", "Too close to call in this race")
    faster = 2 if tie else (1 if ratio > 1 else 0)
    rate, rate2 = decode_tokens_per_s(eagle.steps) or 0.0, decode_tokens_per_s(eagle2.steps) or 0.0
    question = Question(
        f"EAGLE's tree verifies {size} tokens a step, EAGLE-2's {size2}. Which one was faster in this race?",
        choices, faster,
        f"{choices[faster]}: EAGLE decoded {rate:.1f} tokens/s ({speeds['eagle'].speedup:.2f}× plain), EAGLE-2 "
        f"{rate2:.1f} ({speeds['eagle2'].speedup:.2f}× plain); EAGLE-2's speed over EAGLE's is {ratio:.2f} "
        f"(95% interval {low:.2f}–{high:.2f}). More candidates a forward pay only where checking them costs little: "
        f"EAGLE's {size} tokens made {tau:.2f} tokens a forward against {tau2:.2f}, but each forward took "
        f"{verify / max(verify2, 1e-9):.1f}× as long on {machine_words(eagle)}. On a GPU a large model checks tens of "
        "tokens for about the price of one, and the larger tree wins there.")
    figure = tree_figure(step, eagle, show="verified", height=FIGURE_HEIGHT,
                         title=f"EAGLE (static tree) · step {step.index}")
    return Chapter(3, TITLES[2], text, figure, question)


def _eagle2(race: Race) -> Chapter:
    eagle2 = race.traces["eagle2"]
    step = _showcase(eagle2)
    settings = eagle2.settings
    width, calls, budget = (int(settings.get(k, 0)) for k in ("beam_width", "draft_calls", "total_tokens"))
    drafted = candidates_drafted(step, eagle2)
    checked = max(step.verified - 1, 0)
    kept = [n for n in step.pool if n.status not in ("root", "pruned")]
    dropped = [n for n in step.pool if n.status == "pruned"]
    lowest = math.exp(min(n.score for n in kept)) if kept else 0.0
    best_dropped = math.exp(max(n.score for n in dropped)) if dropped else 0.0
    text = (f"**EAGLE-2** grows its tree from the draft head's own probabilities. Its first draft call proposes the "
            f"{width} likeliest next tokens; each further call takes the {width} likeliest candidates so far (the "
            f"**beam**) and proposes {width} children for each. A candidate's score is its **path probability**: the "
            f"product of the draft's probabilities along its path, so a guess deep in a sure branch can outrank a "
            f"shallow guess in an unsure one.\n\n"
            f"After {counted(calls, 'draft call')} the pool held {counted(drafted, 'candidate')}; the target verifies only "
            f"the best by path probability, {budget} tokens with the root (the setting *total_tokens*, the budget "
            f"of verified tokens). In step {step.index} (the same step as before, now with the best candidates the "
            f"rerank dropped, as grey rings) the least likely kept guess had path probability {lowest:.2f} and the "
            f"likeliest dropped one {best_dropped:.2f}.")
    choices = number_choices(checked, {drafted, checked, width, calls})
    question = Question(
        f"In step {step.index} EAGLE-2's draft proposed {counted(drafted, 'candidate')}. How many of them did the target "
        "verify?", choices, choices.index(str(checked)),
        f"{checked}: the budget, total_tokens = {budget}, counts the root, and the {checked} candidates with the "
        f"highest path probability fill it (down to {lowest:.2f}; the best one left out had {best_dropped:.2f}). "
        "The budget is what a forward can afford; where the draft is sure the kept candidates form a deep chain, "
        "where it is unsure a bushy tree.")
    figure = tree_figure(step, eagle2, show="shown", height=FIGURE_HEIGHT,
                         title=f"EAGLE-2 · step {step.index} · kept and dropped")
    return Chapter(4, TITLES[3], text, figure, question)


def _ddd(race: Race) -> Chapter:
    ddd, eagle2 = race.traces["ddd"], race.traces["eagle2"]
    threshold = float(ddd.settings.get("threshold", 0.0))
    limit = int(ddd.settings.get("max_draft_calls", 0))
    fixed = int(eagle2.settings.get("draft_calls", 0))
    width = int(ddd.settings.get("beam_width", 0))
    steps = decode_steps(ddd)
    depths = Counter(s.draft_calls for s in steps)
    spread = ", ".join(f"{counted(d, 'level')} in {counted(depths[d], 'step')}" for d in sorted(depths))
    # The question: the first weighing of the step that checked most (DDD checks after each listed call).
    step = max(steps, key=lambda s: (len(s.checks), -s.index))
    check = step.checks[0]
    go_on = not check.stop
    text = (f"EAGLE-2 drafts the same number of levels every step ({fixed} here), sure or unsure. **DDD** (Dynamic "
            f"Depth Decoding) decides per step. After each of its checked draft calls it measures the beam's "
            f"confidence **H**: the log of the path probability that the {counted(width, 'candidate')} of the beam hold "
            f"together (H ≤ 0). If H is below the **threshold** ({readable(threshold)} here: the beam holds "
            f"less than {math.exp(threshold):.0%} of the draft's probability) the next guesses are unlikely to be "
            f"accepted, so DDD stops and verifies; otherwise it drafts another level, at most {limit}.\n\n"
            f"In this race DDD drafted {spread} (figure, top: DDD's depth per step against EAGLE-2's fixed "
            f"{fixed}; middle: H at each check, green where DDD went on, a red cross where it stopped).")
    choices = ("Yes: it drafts another level", "No: it stops and verifies")
    question = Question(
        f"In step {step.index}, after {counted(check.call, 'draft call')}, H = {check.confidence:.2f} and the threshold "
        f"is {readable(threshold)}. Will DDD draft another level?", choices, 0 if go_on else 1,
        f"{'Yes' if go_on else 'No'}: H = {check.confidence:.2f} is {'at or above' if go_on else 'below'} "
        f"{readable(threshold)}. What DDD did in that step, as the race's narration says it: "
        + why_depth(step, ddd, race))
    return Chapter(5, TITLES[4], text, depth_figure(race, current=step.index, height=FIGURE_HEIGHT + 80), question)


def _cost(race: Race, gpu_costs: StepCosts | None) -> Chapter:
    cost = race.traces["cost"]
    steps = [s for s in decode_steps(cost) if s.checks]
    # The question: the first weighing of the step that weighed most often.
    step = max(steps, key=lambda s: (len(s.checks), -s.index))
    check = step.checks[0]
    # The costs its step was priced at (the rule measures as it decodes), so that a student can compute its T.
    used, measured = step.costs, bool(step.costs and step.costs.measured)
    costs = StepCosts(used.draft_cost, used.verify_base, used.verify_cost) if used else own_costs(cost)
    expected, time = check.expected or 0.0, check.time or 1.0
    gain, extra = check.gain or 0.0, check.time_gain or 0.0
    rate = (expected + 1) / time
    deeper = (expected + gain + 1) / (time + extra)
    verified = check.verified or 1
    cpu = costs.time(check.call, verified)
    on_gpu = (f"T = {cpu:.2f} plain steps at these costs, but {gpu_costs.time(check.call, verified):.2f} on "
              f"ZeroGPU's GPU as the project's GPU projection prices this pair (a draft call "
              f"{readable(gpu_costs.draft_cost)}, a tree forward {readable(gpu_costs.verify_base)} more than a "
              f"one-token one, each verified token {readable(gpu_costs.verify_cost)}: projected, each ±{BAND:.0%}, "
              "not measured)"
              if gpu_costs else
              f"T = {cpu:.2f} plain steps at these costs; on a GPU a large model verifies tens of tokens for "
              "about the price of one")
    text = (f"DDD's threshold is a number someone chose. The **cost rule** asks instead what a deeper tree is worth "
            f"on this machine. **E** is the number of draft tokens a tree is expected to get accepted (the sum of "
            f"its candidates' calibrated acceptance chances); **T** is the step's time counted in plain steps: 1 for "
            f"the target's forward, {readable(costs.draft_cost)} per draft call, and where drafted tokens are verified "
            f"{readable(costs.verify_base)} for a tree forward plus {readable(costs.verify_cost)} per extra verified "
            f"token (the costs step {step.index} was priced at, "
            f"{'measured on ' + machine_words(cost) + ' as the race decoded' if measured else 'its settings'}). "
            f"A step makes E + 1 tokens in time T, so its rate is "
            f"**(E + 1) / T** tokens per plain step, and one more level that adds dE tokens for dT time raises the "
            f"rate exactly when **dE / dT > (E + 1) / T**.\n\n"
            f"The prices decide the tree. After {counted(check.call, 'draft call')} of step {step.index} (figure) the best "
            f"tree verified {counted(verified, 'token')}: {on_gpu}. Where verifying is nearly free, larger and deeper trees "
            "pay; where it costs, the rule keeps them small.")
    drafts = deeper > rate if extra <= 0 else gain / extra > rate
    choices = ("Yes: it drafts another level", "No: it stops and verifies")
    sign = ">" if drafts else "≤"
    compare = (f"dE / dT = {readable(gain)} / {readable(extra)} = {gain / extra:.2f} {sign} {rate:.2f}"
               if extra > 0 else f"(E + dE + 1) / (T + dT) = {deeper:.2f} {sign} {rate:.2f}")
    question = Question(
        f"In step {step.index}, after {counted(check.call, 'draft call')}, the best tree expects E = {expected:.2f} "
        f"accepted tokens in T = {time:.2f} plain steps. One more level is forecast to add dE = {readable(gain)} "
        f"tokens for dT = {readable(extra)} steps. Does the cost rule draft it?", choices, 1 if check.stop else 0,
        f"{'No' if check.stop else 'Yes'}: (E + 1) / T = {rate:.2f} tokens per plain step now, and {compare}. "
        "What the rule did in that step, as the race's narration says it: " + why_depth(step, cost, race))
    figure = tree_figure(step, cost, show="verified", height=FIGURE_HEIGHT,
                         title=f"Cost rule · step {step.index}")
    return Chapter(6, TITLES[5], text, figure, question)


def _honest(race: Race, result: Any, example: str, whatif: bool) -> Chapter:
    plain, ddd, eagle2 = race.traces["plain"], race.traces["ddd"], race.traces["eagle2"]
    times = sorted(s.ms for s in decode_steps(plain))
    speeds = {s.name: s for s in result.standings}
    ratio, low, high = speed_ratio(eagle2, ddd)
    tie = too_close(ratio, low, high)
    text = (f"A speedup is a ratio of two times, and times wander on a shared machine: plain decoding's forwards, "
            f"the same work each time, took from {times[0]:.0f} to {times[-1]:.0f} ms in this race (median "
            f"{median_of(times):.0f}). So every method here raced in the same run, taking turns one target forward "
            f"each, and a busy spell slowed all of them alike (figure: each step on a shared clock). Each step counts "
            f"at the median time of the steps of its shape, and a difference is called a tie when the 95% interval of "
            f"a bootstrap over the race's rounds includes equal speed, or when it is under "
            f"{SMALLEST_CALLED - 1:.0%}.\n\nThis race's verdict: “{markdown_literal(result.headline)}”")
    choices = ("DDD was faster than EAGLE-2", "EAGLE-2 was faster than DDD", "This race cannot tell them apart")
    answer = 2 if tie else (0 if ratio > 1 else 1)
    question = Question(
        f"DDD ran at {speeds['ddd'].speedup:.2f}× plain decoding and EAGLE-2 at {speeds['eagle2'].speedup:.2f}×. "
        "What does this race show?", choices, answer,
        f"{choices[answer]}: DDD's speed over EAGLE-2's is {ratio:.2f}, with a 95% interval of {low:.2f}–{high:.2f}"
        + ((" that includes 1." if low <= 1 <= high else f", under {SMALLEST_CALLED - 1:.0%} away from 1.")
           + " Another run of the same race may well order them the other way." if tie
           else f", clear of 1 and more than {SMALLEST_CALLED - 1:.0%} away from it.") +
        " One race is one sample: a fair comparison repeats it on many prompts (the project's benchmark does).")
    threshold = varied_threshold(ddd, race)
    replay = ddd_whatif(ddd, threshold, ddd.settings.get("check_steps", "all"), time_costs=own_costs(race.get("cost")))
    calls = [s.calls for s in replay.steps if s.recorded_calls]
    try_it = TryIt(example, threshold, (
        f"**Try it live.** In the app, race this prompt again with DDD's threshold at {readable(threshold)}, where "
        f"its depth varies most: replayed at {readable(threshold)}"
        + (" (the app's What if panel, under its race)" if whatif else "") +
        f" this race's DDD would draft between {min(calls)} and {max(calls)} levels a step"
        + (f" (in {counted(replay.bounds, 'step')} deeper than the race drafted, so at least that deep)"
           if replay.bounds else "") +
        ". Press “Run the race” twice and compare the two verdicts."))
    figure = timeline_figure(race, height=FIGURE_HEIGHT)
    return Chapter(7, TITLES[6], text, figure, question, try_it)


def chapter_list(lesson: Lesson) -> Sequence[tuple[str, int]]:
    """(label, number) of each chapter, as the app's chapter menu lists them."""
    return [(f"{c.number}. {c.title}", c.number) for c in lesson.chapters]
