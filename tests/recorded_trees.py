"""The draft trees the engine builds on the test models, recorded once so that a change made for speed can be
shown to build exactly the same trees, accept exactly the same paths and emit the same tokens.

    python -m tests.recorded_trees      # writes tests/data/trees.json (only when the trees are meant to change)

The runs: the tiny Llama target with a random EAGLE head, its fitted EAGLE head and its fitted EAGLE-3 head, every
method at every tree setting the losslessness tests use (tests/tiny.py TREE_SETTINGS; the cost rule at its pinned
costs: measuring ones follow the machine's timings), greedy, on two prompts.
A step is kept as its accepted count beside a digest of its pool (tokens, parents, ranks), the pool indices it
verified, its accepted path, its draft calls and its tokens (integers only, so that it compares exactly), so
that a difference names its run and step.

The record is made with PyTorch's AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`, with MKL and oneDNN held to AVX2 as
well). Other instruction sets (AVX-512, or none) sum in another order: the random initialisation of the test
models moves in its last bit, the fitted heads' 300 training steps grow that into other weights, and every tree
changes. So the record is checked two ways (tests/test_recorded_trees.py):
- exactly, with the models built and run under AVX2 kernels (a subprocess pins them where this CPU's differ);
- with this CPU's own kernels running those same AVX2-built models: a step may then differ from the record only
  where one of its ranking decisions (a top-k, a sort, an argmax) was a near-tie, two values closer than
  NEAR_TIE, and the rest of that run is then not compared (its context differs from there on).

    python -m tests.recorded_trees --save DIR            # builds the models and heads here and saves them in DIR
    python -m tests.recorded_trees --check DIR [--near-tie] # checks the record on the models saved in DIR
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ddd import generate, new_eagle3_head, new_head
from tests.tiny import TREE_SETTINGS, fit_eagle3_head, fit_head, load_tiny, save_tiny_model

RECORD = Path(__file__).parent / "data" / "trees.json"
PROMPTS = ["the cat sat", "one two three"]
MAX_NEW_TOKENS = 24
# Two logits or scores closer than this may rank either way under another instruction set. Float32 rounding moves
# the test models' logits by about 1e-6 between kernels (measured: AVX2 against no vector instructions, the same
# weights); a hundred times that leaves room for deeper draft levels, which compound it.
NEAR_TIE = 1e-4
# The environment that makes PyTorch, MKL and oneDNN run the record's kernels on any x86 CPU with AVX2.
AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
HEAD_FILES = {"random eagle": "random_eagle.pt", "fitted eagle": "fitted_eagle.pt", "fitted eagle3": "fitted_eagle3.pt"}


def step_record(step) -> str:
    """`accepted:digest` of one speculative step."""
    pool = step.pool
    whole = {"tokens": [n.token_id for n in pool], "parents": [n.parent for n in pool],
             "ranks": [n.rank for n in pool], "kept": [n.index for n in pool if n.status != "pruned"],
             "path": step.accepted_path, "calls": step.draft_calls, "emitted": step.token_ids}
    digest = hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()[:12]
    return f"{step.accepted}:{digest}"


class NearTies(TorchDispatchMode):
    """Watches every top-k, sort and argmax PyTorch runs and keeps the smallest gap between two values whose
    order it decided: within the top k + 1 of a top-k (the order of the k and the cut after them), between
    neighbours of a sort, between the two largest of an argmax."""

    RANKING = {torch.ops.aten.topk, torch.ops.aten.sort, torch.ops.aten.argmax}

    def __init__(self) -> None:
        super().__init__()
        self.margin = math.inf

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in self.RANKING and args[0].is_floating_point() and args[0].numel() > 1:
            self.margin = min(self.margin, self._gap(func.overloadpacket, args, kwargs))
        return out

    @staticmethod
    def _gap(op, args, kwargs) -> float:
        values = args[0].float()
        if op is torch.ops.aten.topk:
            dim, decided = args[2] if len(args) > 2 else kwargs.get("dim", -1), args[1] + 1
            if not (args[3] if len(args) > 3 else kwargs.get("largest", True)):
                values = -values
        elif op is torch.ops.aten.argmax:
            dim, decided = args[1] if len(args) > 1 else kwargs.get("dim"), 2
        else:
            dim, decided = args[1] if len(args) > 1 else kwargs.get("dim", -1), values.numel()
        if dim is None:  # an argmax over the whole tensor
            values, dim = values.reshape(-1), 0
        ordered = values.sort(dim=dim, descending=True).values
        gaps = ordered.narrow(dim, 0, min(decided, ordered.shape[dim])).diff(dim=dim).abs()
        gaps = gaps[torch.isfinite(gaps)]
        return float(gaps.min()) if gaps.numel() else math.inf


@dataclass(frozen=True)
class RecordedRun:
    head: str
    method: str
    settings: dict[str, Any]
    prompt: str

    @property
    def key(self) -> str:
        return f"{self.head} {self.method} {json.dumps(self.settings, sort_keys=True)} {self.prompt!r}"


def recorded_runs() -> list[RecordedRun]:
    """Every recorded run: each head, method, tree setting and prompt."""
    return [RecordedRun(head, method, settings, prompt) for head in HEAD_FILES for method, variants in
            TREE_SETTINGS.items() for settings in variants for prompt in PROMPTS
            if method != "cost" or settings.get("pin_costs")]  # a measuring cost rule follows this machine's timings


def steps_of(target, heads: dict[str, Any], run: RecordedRun) -> Iterator:
    return (s for s in generate(target, heads[run.head], run.prompt, run.method, max_new_tokens=MAX_NEW_TOKENS,
                                **run.settings) if not s.prefill)


def runs_of(target, heads: dict[str, Any]) -> dict[str, list[str]]:
    """Every recorded run as this process's kernels make it, keyed as the record is."""
    return {run.key: [step_record(s) for s in steps_of(target, heads, run)] for run in recorded_runs()}


