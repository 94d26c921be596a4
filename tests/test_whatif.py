"""The what-if replay: at a run's own settings it gives back the run step for step; elsewhere it agrees with the
engine wherever the record reaches, and marks the steps it cannot know as bounds."""
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from components import Race, load_race
from components.whatif import whatif_figure, whatif_summary
from ddd.costs import Calibration
from ddd.numbers import readable
from ddd.engine import generate
from ddd.settings import SettingsError
from ddd.bench.projection import BAND, zerogpu_costs
from ddd.whatif import WhatIfError, cost_whatif, ddd_whatif, own_costs
from explorer.layout import Ui
from explorer.whatif import COST_WIDGETS, WhatIfPanel
from tests.conftest import EXAMPLES_DIR
from tests.tiny import PROMPTS

DDD = dict(beam_width=4, max_draft_calls=6, check_steps="all", threshold=-1.0, total_tokens=12)
COSTS = dict(draft_cost=0.02, verify_base=0.01, verify_cost=0.01)
COST = dict(beam_width=4, max_draft_calls=6, total_tokens=12, pin_costs=True, **COSTS)
# Dear enough that the rule stops early and verifies few tokens, where COST goes deeper.
DEAR_COSTS = dict(draft_cost=0.3, verify_base=0.2, verify_cost=0.1)
DEAR = dict(COST, **DEAR_COSTS)
CALIBRATION = Calibration(((0.0, 0.05), (0.5, 0.4), (1.0, 0.9)))


def run(target, head, method, new_tokens=24, **settings):
    generation = generate(target, head, PROMPTS[0], method, max_new_tokens=new_tokens, **settings)
    for _ in generation:
        pass
    return generation.trace


@pytest.fixture(scope="module")
def ddd_run(llama, llama_head):
    return run(llama, llama_head, "ddd", **DDD)


@pytest.fixture(scope="module")
def cost_run(llama, llama_head):
    original = llama_head.calibration
    llama_head.calibration = CALIBRATION
    try:
        return run(llama, llama_head, "cost", **COST)
    finally:
        llama_head.calibration = original


def as_recorded(result):
    return [(s.calls, s.verified, s.accepted, s.bound) for s in result.steps]


def recorded(trace):
    return [(s.draft_calls, s.verified, s.accepted, False) for s in trace.steps if not s.prefill]


def test_ddd_at_its_own_settings_gives_back_the_run(ddd_run):
    result = ddd_whatif(ddd_run, DDD["threshold"], DDD["check_steps"])
    assert as_recorded(result) == recorded(ddd_run)
    assert result.tokens_per_s == pytest.approx(result.measured_tokens_per_s)


@pytest.mark.parametrize("name", ["counting", "code"])
def test_a_shipped_example_at_its_own_settings_gives_back_the_run(name):
    trace = load_race(EXAMPLES_DIR / f"{name}.json").get("ddd")
    result = ddd_whatif(trace, trace.settings["threshold"], trace.settings["check_steps"])
    assert as_recorded(result) == recorded(trace)
    assert not result.complete  # the file keeps only the candidates the tree view shows


def test_a_rule_that_measured_its_costs_replayed_at_the_costs_each_step_recorded_gives_back_the_run(llama, llama_head):
    measuring = run(llama, llama_head, "cost", **dict(COST, pin_costs=False))
    assert all(s.costs.measured for s in measuring.steps if not s.prefill)
    assert as_recorded(cost_whatif(measuring, None)) == recorded(measuring)


def test_the_cost_rule_at_its_own_costs_gives_back_the_run(cost_run):
    assert cost_run.calibration == CALIBRATION.to_json()
    result = cost_whatif(cost_run, COSTS)
    assert as_recorded(result) == recorded(cost_run)
    assert result.calibrated and result.complete


def test_lowering_the_threshold_never_makes_a_step_shallower(ddd_run):
    depths = [[s.calls for s in ddd_whatif(ddd_run, t, "all").steps] for t in (0.0, -0.3, -1.0, -3.0, -1000.0)]
    for higher, lower in zip(depths, depths[1:]):
        assert all(a <= b for a, b in zip(higher, lower)), (higher, lower)


def test_deeper_than_recorded_is_a_bound_that_holds(llama, llama_head, ddd_run):
    deep = ddd_whatif(ddd_run, -1000.0, "all")
    shallow = [s for s in deep.steps if s.recorded_calls < DDD["max_draft_calls"]]
    assert shallow and all(s.bound and s.calls > s.recorded_calls for s in shallow)
    assert all(s.accepted >= s.recorded_accepted for s in shallow)
    assert deep.bounds == len(shallow) and "deeper than recorded" in whatif_summary(ddd_run, [deep])
    # The first step's context is the same in both runs: the real deeper run lies within the bound.
    real = next(s for s in run(llama, llama_head, "ddd", 4, **dict(DDD, threshold=-1000.0)).steps if not s.prefill)
    first = deep.steps[0]
    assert real.draft_calls >= first.calls and real.accepted <= first.accepted


