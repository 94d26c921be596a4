"""The GPU projection (ddd/bench/projection.py): each phase of a step takes the longest of reading its bytes,
computing its FLOPs and the host issuing its operations; the operations are counted on tiny random models of each
pair's structure (ddd/bench/opcount.py); what the roofline leaves out is fitted on published GPU measurements
(ddd/bench/published.py) and checked against each of them with the rule fitted on the others (leave one out):
docs/results.md holds that table."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from ddd.bench import projection
from ddd.bench.opcount import counted_ops
from ddd.bench.pairshape import forward_flops, pair_ops, tree_tokens
from ddd.bench.projection import (A40, BAND, FIT, H100, ZEROGPU, Gpu, banded, build_parser, phase_seconds, project,
                                  projections, zerogpu_costs)
from ddd.bench.published import FIGURES, band, fit, leave_one_out, table
from ddd.catalog import PAIRS
from ddd.models import DEFAULT_MODEL
from ddd.numbers import readable
from ddd.trace import RunTrace

VICUNA = PAIRS[1]
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results.md"
WITHIN = 0.10  # each figure's leave-one-out error


@pytest.fixture(scope="module")
def checked():
    return leave_one_out()


def test_a_phase_that_reads_more_than_it_computes_or_launches_takes_its_bytes_over_the_bandwidth_it_reaches():
    assert phase_seconds(14e9, 1e9, 1000, A40) == pytest.approx(14e9 / (696e9 * FIT.bandwidth_fraction))


def test_a_phase_that_launches_more_than_it_reads_or_computes_takes_its_operations_times_the_launch_cost():
    assert phase_seconds(1e6, 1e9, 2000, H100) == pytest.approx(2000 * FIT.launch_s)


def test_a_phase_that_computes_more_than_it_reads_or_launches_takes_its_flops_over_the_flops_it_reaches():
    assert phase_seconds(1e6, 1e15, 10, A40) == pytest.approx(1e15 / (149.7e12 * FIT.compute_fraction))


def test_on_a_card_that_computes_slowly_the_trees_forward_takes_its_flops_and_plain_decodings_does_not():
    slow = project(VICUNA, Gpu("slow", 3.35e12, 4e12, ""))
    tree = forward_flops(VICUNA, tree_tokens(VICUNA, "eagle2"))
    assert slow.methods["eagle2"].verify_s == pytest.approx(tree / (4e12 * FIT.compute_fraction))
    assert slow.methods["plain"].verify_s == project(VICUNA, H100).methods["plain"].verify_s


@pytest.mark.slow
def test_the_declared_fit_and_band_are_the_fit_on_the_published_figures_and_the_docs_hold_its_table(checked):
    """`python -m ddd.bench.published` prints the table docs/results.md holds."""
    fitted = fit()
    for name in ("launch_s", "bandwidth_fraction", "compute_fraction", "layer_ops", "token_ops"):
        assert getattr(fitted, name) == pytest.approx(getattr(FIT, name), rel=2e-3), name
    assert band(checked) == BAND
    assert table(checked) in RESULTS.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(FIGURES)))
def test_each_published_figure_projected_by_the_rule_fitted_on_the_others_within_ten_percent(checked, index):
    assert abs(checked[index].error) <= WITHIN, checked[index]


@pytest.mark.slow
def test_no_figure_left_out_is_further_off_than_the_band(checked):
    assert all(abs(c.error) <= BAND for c in checked)


def test_a_projected_figure_carries_the_band():
    assert banded(3.4) == f"3.4x (±{BAND:.0%})" and banded(9.41, " s") == f"9.4 s (±{BAND:.0%})"


@pytest.mark.slow
def test_the_cli_takes_a_cards_bandwidth_and_flops_and_a_tau(capsys):
    usage = build_parser().format_help()
    assert "--bandwidth" in usage and "--tflops" in usage and "--tau" in usage
    projection.main(["--bandwidth", "936", "--tflops", "71", "--card", "RTX 3090", "--tau", "4.35"])
    out = capsys.readouterr().out
    assert "| RTX 3090 |" in out and "936 GB/s, 71 TFLOPS (given on the command line)" in out and "A40" not in out
    vicuna = next(line for line in out.splitlines() if line.startswith(f"| {VICUNA.label} | RTX 3090"))
    given = project(VICUNA, Gpu("RTX 3090", 936e9, 71e12, ""), projection.published(4.35, "").per_method())
    assert f"({readable(given.speedup('eagle2'), 2)}x ±{BAND:.0%})" in vicuna


def test_the_cli_refuses_a_cards_bandwidth_without_its_flops(capsys):
    with pytest.raises(SystemExit):
        projection.main(["--bandwidth", "936"])
    assert "--bandwidth and --tflops go together" in capsys.readouterr().err


def test_a_higher_tau_projects_a_higher_speedup():
    low, high = projections([VICUNA], (A40,), 3.0)[0], projections([VICUNA], (A40,), 5.0)[0]
    assert high.speedup("eagle2") > low.speedup("eagle2") and high.speedup("ddd") > low.speedup("ddd")


def test_a_7b_target_is_bound_by_its_weights_on_the_a40_and_by_the_host_on_the_h100_as_the_small_one_everywhere():
    ops = pair_ops(VICUNA)["plain"].verify
    assert project(VICUNA, A40).methods["plain"].verify_s > ops * FIT.launch_s
    assert project(VICUNA, H100).methods["plain"].verify_s == pytest.approx(ops * FIT.launch_s)
    small = project(PAIRS[0], ZEROGPU)
    assert small.methods["plain"].verify_s == pytest.approx(pair_ops(PAIRS[0])["plain"].verify * FIT.launch_s)


def test_the_hosts_work_per_step_and_per_verified_token_slows_speculation_only():
    bare = replace(FIT, layer_ops=0.0, token_ops=0.0)
    with_host, without = project(VICUNA, H100), project(VICUNA, H100, fit=bare)
    assert with_host.methods["plain"].step_s == without.methods["plain"].step_s
    assert with_host.speedup("eagle2") < without.speedup("eagle2")


def test_each_layer_and_each_draft_call_adds_operations():
    fewer, more = counted_ops(2, False, "eagle", False, ()), counted_ops(4, False, "eagle", False, ())
    assert more["plain"].verify > fewer["plain"].verify and fewer["plain"].calls == 0
    assert fewer["eagle2"].calls == 6 and fewer["eagle2"].per_call > 0  # the papers' six calls
    assert fewer["eagle"].calls == 5  # EAGLE's static tree, five levels deep


def test_on_a_gpu_the_cost_rule_pays_for_draft_calls_and_the_hosts_work_per_verified_token():
    run = project(VICUNA, ZEROGPU)
    costs = run.costs()
    plain = run.methods["plain"].step_s
    assert costs.draft_cost == pytest.approx(run.draft_call_s / plain)
    assert costs.verify_cost == pytest.approx(FIT.token_ops * FIT.launch_s / plain) and costs.verify_base >= 0


def test_a_runs_gpu_costs_are_its_pairs_and_a_pair_outside_the_catalog_has_none():
    run = RunTrace("ddd", {}, {}, DEFAULT_MODEL, "shipped head", "p", 5, head_kind="eagle3")
    assert zerogpu_costs(run) == project(PAIRS[0], ZEROGPU).costs()
    assert zerogpu_costs(RunTrace("ddd", {}, {}, "someone/else", "h", "p", 5, head_kind="eagle")) is None


def test_the_docs_projection_table_is_the_one_the_code_prints():
    rows = re.findall(r"^\| .+ \| (?:ZeroGPU|A40|H100).*\|$", RESULTS.read_text(), re.M)
    assert rows == projection.table(projections()).splitlines()[2:]