def margin_at(target, heads: dict[str, Any], key: str, index: int) -> float:
    """The narrowest ranking decision of one step of one run, decoded again with NearTies watching (watching
    slows every operation, so only a step that differed pays for it)."""
    run = next(r for r in recorded_runs() if r.key == key)
    steps = steps_of(target, heads, run)
    for _ in range(index):
        next(steps)
    with NearTies() as ties:
        next(steps)
    return ties.margin


@dataclass(frozen=True)
class Comparison:
    differences: list[str]  # runs that differ where no near-tie excuses them
    near_ties: list[str]  # runs that part from the record at a near-tie, and where

    def message(self) -> str:
        return "; ".join(self.differences)


def compare(now: dict[str, list[str]], recorded: dict[str, list[str]],
            margin: Callable[[str, int], float] | None = None, near_tie: float = NEAR_TIE) -> Comparison:
    """Each run step by step against the record. Without `margin`, every step must equal its record; with it (the
    narrowest ranking decision of a run's step), a run may part from the record at a step whose narrowest decision
    was under near_tie, and is not compared after it."""
    if now.keys() != recorded.keys():
        return Comparison([f"the runs are not the recorded ones: {sorted(now.keys() ^ recorded.keys())}"], [])
    differences, near_ties = [], []
    for key, steps in now.items():
        i = next((i for i, (a, b) in enumerate(zip(steps, recorded[key])) if a != b), None)
        gap = margin(key, i) if margin is not None and i is not None else math.inf
        if gap < near_tie:
            near_ties.append(f"{key}: step {i} (a gap of {gap:.1e})")
        elif i is not None:
            differences.append(f"{key}: step {i} differs from the record (accepted:digest {steps[i]} against "
                               f"{recorded[key][i]}" + (f"; its narrowest decision {gap:.1e} apart)" if margin else ")"))
        elif len(steps) != len(recorded[key]):
            differences.append(f"{key}: {len(steps)} steps against {len(recorded[key])} recorded")
    return Comparison(differences, near_ties)


def heads_for(target) -> dict[str, Any]:
    """The heads of the record, built on `target` (the fitted ones are trained here: seconds)."""
    return {"random eagle": new_head(target, seed=3), "fitted eagle": fit_head(target),
            "fitted eagle3": fit_eagle3_head(target)}


def save_heads(directory: Path, heads: dict[str, Any]) -> None:
    """The heads' weights in `directory`, beside the target in `directory/model`, for another process."""
    for name, head in heads.items():
        torch.save(head.state_dict(), directory / HEAD_FILES[name])


def load_models(directory: Path) -> tuple[Any, dict[str, Any]]:
    target = load_tiny(directory / "model")
    shapes = {"random eagle": new_head(target), "fitted eagle": new_head(target),
              "fitted eagle3": new_eagle3_head(target, layers=(0, 1, 2))}
    for name, head in shapes.items():
        head.load_state_dict(torch.load(directory / HEAD_FILES[name], weights_only=True))
        head.eval().requires_grad_(False)
    return target, shapes


def kernels() -> str:
    """The instruction set PyTorch's kernels use in this process (AVX2, AVX512, DEFAULT, ...)."""
    return torch.backends.cpu.get_cpu_capability()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", type=Path, metavar="DIR", help="build the models here and save them in DIR")
    parser.add_argument("--check", type=Path, metavar="DIR", help="check the record on the models saved in DIR")
    parser.add_argument("--near-tie", action="store_true", help=f"excuse steps that part at gaps under {NEAR_TIE}")
    args = parser.parse_args()
    if args.check:
        target, heads = load_models(args.check)
        tied = (lambda key, i: margin_at(target, heads, key, i)) if args.near_tie else None
        result = compare(runs_of(target, heads), json.loads(RECORD.read_text()), tied)
        print(json.dumps({"kernels": kernels(), "differences": result.differences, "near_ties": result.near_ties}))
        raise SystemExit(1 if result.differences else 0)
    if kernels() != "AVX2" or os.environ.get("MKL_ENABLE_INSTRUCTIONS") != "AVX2":
        raise SystemExit(f"run with {' '.join(f'{k}={v}' for k, v in AVX2_KERNELS.items())}: the record is made "
                         f"with AVX2 kernels (these are {kernels()})")
    with tempfile.TemporaryDirectory() as tmp:
        target = load_tiny(save_tiny_model(Path(args.save or tmp) / "model", "llama"))
        heads = heads_for(target)
        if args.save:
            save_heads(args.save, heads)
            return
        runs = runs_of(target, heads)
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(runs, indent=0) + "\n")
    print(f"{RECORD}: {len(runs)} runs, {sum(len(v) for v in runs.values())} steps")


if __name__ == "__main__":
    main()
