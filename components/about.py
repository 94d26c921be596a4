"""The About panel: the ideas behind the race, with the cost model filled in from a run's numbers."""
from __future__ import annotations

from .race import METHOD_LABELS, Race
from .verdict import BLOCK_ROUNDS, CONFIDENCE, RESAMPLES, SMALLEST_CALLED

INTRO = """
### What you are looking at

**Plain decoding.** A language model writes one token per forward pass: to produce 100 tokens it runs 100
times, and each pass reads all of the model's weights. On most hardware that pass costs about the same
whether it checks one token or a few dozen, so most of its power goes unused.

**Speculative decoding.** A small, cheap *draft* model guesses several tokens ahead; the big *target* model
then checks all the guesses in **one** forward pass and keeps the longest prefix it agrees with, plus one
token of its own (the *bonus* token). The output is exactly what the target alone would have written
(**lossless**: greedy decoding gives identical text; with sampling every token is drawn from the target's own
distribution by a rejection test), only produced in fewer target passes.

**Draft tree.** Instead of one line of guesses, EAGLE drafts a *tree*: several candidates per position, so
that when the first guess is wrong a sibling may be right. The draft head here reads the target's own hidden
features (EAGLE). **EAGLE-2** grows the tree dynamically: each draft call expands the most probable
branches (the *beam*, `beam_width` wide), a fixed number of times; then it keeps the `total_tokens` most probable
nodes for the target to check.

**DDD (Dynamic Depth Decoding).** EAGLE-2 always drafts the same number of levels. DDD looks at the draft's
own confidence after some draft calls: H = log of the total probability still held by the beam. When H drops
below a threshold, deeper levels are unlikely to be accepted and drafting stops early; when the draft is
confident it goes on, deeper than EAGLE-2 would.

**The cost rule (an optional fourth column).** It weighs what one more level is worth on this machine instead
of comparing confidence with a threshold. *E* is the number of draft tokens a step is expected to have
accepted: the sum, over the tree's nodes, of the chance that the target accepts the node's whole path, each
token's chance read from the head's calibration (how often the target accepted tokens the draft gave that
probability). *T* is the step's expected time in plain decoding steps: 1 (the target's forward) + draft calls x
draft cost + (verified tokens - 1) x verify cost. A step yields E + 1 tokens in T, so one more level, adding dE
tokens for dT more time, pays exactly when **dE / dT > (E + 1) / T**; the rule drafts while it does, then
verifies the number of tokens with the best (E + 1) / T. Nothing is set by hand: the costs are measured
(`python -m ddd.bench.budget` prints them; the preset "measure this machine" fills them in) and the
calibration is the head's own (`python -m ddd.train calibrate`). The step view says, for every method, why
each tree stopped where it did.

**tau (mean acceptance length)** is the number of tokens emitted per target forward pass: accepted draft
tokens plus the bonus. Plain decoding has tau = 1.

**The cost model.** A speculative step costs drafting plus verification, and emits tau tokens on average:

  time per token = (draft time + verify time) / tau

It beats plain decoding only when that is below the time of one plain forward pass. Deeper drafts raise tau
but also the draft time; DDD tries to draft deep only where it pays.

**How the race is timed.** The methods take turns on the same model: one target forward pass of
each, then the next round (each round starts with a different method). A moment when something else on the
machine takes the processor therefore slows them all alike, instead of whichever happened to be running.
The model is warmed up once after it loads, so no method pays for the first, slow passes, and the prefill
(reading the prompt, the same work for every method) is timed apart. Each step is timed on its own, so the
replay shows each method at the pace it would have run alone.

**Precision.** On a CPU the verify time grows with the number of tokens checked: in float32, checking 8
tokens costs about two plain passes. In **int8** (weights and activations as 8-bit integers) it costs about
1.3, which is what lets speculative decoding pay on a CPU. int8 answers are not float32's answers (the
model is slightly changed by rounding), but within a race every method uses the same precision, and
the speculative ones still write exactly what plain decoding writes in that precision.
"""

TIES = f"""
**Who won, and ties.** The headline compares decode time per token, every step counted at the median time
of the steps of the same shape in this race (same number of draft calls and verified tokens): a single step
slowed tenfold by another program says nothing about the method. Whether a difference is real is judged
from the race's own noise: a bootstrap redraws the race's rounds {RESAMPLES} times (in blocks of
{BLOCK_ROUNDS} consecutive rounds, since a busy spell lasts a while; rounds that two methods shared are drawn
together) and recomputes the speedup each time. When the middle {CONFIDENCE:.0%} of those speedups includes
1.00, the two are called a tie; so is a difference under {SMALLEST_CALLED - 1:.0%}, since on a shared machine
two identical decoders drift that far apart now and then.
"""

REFERENCES = """
### References
- *Dynamic Depth Decoding: Faster Speculative Decoding for LLMs.* arXiv:2409.00142 (2024).
  <https://arxiv.org/abs/2409.00142>
- Yuhui Li, Fangyun Wei, Chao Zhang, Hongyang Zhang. *EAGLE-2: Faster Inference of Language Models with
  Dynamic Draft Trees.* arXiv:2406.16858 (2024). <https://arxiv.org/abs/2406.16858>
- Yuhui Li, Fangyun Wei, Chao Zhang, Hongyang Zhang. *EAGLE: Speculative Sampling Requires Rethinking Feature
  Uncertainty.* arXiv:2401.15077 (2024).
"""


def cost_model_rows(race: Race | None) -> list[dict[str, float | str]]:
    """Per method: draft and verify ms per step, tau, and the resulting ms per token."""
    rows = []
    if race is None:
        return rows
    for method in race.methods:
        s = race.summary(method)
        steps = [st for st in race.traces[method].steps if not st.prefill]
        if not steps:
            continue
        draft = s.get("draft_ms_per_step", 0.0)
        verify = s.get("verify_ms_per_step", 0.0)
        tau = s.get("tau", 0.0) or 1.0
        rows.append({"method": METHOD_LABELS[method], "draft_ms": draft, "verify_ms": verify, "tau": tau,
                     "ms_per_token": (draft + verify) / tau})
    return rows


def about_markdown(race: Race | None) -> str:
    rows = cost_model_rows(race)
    if rows:
        plain = next((r["ms_per_token"] for r in rows if r["method"] == "Plain"), None)
        lines = ["### The cost model on this run", "",
                 "| method | draft ms / step | verify ms / step | tau | (draft + verify) / tau = ms per token |",
                 "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['method']} | {r['draft_ms']:.1f} | {r['verify_ms']:.1f} | {r['tau']:.2f} | "
                         f"({r['draft_ms']:.1f} + {r['verify_ms']:.1f}) / {r['tau']:.2f} = **{r['ms_per_token']:.1f}** |")
        if plain:
            lines.append("")
            for r in rows:
                if r["method"] != "Plain" and r["ms_per_token"] > 0:
                    lines.append(f"- {r['method']}: {plain / r['ms_per_token']:.2f}× plain decoding's speed by this "
                                 "model (other time, e.g. bookkeeping, left out).")
        table = "\n".join(lines)
    else:
        table = "### The cost model on this run\n\nRun or load a race to fill in its numbers."
    return INTRO + TIES + "\n" + table + "\n" + REFERENCES
