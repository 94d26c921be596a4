"""The cost rule measures its own costs as it decodes (ddd/costs.py CostMeter): on a machine where verification
grows with the tree and on one where it is flat, the estimates reach the true costs and the depths follow, from
the same code. Time here is a virtual clock: each forward advances it by what the regime says it costs, so no
test depends on how fast this machine is."""
from __future__ import annotations

import random

import pytest

from ddd.costs import LADDER, RETIME_EVERY, CostMeter, StepCosts
from ddd.engine import Generation, cost_meter, generate
from ddd.settings import method_settings
from tests.tiny import PROMPTS

DECLARED = StepCosts(draft_cost=0.06, verify_base=0.09, verify_cost=0.025)


class Regime:
    """A machine's costs in seconds: a verify forward over n tokens, a draft call, and a step's fixed rest."""

    def __init__(self, one: float, base: float, slope: float, draft: float, noise: float = 0.1, seed: int = 0):
        self.one, self.base, self.slope, self.draft, self.noise = one, base, slope, draft, noise
        self.random = random.Random(seed)

    def verify(self, n: int) -> float:
        return self._jitter(self.one + (self.base + (n - 1) * self.slope if n > 1 else 0.0))

    def _jitter(self, seconds: float) -> float:
        """Up to `noise` slower, and now and then three times slower: a busy machine."""
        spike = 3.0 if self.random.random() < 0.05 else 1.0
        return seconds * spike * (1 + self.noise * self.random.random())

    @property
    def true_costs(self) -> StepCosts:
        return StepCosts(self.draft / self.one, self.base / self.one, self.slope / self.one)


def cpu(seed: int = 0) -> Regime:
    """A 2-core CPU in int8: verification grows with the tree."""
    return Regime(one=0.020, base=0.002, slope=0.0007, draft=0.0033, seed=seed)


def gpu(seed: int = 0) -> Regime:
    """A GPU: verification flat, a draft call a few percent of a forward."""
    return Regime(one=0.020, base=0.0002, slope=0.00002, draft=0.0008, seed=seed)


def feed(meter: CostMeter, regime: Regime, steps: int, sizes: tuple[int, ...] = (1, 2, 4, 8)) -> None:
    """`steps` decode steps as the engine times them: draft calls one by one, then the step's three parts."""
    for i in range(steps):
        calls, verified = 1 + i % 4, sizes[i % len(sizes)]
        for _ in range(calls - 1):
            meter.time_draft_call(regime._jitter(regime.draft))
        meter.time_step(calls, verified, regime._jitter(calls * regime.draft), regime.verify(verified), 0.0)


def close(measured: StepCosts, true: StepCosts, rel: float, floor: float = 0.01) -> bool:
    """Each cost within `rel` of the truth, or (the GPU's near-zero ones) within `floor` plain steps of it."""
    return all(abs(getattr(measured, n) - getattr(true, n)) <= max(rel * getattr(true, n), floor)
               for n in ("draft_cost", "verify_base", "verify_cost"))


def predicted_times_agree(measured: StepCosts, true: StepCosts, rel: float) -> bool:
    """The step time the rule weighs, T(calls, verified), within `rel` of the truth for every tree it may draft."""
    return all(measured.time(c, v) == pytest.approx(true.time(c, v), rel=rel) for c in range(1, 12) for v in range(1, 65))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("machine", [cpu, gpu])
def test_the_meter_reaches_the_true_costs_after_40_steps(machine, seed):
    """Timings jitter by up to a tenth of a forward, one in twenty three times slower: after the warm-up and 40
    steps every step time the rule weighs (up to 11 calls and 64 tokens, sizes above 8 timed once, at the
    warm-up) is within 10% of the truth, and each cost within 15% of it or 0.04 plain steps (the base is a few
    ms under a jitter of the same size)."""
    meter, regime = CostMeter(DECLARED), machine(seed)
    for n in LADDER[:6]:
        meter.time_verify(n, regime.verify(n))
    feed(meter, regime, 40)
    measured, step_ms = meter.costs()
    assert predicted_times_agree(measured, regime.true_costs, 0.10)
    assert close(measured, regime.true_costs, 0.15, floor=0.04), (measured, regime.true_costs)
    assert step_ms == pytest.approx(regime.one * 1e3, rel=0.15)


def test_before_anything_is_timed_the_meter_answers_with_the_declared_costs():
    assert CostMeter(DECLARED).costs() == (DECLARED, None)


def test_a_meter_that_only_sees_one_tree_size_still_learns_the_slope_by_retiming():
    """The rule choosing 8 tokens every step, with no warm-up: the meter asks for the other sizes now and then."""
    meter, regime = CostMeter(DECLARED), cpu()
    for _ in range(200):
        size = meter.retime(64) or 8
        meter.time_draft_call(regime.draft)
        meter.time_step(2, size, 2 * regime.draft, regime.verify(size), 0.0)
    assert predicted_times_agree(meter.costs()[0], regime.true_costs, 0.05)


def test_retiming_asks_on_one_step_in_RETIME_EVERY_for_the_size_timed_longest_ago():
    meter = CostMeter(DECLARED)
    asked = []
    for _ in range(3 * RETIME_EVERY):
        asked.append(meter.retime(8))
        meter.time_step(1, asked[-1] or 4, 0.0, 0.02, 0.0)
    assert [a for a in asked if a is not None] == [1, 2, 8]  # never timed; smallest first; 4 is timed every step


