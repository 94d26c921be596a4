"""Speed work keeps the trees: every step on the test models builds the pool, verifies the nodes, accepts the path
and emits the tokens recorded before it, exactly under the record's AVX2 kernels, and up to near-ties under
another instruction set's (tests/recorded_trees.py says how the record is made and why both)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddd import new_head
from tests.recorded_trees import (AVX2_KERNELS, RECORD, NearTies, compare, kernels, load_models, margin_at, runs_of,
                                  save_heads)

ROOT = Path(__file__).parent.parent


def recorded() -> dict[str, list[str]]:
    return json.loads(RECORD.read_text())


def check_in_subprocess(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.recorded_trees", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=600)


@pytest.fixture(scope="module")
def avx2_models(llama, llama_head, llama_eagle3_head, tiny_llama_dir, tmp_path_factory) -> Path:
    """The test models as the record's kernels build them, saved for a process with other kernels: this session's
    own where it runs AVX2 kernels, else built again in a process pinned to them."""
    directory = tmp_path_factory.mktemp("avx2-models")
    if kernels() == "AVX2":
        (directory / "model").symlink_to(tiny_llama_dir, target_is_directory=True)
        save_heads(directory, {"random eagle": new_head(llama, seed=3), "fitted eagle": llama_head,
                               "fitted eagle3": llama_eagle3_head})
        return directory
    built = check_in_subprocess(AVX2_KERNELS, "--save", str(directory))
    if built.returncode:
        pytest.fail(f"the models could not be built under AVX2 kernels: {built.stderr[-2000:]}")
    return directory


def test_the_avx2_kernels_build_every_recorded_step(llama, llama_head, llama_eagle3_head, avx2_models):
    if kernels() == "AVX2":
        heads = {"random eagle": new_head(llama, seed=3), "fitted eagle": llama_head, "fitted eagle3": llama_eagle3_head}
        result = compare(runs_of(llama, heads), recorded())
        assert not result.differences, result.message()
        return
    checked = check_in_subprocess(AVX2_KERNELS, "--check", str(avx2_models))
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]


@pytest.mark.slow
def test_other_kernels_build_every_recorded_step_up_to_near_ties(avx2_models):
    """This CPU's own kernels where they are not AVX2 (AVX-512, say); on an AVX2 CPU, the kernels without vector
    instructions, so that the comparison up to near-ties runs on every machine."""
    if kernels() == "AVX2":
        other = check_in_subprocess({"ATEN_CPU_CAPABILITY": "default"}, "--check", str(avx2_models), "--near-tie")
        assert other.returncode == 0, other.stdout[-4000:] + other.stderr[-2000:]
        found = json.loads(other.stdout.strip().splitlines()[-1])
        assert found["kernels"] == "DEFAULT"
    else:
        target, heads = load_models(avx2_models)
        result = compare(runs_of(target, heads), recorded(), lambda key, i: margin_at(target, heads, key, i))
        assert not result.differences, result.message()
        found = {"near_ties": result.near_ties}
    # A near-tie excuses a run from its first differing step on: most runs must still match to their end.
    assert len(found["near_ties"]) <= len(recorded()) // 4, found["near_ties"]


def test_a_changed_step_fails_unless_it_was_a_near_tie():
    record = {"run": ["2:aaaa", "1:bbbb", "3:cccc"]}
    changed = {"run": ["2:aaaa", "2:beef", "0:dddd"]}
    assert compare({"run": list(record["run"])}, record).differences == []
    assert compare(changed, record).differences[0].startswith("run: step 1 differs")
    assert compare(changed, record, lambda key, i: 0.01).differences[0].startswith("run: step 1 differs")
    assert compare(changed, record, lambda key, i: 1e-6).differences == []
    assert compare(changed, record, lambda key, i: 1e-6).near_ties == ["run: step 1 (a gap of 1.0e-06)"]
    assert compare({"run": record["run"][:2]}, record, lambda key, i: 1e-6).differences == [
        "run: 2 steps against 3 recorded"]


def test_near_ties_are_measured_where_an_order_is_decided():
    with NearTies() as top2:
        torch.tensor([3.0, 1.0, 2.5, 0.0]).topk(2)  # decides 3 > 2.5 > the rest: 1.0 and 0.5 apart
    with NearTies() as best:
        torch.tensor([[1.0, 1.25, 0.0]]).argmax(dim=-1)
    with NearTies() as integers:
        torch.tensor([1, 1, 2]).sort()
    assert (top2.margin, best.margin, integers.margin) == (0.5, 0.25, math.inf)