def test_a_shallower_setting_is_exact_where_the_record_reaches(llama, llama_head, cost_run):
    """The first step of real runs at other settings, against the replay of a deeper run's first step."""
    deep = run(llama, llama_head, "ddd", 4, **dict(DDD, threshold=-1000.0))
    for threshold in (-0.2, -0.6):
        real = next(s for s in run(llama, llama_head, "ddd", 4, **dict(DDD, threshold=threshold)).steps
                    if not s.prefill)
        first = ddd_whatif(deep, threshold, "all").steps[0]
        assert (first.calls, first.verified, first.accepted, first.bound) == (real.draft_calls, real.verified,
                                                                              real.accepted, False)
    llama_head.calibration, original = CALIBRATION, llama_head.calibration
    try:
        real = next(s for s in run(llama, llama_head, "cost", 4, **DEAR).steps if not s.prefill)
    finally:
        llama_head.calibration = original
    first = cost_whatif(cost_run, DEAR_COSTS).steps[0]
    assert not first.bound
    assert (first.calls, first.verified, first.accepted) == (real.draft_calls, real.verified, real.accepted)


def test_runs_it_cannot_replay_say_why(llama, llama_head, ddd_run):
    sampled = replace(ddd_run, sampling={**ddd_run.sampling, "temperature": 0.7})
    with pytest.raises(WhatIfError, match="sampled"):
        ddd_whatif(sampled, -0.3, "all")
    plain = run(llama, None, "plain", 4)
    with pytest.raises(WhatIfError, match="no dynamic tree"):
        cost_whatif(plain, COSTS)
    with pytest.raises(SettingsError, match="check_steps lists draft call 9"):
        ddd_whatif(ddd_run, -0.3, "2,9")


def test_the_figure_draws_bounds_apart_and_escapes_token_text(ddd_run):
    steps = [replace(s, text="<b>bold</b>") if not s.prefill else s for s in ddd_run.steps]
    trace = replace(ddd_run, steps=steps)
    results = [ddd_whatif(trace, -1000.0, "all"), cost_whatif(trace, COSTS)]
    fig = whatif_figure(trace, results)
    metas = {t.meta for t in fig.data}
    assert {"recorded-depth", "recorded-accepted", "ddd-depth-bound", "ddd-accepted-bound", "cost-depth"} <= metas
    bound = next(t for t in fig.data if t.meta == "ddd-depth-bound")
    assert bound.marker.symbol == "circle-open" and "at least" in bound.name
    hover = " ".join(next(t for t in fig.data if t.meta == "recorded-depth").hovertext)
    assert "&lt;b&gt;bold&lt;/b&gt;" in hover and "<b>" not in hover
    assert "measured" in fig.layout.title.text and "No acceptance calibration" in whatif_summary(trace, results)


def test_a_rule_the_race_measured_is_shown_replayed_on_its_own_run_first(ddd_run, cost_run):
    """Replaying the DDD run, the cost rule at the race's own costs: its own run's prediction beside its measurement
    comes before the prediction from DDD's record, which may be an upper estimate."""
    ui = Ui(whatif_chart=object(), whatif_note=object())
    session = SimpleNamespace(race=Race(traces={"ddd": ddd_run, "cost": cost_run}))
    note = WhatIfPanel(ui).replay("ddd", DDD["threshold"], DDD["check_steps"], *COSTS.values(), session)
    text = note[ui["whatif_note"]]["value"]
    own = cost_whatif(cost_run, COSTS, max_draft_calls=COST["max_draft_calls"], time_costs=own_costs(cost_run))
    assert as_recorded(own) == recorded(cost_run)  # its own run, given back step for step
    first = (f"This race&#x27;s Cost rule run, replayed on its own record at Cost rule at draft 0.02, verify base 0.01, "
             f"per token 0.01: {readable(own.tokens_per_s)} decode tokens/s predicted beside "
             f"{readable(own.measured_tokens_per_s)} measured.")
    assert first in text and text.index(first) < text.index("Recorded DDD run")


def panel_ui() -> Ui:
    """The what-if panel's outputs, by name (stand-ins: the callbacks use them as keys)."""
    return Ui(**{name: object() for name in [*COST_WIDGETS, "whatif_chart", "whatif_note"]})


def test_a_gpu_puts_the_projections_costs_for_the_races_pair_on_zerogpus_gpu_on_the_sliders():
    ui, race = panel_ui(), load_race(EXAMPLES_DIR / "maths.json")
    out = WhatIfPanel(ui).preset("gpu", "ddd", -0.3, "5,7,9", *COSTS.values(), SimpleNamespace(race=race))
    projected = zerogpu_costs(race.get("ddd"))
    assert [out[ui[name]] for name in COST_WIDGETS] == [projected.draft_cost, projected.verify_base,
                                                        projected.verify_cost]
    replayed = WhatIfPanel(ui).preset("gpu", "ddd", -0.3, "5,7", *COSTS.values(), SimpleNamespace(race=race))
    assert f"(each ±{BAND:.0%}, the projection&#x27;s leave-one-out error" in replayed[ui["whatif_note"]]["value"]


def test_a_gpu_leaves_the_costs_as_they_were_for_a_pair_the_projection_lacks(ddd_run):
    ui = panel_ui()
    out = WhatIfPanel(ui).preset("gpu", "ddd", -0.3, "all", *COSTS.values(),
                                 SimpleNamespace(race=Race(traces={"ddd": ddd_run})))
    assert "has none, so the costs stay as they were" in out[ui["whatif_note"]]["value"]
    assert all(out[ui[name]] == gr.skip() for name in COST_WIDGETS)