def test_a_busy_spell_moves_the_estimates_little():
    meter, regime = CostMeter(DECLARED), cpu()
    for n in LADDER[:6]:
        meter.time_verify(n, regime.verify(n))
    feed(meter, regime, 40)
    before = meter.costs()[0]
    feed(meter, Regime(0.060, 0.006, 0.0021, 0.0099, seed=1), 3)  # three steps three times slower
    assert close(meter.costs()[0], before, 0.1)


# -- the rule in the engine, on a virtual clock -------------------------------------------------------------

class VirtualClock:
    """The engine's clock, advanced by the target's and the head's forwards as `regime` prices them."""

    def __init__(self, target, head, regime: Regime, monkeypatch):
        self.now, self.regime = 0.0, regime
        body, run_head = target.model.model.forward, head.forward

        def target_forward(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.now += regime.verify(ids.shape[1])
            return body(*args, **kwargs)

        def head_forward(*args, **kwargs):
            self.now += regime.draft
            return run_head(*args, **kwargs)

        monkeypatch.setattr(target.model.model, "forward", target_forward)
        monkeypatch.setattr(head, "forward", head_forward)

    def __call__(self) -> float:
        return self.now


CHEAP_HEAD = dict(beam_width=4, max_draft_calls=8, total_tokens=32)


def run_on(regime: Regime, target, head, monkeypatch, prompt: str, tokens: int = 48):
    clock = VirtualClock(target, head, regime, monkeypatch)
    settings = method_settings("cost", **CHEAP_HEAD)
    # A meter of its own: the process's meters are shared by every run of a pair.
    cost_meter(target, head, settings).__init__(StepCosts.of(settings))
    run = Generation(target, head, prompt, "cost", max_new_tokens=tokens, settings=settings, clock=clock)
    list(run)
    monkeypatch.undo()
    return run.trace


def test_under_gpu_costs_the_rule_drafts_deeper_than_under_cpu_costs(llama, llama_head, monkeypatch):
    deep = run_on(gpu(), llama, llama_head, monkeypatch, PROMPTS[0])
    shallow = run_on(Regime(0.020, 0.004, 0.004, 0.008), llama, llama_head, monkeypatch, PROMPTS[0])
    assert deep.summary["mean_draft_depth"] > shallow.summary["mean_draft_depth"]
    verified = lambda t: sum(s.verified for s in t.steps if not s.prefill) / (len(t.steps) - 1)
    assert verified(deep) > verified(shallow)


def test_each_step_records_the_costs_it_was_priced_with(llama, llama_head, monkeypatch):
    """A step's verify timings vary by a tenth of a forward here, so the GPU's tiny base reads within 0.05."""
    regime = gpu()
    trace = run_on(regime, llama, llama_head, monkeypatch, PROMPTS[1])
    steps = [s for s in trace.steps if not s.prefill]
    assert all(s.costs is not None and s.costs.measured for s in steps)
    last = steps[-1].costs
    assert close(StepCosts(last.draft_cost, last.verify_base, last.verify_cost), regime.true_costs, 0.25, floor=0.05)
    assert last.step_ms == pytest.approx(regime.one * 1e3, rel=0.25)


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_a_measuring_rule_is_lossless(llama, llama_head, monkeypatch, prompt):
    trace = run_on(cpu(), llama, llama_head, monkeypatch, prompt, tokens=32)
    plain = generate(llama, None, prompt, "plain", max_new_tokens=32)
    list(plain)
    assert [t for s in trace.steps for t in s.token_ids] == plain.token_ids


def test_pinned_costs_are_used_as_they_are(llama, llama_head):
    run = Generation(llama, llama_head, PROMPTS[0], "cost", max_new_tokens=8,
                     settings=method_settings("cost", pin_costs=True, draft_cost=0.5))
    list(run)
    assert {(s.costs.draft_cost, s.costs.measured) for s in run.trace.steps if not s.prefill} == {(0.5, False)}


@pytest.mark.slow
def test_a_measuring_rule_samples_as_plain_sampling_does(llama, llama_head, monkeypatch):
    """Sampled on a GPU-like clock, so that it drafts deep: the tokens keep plain sampling's distribution."""
    from ddd.settings import Sampling
    from tests.test_sampling import ALPHA, SAMPLES, SAMPLING, chi_square_p, exact_joint

    exact = exact_joint(llama, PROMPTS[3], 3, Sampling(**SAMPLING))
    clock = VirtualClock(llama, llama_head, gpu(), monkeypatch)
    settings = method_settings("cost", **CHEAP_HEAD)
    cost_meter(llama, llama_head, settings).__init__(StepCosts.of(settings))
    counts, accepted = {}, 0
    for seed in range(SAMPLES):
        run = Generation(llama, llama_head, PROMPTS[3], "cost", max_new_tokens=3, settings=settings, record=False,
                         sampling=Sampling(seed=seed, **SAMPLING), clock=clock)
        accepted += sum(s.accepted for s in run)
        counts[tuple(run.token_ids)] = counts.get(tuple(run.token_ids), 0) + 1
    monkeypatch.undo()
    p, cells = chi_square_p(counts, exact, SAMPLES)
    assert cells >= 4 and p > ALPHA, f"p = {p:.2e} over {cells} cells"
    assert accepted > SAMPLES * 0.1  # it drafted, and drafts were accepted
