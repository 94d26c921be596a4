"""Speed work keeps the trees: every step on the test models builds the pool, verifies the nodes, accepts the path
and emits the tokens recorded before it (tests/recorded_trees.py says how the record is made)."""
import json

from ddd import new_head
from tests.recorded_trees import RECORD, runs_of


def test_every_step_is_the_recorded_one(llama, llama_head, llama_eagle3_head):
    recorded = json.loads(RECORD.read_text())
    heads = {"random eagle": new_head(llama, seed=3), "fitted eagle": llama_head, "fitted eagle3": llama_eagle3_head}
    now = runs_of(llama, heads)
    assert now.keys() == recorded.keys()
    for key, steps in now.items():
        differs = next((i for i, (a, b) in enumerate(zip(steps, recorded[key])) if a != b), None)
        assert differs is None and len(steps) == len(recorded[key]), (
            f"{key}: step {differs} differs from the record (accepted:digest {steps[differs] if differs is not None else ''}"
            f" against {recorded[key][differs] if differs is not None else ''}; {len(steps)} steps against {len(recorded[key])})")
