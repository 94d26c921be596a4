"""The cost rule's arithmetic (ddd/costs.py) and where its inputs come from: the head's calibration, the trace."""
import json

import pytest

from ddd import generate, load_head, save_head
from ddd.costs import (IDENTITY, Calibration, CalibrationError, StepCosts, best_tree, child_probabilities, decide,
                       fit_calibration)
from ddd.head import HeadLoadError
from tests.tiny import PROMPTS

CPU = StepCosts(draft_cost=0.16, verify_base=0.1, verify_cost=0.035)
GPU = StepCosts(draft_cost=0.05, verify_base=0.0, verify_cost=0.002)


def test_the_verified_count_maximises_the_expected_rate():
    probs = [0.9, 0.5, 0.1, 0.01]
    best = best_tree(probs, calls=2, costs=CPU, max_verified=64)
    rates = {n: (1 + sum(probs[: n - 1])) / CPU.time(2, n) for n in range(1, 6)}
    assert best.verified == max(rates, key=rates.get)
    assert best.rate == pytest.approx(max(rates.values()))


def test_a_poor_draft_verifies_the_root_alone_where_a_tree_forward_costs_more():
    """A tree forward's base cost outweighs 0.08 expected tokens on the CPU, not on the GPU."""
    assert best_tree([0.08], calls=1, costs=CPU, max_verified=64).verified == 1
    assert best_tree([0.08], calls=1, costs=GPU, max_verified=64).verified == 2
    assert CPU.time(1, 1) == pytest.approx(1.16) and CPU.time(1, 3) == pytest.approx(1.16 + 0.1 + 2 * 0.035)


def test_the_verified_count_stays_within_the_cap():
    assert best_tree([0.9] * 10, calls=1, costs=GPU, max_verified=4).verified == 4


def test_a_cheap_machine_drafts_on_where_a_dear_one_stops():
    """The same drafts: one more level pays on GPU costs and not on costs five times dearer per call."""
    probs, beam = [0.8, 0.1, 0.6, 0.05], [0.6, 0.05]
    dear = StepCosts(draft_cost=0.8, verify_base=0.1, verify_cost=0.035)
    assert not decide(2, probs, level_mass=0.65, parent_mass=0.8, beam=beam, costs=GPU, max_verified=60).stop
    assert decide(2, probs, level_mass=0.65, parent_mass=0.8, beam=beam, costs=dear, max_verified=60).stop


def test_a_decision_records_the_numbers_it_weighed():
    d = decide(1, [0.7, 0.2], level_mass=0.9, parent_mass=1.0, beam=[0.7, 0.2], costs=CPU, max_verified=60)
    assert d.now.expected == pytest.approx(sum([0.7, 0.2][: d.now.verified - 1]))
    assert d.now.time == pytest.approx(CPU.time(1, d.now.verified))
    assert d.stop == (not (d.now.expected + d.gain + 1) / (d.now.time + d.time_gain) > d.now.rate)


def test_siblings_rates_never_add_up_to_more_than_one():
    sure = Calibration(((0.0, 0.9), (1.0, 1.0)))  # rates far above the draft's probabilities
    probs = child_probabilities([1.0, 0.5], parents=[0, 0, 1], drafted=[0.3, 0.2, 0.4], calibration=sure)
    assert probs[0] + probs[1] == pytest.approx(1.0)
    assert probs[2] == pytest.approx(0.5 * sure(0.4))  # an only child keeps its rate


def test_the_fitted_calibration_never_falls_and_follows_the_data():
    samples = [(0.1, i < 3) for i in range(10)] + [(0.5, i < 2) for i in range(10)] + [(0.9, i < 9) for i in range(10)]
    fitted = fit_calibration(samples)
    rates = [rate for _, rate in fitted.points]
    assert rates == sorted(rates)
    assert fitted(0.9) == pytest.approx(0.9)
    assert fitted(0.1) == pytest.approx(0.25)  # 0.3 and 0.2 pooled: the data fell


@pytest.mark.parametrize("points", [[[0.1, 0.5]], [[0.5, 0.5], [0.4, 0.6]], [[0.1, 0.6], [0.5, 0.4]],
                                    [[0.1, 0.2], [0.5, 1.5]], [[0.1, "x"], [0.5, 0.6]], "0.5"])
def test_a_broken_calibration_is_refused(points):
    with pytest.raises(CalibrationError):
        Calibration.from_json(points)


def test_a_head_carries_its_calibration_and_runs_record_it(tmp_path, llama, llama_head):
    head_dir = save_head(llama_head, tmp_path / "head")
    config = json.loads((head_dir / "config.json").read_text())
    config["acceptance_calibration"] = [[0.1, 0.2], [0.9, 0.95]]
    (head_dir / "config.json").write_text(json.dumps(config))
    head = load_head(head_dir, llama)
    assert head.calibration == Calibration(((0.1, 0.2), (0.9, 0.95)))
    run = generate(llama, head, PROMPTS[0], "cost", max_new_tokens=4)
    list(run)
    assert run.trace.calibration == [[0.1, 0.2], [0.9, 0.95]]
    assert all(c.expected is not None for s in run.trace.steps for c in s.checks)


def test_a_head_with_a_broken_calibration_is_refused_by_name(tmp_path, llama, llama_head):
    head_dir = save_head(llama_head, tmp_path / "head")
    config = json.loads((head_dir / "config.json").read_text())
    config["acceptance_calibration"] = [[0.5, 0.9], [0.6, 0.1]]
    (head_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(HeadLoadError, match="acceptance_calibration"):
        load_head(head_dir, llama)


def test_a_head_without_calibration_takes_draft_probabilities_at_face_value(llama, llama_head):
    assert llama_head.calibration == IDENTITY
