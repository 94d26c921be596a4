"""`python -m ddd.train calibrate`: how often the target accepts a drafted token, by the draft's probability of
it, measured on training prompts and written into the head's config.json (the cost rule reads it; ddd/costs.py).

Greedy decoding with a generous EAGLE-2 tree. Under greedy verification the target's token after every
accepted node is known (the next accepted token, or the step's bonus), so every drafted child of an accepted
node is a sample, verified or not: the draft's probability of it given its parent, and whether it is the
target's token.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ddd.catalog import resolve_head
from ddd.checkpoint import CALIBRATION_KEY
from ddd.costs import CalibrationError, fit_calibration
from ddd.engine import generate
from ddd.models import load_target
from ddd.settings import PRECISIONS
from ddd.trace import Step

from .common import DEFAULT_PROMPTS, TrainError, read_prompts

TREE = {"beam_width": 8, "draft_calls": 8, "total_tokens": 64}


def step_samples(step: Step) -> list[tuple[float, bool]]:
    """(draft probability, accepted) for every drafted child of the step's accepted nodes."""
    path = step.accepted_path
    target_token = {node: step.pool[nxt].token_id for node, nxt in zip(path, path[1:])}
    target_token[path[-1]] = step.bonus_id
    return [(math.exp(node.logprob), node.token_id == target_token[node.parent])
            for node in step.pool if node.parent in target_token]


def measure(target, head, prompts: list[str], new_tokens: int) -> list[tuple[float, bool]]:
    samples: list[tuple[float, bool]] = []
    for number, prompt in enumerate(prompts, 1):
        for step in generate(target, head, prompt, "eagle2", max_new_tokens=new_tokens, **TREE):
            if not step.prefill:
                samples += step_samples(step)
        print(f"{number}/{len(prompts)} prompts, {len(samples):,} samples", file=sys.stderr, flush=True)
    return samples


def cmd_calibrate(args) -> int:
    config_path = Path(args.head) / "config.json"
    if not config_path.is_file():  # before the decoding: the measurement has nowhere to go
        raise TrainError(f"{config_path} does not exist: --head names the head directory to write into.")
    rows = read_prompts(args.prompts)[args.skip: args.skip + args.count]
    target = load_target(args.model, dtype=args.dtype)
    head, note = resolve_head(args.head, target)
    if note:
        print(f"note: {note}", file=sys.stderr)
    samples = measure(target, head, [r["prompt"] for r in rows], args.new_tokens)
    try:
        calibration = fit_calibration(samples)
    except CalibrationError as err:
        raise TrainError(str(err)) from None
    hits = sum(hit for _, hit in samples)
    print(f"{len(samples):,} samples, {hits:,} accepted; draft probability -> acceptance rate:")
    for p, rate in calibration.points:
        print(f"  {p:.3f} -> {rate:.3f}")
    config = json.loads(config_path.read_text())
    config[CALIBRATION_KEY] = calibration.to_json()
    config_path.write_text(json.dumps(config, indent=2))
    print(f"wrote {CALIBRATION_KEY} into {config_path}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure how often drafts are accepted, by draft probability, into the head")
    p.add_argument("--head", default="assets/head", help="the head directory to measure and write into")
    p.add_argument("--model", default=None, help="the target (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="float32", choices=PRECISIONS)
    p.add_argument("--prompts", default=DEFAULT_PROMPTS, help="training prompts (JSONL with `prompt`)")
    p.add_argument("--skip", type=int, default=0, help="prompts skipped first")
    p.add_argument("--count", type=int, default=40, help="prompts decoded")
    p.add_argument("--new-tokens", type=int, default=96, help="tokens decoded per prompt")
    p.set_defaults(func=cmd_calibrate)

