"""The draft trees the engine builds on the test models, recorded once so that a change made for speed can be
shown to build exactly the same trees, accept exactly the same paths and emit the same tokens.

    python -m tests.recorded_trees      # writes tests/data/trees.json (only when the trees are meant to change)

The runs: the tiny Llama target with a random EAGLE head, its fitted EAGLE head and its fitted EAGLE-3 head, every
method at every tree setting the losslessness tests use (tests/tiny.py TREE_SETTINGS; the cost rule at its pinned
costs: measuring ones follow the machine's timings), greedy, on two prompts.
A step is kept as its accepted count beside a digest of its pool (tokens, parents, ranks), the pool indices it
verified, its accepted path, its draft calls and its tokens (integers only, so that it compares exactly), so
that a difference names its run and step.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from ddd import generate, new_head
from tests.tiny import TREE_SETTINGS, fit_eagle3_head, fit_head, load_tiny, save_tiny_model

RECORD = Path(__file__).parent / "data" / "trees.json"
PROMPTS = ["the cat sat", "one two three"]
MAX_NEW_TOKENS = 24


def step_record(step) -> str:
    """`accepted:digest` of one speculative step."""
    pool = step.pool
    whole = {"tokens": [n.token_id for n in pool], "parents": [n.parent for n in pool],
             "ranks": [n.rank for n in pool], "kept": [n.index for n in pool if n.status != "pruned"],
             "path": step.accepted_path, "calls": step.draft_calls, "emitted": step.token_ids}
    digest = hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()[:12]
    return f"{step.accepted}:{digest}"


def runs_of(target, heads: dict[str, Any]) -> dict[str, list[str]]:
    """Every recorded run, keyed by head, method, settings and prompt."""
    out = {}
    for head_name, head in heads.items():
        for method, variants in TREE_SETTINGS.items():
            for settings in variants:
                if method == "cost" and not settings.get("pin_costs"):
                    continue  # a measuring cost rule's trees follow this machine's timings
                for prompt in PROMPTS:
                    run = generate(target, head, prompt, method, max_new_tokens=MAX_NEW_TOKENS, **settings)
                    steps = [step_record(s) for s in run if not s.prefill]
                    out[f"{head_name} {method} {json.dumps(settings, sort_keys=True)} {prompt!r}"] = steps
    return out


def heads_for(target) -> dict[str, Any]:
    return {"random eagle": new_head(target, seed=3), "fitted eagle": fit_head(target),
            "fitted eagle3": fit_eagle3_head(target)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = load_tiny(save_tiny_model(Path(tmp), "llama"))
        runs = runs_of(target, heads_for(target))
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(runs, indent=0) + "\n")
    print(f"{RECORD}: {len(runs)} runs, {sum(len(v) for v in runs.values())} steps")


if __name__ == "__main__":
    main()
