"""Bad inputs the safety tests feed the app: crafted run files (each a change to a valid race, or raw bytes)
with the words their message must hold, bad Run settings with theirs, and script payloads."""
from __future__ import annotations

import copy
import gzip
import json
from typing import Any, Callable

from tests.races import hand_race

PAYLOADS = ['<img src=x onerror="window.__xss=1">', "<script>window.__xss=2</script>",
            '<svg onload="window.__xss=3"></svg>', '<a href="javascript:window.__xss=4">link</a>',
            '<iframe srcdoc="<script>parent.__xss=5</script>"></iframe>']


# ---------------------------------------------------------------------------------------------------
# Crafted run files: each a change to a valid race (hand_race) or raw bytes, and the words of its message.
# ---------------------------------------------------------------------------------------------------

DELETE = object()


def race_data() -> dict[str, Any]:
    return copy.deepcopy(hand_race().to_dict())


def changed(changes: dict[str, Any]) -> bytes:
    """A valid race with `changes` applied: dotted paths ("traces.ddd.steps.1.pool.0.parent") to new values."""
    data = race_data()
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        target = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        key = int(last) if isinstance(target, list) else last
        if value is DELETE:
            del target[key]
        else:
            target[key] = value
    return json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")


def raw_json(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1)


POOL = "traces.ddd.steps.1.pool"
STEP = "traces.ddd.steps.1"
DDD = "traces.ddd"
DEEP = 100_000

FILE_CASES: list[tuple[str, Callable[[], bytes], str]] = [
    # Not a race at all.
    ("empty-file", lambda: b"", "not a readable JSON"),
    ("broken-json", lambda: b"{not json", "not a readable JSON"),
    ("json-array", lambda: b"[1, 2]", "not an object"),
    ("json-string", lambda: b'"race"', "not an object"),
    ("json-null", lambda: b"null", "not an object"),
    ("json-number", lambda: b"42", "not an object"),
    ("png-bytes", lambda: b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "not UTF-8"),
    ("latin-1", lambda: '{"title": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    ("huge-integer", lambda: b'{"format": ' + b"9" * 5000 + b"}", "not a readable JSON"),
    ("deep-nesting", lambda: b'{"title": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested too deeply"),
    ("deep-nesting-gz", lambda: gz(b"[" * DEEP + b"]" * DEEP), "nested too deeply"),
    ("gzip-of-junk", lambda: gz(b"{oops"), "not a readable JSON"),
    ("truncated-gzip", lambda: gz(changed({}))[:200], "cannot be decompressed"),
    ("gzip-magic-only", lambda: b"\x1f\x8b\x08\x00garbage", "cannot be decompressed"),
    # The wrapper.
    ("format-img", lambda: changed({"format": PAYLOADS[0]}), "not a DDD Explorer recorded run"),
    ("format-script", lambda: changed({"format": PAYLOADS[1]}), "not a DDD Explorer recorded run"),
    ("format-svg", lambda: changed({"format": PAYLOADS[2]}), "not a DDD Explorer recorded run"),
    ("format-missing", lambda: changed({"format": DELETE}), "not a DDD Explorer recorded run"),
    ("format-number", lambda: changed({"format": 7}), "not a DDD Explorer recorded run"),
    ("version-2", lambda: changed({"version": 2}), "version 2"),
    ("version-true", lambda: changed({"version": True}), "version True"),
    ("version-string", lambda: changed({"version": "1"}), "version"),
    ("version-script", lambda: changed({"version": PAYLOADS[1]}), "version"),
    ("traces-missing", lambda: changed({"traces": DELETE}), "lacks the field traces"),
    ("traces-empty", lambda: changed({"traces": {}}), "holds no runs"),
    ("traces-list", lambda: changed({"traces": [1]}), "holds no runs"),
    ("unknown-method", lambda: changed({"traces.magic": {}}), "unknown method"),
    ("method-html", lambda: changed({"traces.<b>x</b>": {}}), "unknown method"),
    ("extra-field", lambda: changed({"extra": 1}), "unexpected field"),
    ("title-number", lambda: changed({"title": 5}), "title must be text"),
    ("title-nested", lambda: changed({"title": [[[[["x"]]]]]}), "title must be text"),
    ("title-too-long", lambda: changed({"title": "t" * 3000}), "characters long"),
    ("title-surrogate", lambda: raw_json(json.dumps({**race_data(), "title": "\ud800"})), "lone surrogate"),
    ("note-list", lambda: changed({"note": ["a"]}), "note must be text"),
    # A run.
    ("trace-not-object", lambda: changed({DDD: "ddd"}), "must be an object"),
    ("schema-0", lambda: changed({f"{DDD}.schema_version": 0}), "schema version 0"),
    ("schema-missing", lambda: changed({f"{DDD}.schema_version": DELETE}), "schema version None"),
    ("method-mismatch", lambda: changed({f"{DDD}.method": "eagle2"}), "filed under"),
    ("method-unknown", lambda: changed({f"{DDD}.method": "beam"}), "not one of"),
    ("trace-extra-field", lambda: changed({f"{DDD}.bogus": 1}), "unexpected field"),
    ("trace-missing-prompt", lambda: changed({f"{DDD}.prompt": DELETE}), "lacks the field prompt"),
    ("prompt-number", lambda: changed({f"{DDD}.prompt": 12}), "prompt must be text"),
    ("prompt-too-long", lambda: changed({f"{DDD}.prompt": "p" * 200_001}), "characters long"),
    ("model-object", lambda: changed({f"{DDD}.model": {"a": 1}}), "model must be text"),
    ("head-number", lambda: changed({f"{DDD}.head": 3}), "head must be text"),
    ("device-too-long", lambda: changed({f"{DDD}.device": "d" * 5000}), "characters long"),
    ("precision-unknown", lambda: changed({f"{DDD}.precision": "float8"}), "not one of"),
    ("prompt-tokens-negative", lambda: changed({f"{DDD}.prompt_tokens": -5}), "outside"),
    ("prompt-tokens-text", lambda: changed({f"{DDD}.prompt_tokens": "many"}), "whole number"),
    ("settings-list", lambda: changed({f"{DDD}.settings": [1]}), "must be an object"),
    ("settings-unknown", lambda: changed({f"{DDD}.settings.depth": 3}), "unexpected field"),
    ("beam-width-string", lambda: changed({f"{DDD}.settings.beam_width": "8"}), "whole number"),
    ("beam-width-zero", lambda: changed({f"{DDD}.settings.beam_width": 0}), "outside"),
    ("beam-width-huge", lambda: changed({f"{DDD}.settings.beam_width": 5000}), "outside 1..32"),
    ("old-and-new-width", lambda: changed({f"{DDD}.settings.top_k": 8}), "unexpected field 'top_k'"),
    ("threshold-nan", lambda: raw_json(json.dumps(race_data()).replace('"threshold": -0.3', '"threshold": NaN')),
     "not a finite number"),
    ("threshold-positive", lambda: changed({f"{DDD}.settings.threshold": 0.5}), "outside -1000..0"),
    ("check-steps-word", lambda: changed({f"{DDD}.settings.check_steps": "some"}), "must be a list"),
    ("check-steps-too-deep", lambda: changed({f"{DDD}.settings.check_steps": [20]}), "impossible"),
    ("sampling-temperature", lambda: changed({f"{DDD}.sampling.temperature": -1}), "outside"),
    ("sampling-seed-huge", lambda: changed({f"{DDD}.sampling.seed": 2**70}), "outside"),
    ("sampling-seed-text", lambda: changed({f"{DDD}.sampling.seed": "abc"}), "whole number"),
    ("sampling-unknown", lambda: changed({f"{DDD}.sampling.beam": 1}), "unexpected field"),
    ("summary-partial", lambda: changed({f"{DDD}.summary": {"tau": 1.0}}), "lacks the fields"),
    ("summary-text", lambda: changed({f"{DDD}.summary.tau": "fast"}), "must be a number"),
    # Steps.
    ("steps-string", lambda: changed({f"{DDD}.steps": "abc"}), "must be a list, not text"),
    ("steps-null", lambda: changed({f"{DDD}.steps": None}), "must be a list, not null"),
    ("steps-zero", lambda: changed({f"{DDD}.steps": []}), "is empty"),
    ("steps-too-many", lambda: changed({f"{DDD}.steps": [0] * 5000}), "at most 4096"),
    ("step-number", lambda: changed({STEP: 5}), "must be an object"),
    ("step-index", lambda: changed({f"{STEP}.index": 7}), "is 7, but the step is number 1"),
    ("step-missing-text", lambda: changed({f"{STEP}.text": DELETE}), "lacks the field text"),
    ("step-extra", lambda: changed({f"{STEP}.speed": 1}), "unexpected field"),
    ("token-ids-string", lambda: changed({f"{STEP}.token_ids": "12"}), "must be a list"),
    ("token-id-negative", lambda: changed({f"{STEP}.token_ids.0": -1}), "outside"),
    ("token-id-float", lambda: changed({f"{STEP}.token_ids.0": 1.5}), "whole number"),
    ("token-id-bool", lambda: changed({f"{STEP}.token_ids.0": True}), "true/false"),
    ("step-text-number", lambda: changed({f"{STEP}.text": 3}), "must be text"),
    ("draft-ms-text", lambda: changed({f"{STEP}.draft_ms": "fast"}), "must be a number"),
    ("draft-ms-nan", lambda: raw_json(json.dumps(race_data()).replace('"draft_ms": 30.0', '"draft_ms": NaN', 1)),
     "not a finite number"),
    ("draft-ms-infinity", lambda: raw_json(json.dumps(race_data()).replace('"draft_ms": 30.0', '"draft_ms": Infinity',
                                                                          1)), "not a finite number"),
    ("draft-ms-negative", lambda: changed({f"{STEP}.draft_ms": -1}), "outside"),
    ("draft-ms-huge", lambda: changed({f"{STEP}.draft_ms": 1e300}), "outside"),
    ("prefill-text", lambda: changed({f"{STEP}.prefill": "yes"}), "true or false"),
    ("confidence-positive", lambda: changed({f"{STEP}.confidence": [1.0]}), "outside"),
    ("checks-missing-stop", lambda: changed({f"{STEP}.checks.0.stop": DELETE}), "lacks the field stop"),
    ("checks-call-zero", lambda: changed({f"{STEP}.checks.0.call": 0}), "outside"),
    ("draft-calls-negative", lambda: changed({f"{STEP}.draft_calls": -1}), "outside"),
    ("verified-huge", lambda: changed({f"{STEP}.verified": 10**9}), "outside"),
    ("bonus-id-text", lambda: changed({f"{STEP}.bonus_id": "x"}), "whole number"),
    ("bonus-text-list", lambda: changed({f"{STEP}.bonus_text": ["x"]}), "must be text"),
    ("chain-end-unknown", lambda: changed({f"{STEP}.chain_end": "<b>lost</b>"}), "not one of tree_end"),
    # Draft trees.
    ("pool-string", lambda: changed({POOL: "nodes"}), "must be a list"),
    ("pool-too-big", lambda: changed({POOL: [0] * 40_001}), "at most 40000"),
    ("node-missing-field", lambda: changed({f"{POOL}.1.score": DELETE}), "lacks the field score"),
    ("node-own-parent", lambda: changed({f"{POOL}.1.parent": 1}), "is the node itself"),
    ("node-cycle", lambda: changed({f"{POOL}.1.parent": 4, f"{POOL}.4.parent": 1}), "comes later in the pool"),
    ("node-parent-missing", lambda: changed({f"{POOL}.1.parent": 999}), "is not in the pool"),
    ("root-not-first", lambda: changed({f"{POOL}.0.status": "accepted"}), "must be the root"),
    ("root-with-parent", lambda: changed({f"{POOL}.0.parent": 0}), "must be the root"),
    ("second-root", lambda: changed({f"{POOL}.2.status": "root"}), "only the first node"),
    ("duplicate-index", lambda: changed({f"{POOL}.2.index": 1}), "repeats node"),
    ("depth-mismatch", lambda: changed({f"{POOL}.1.depth": 5}), "its parent's is"),
    ("status-unknown", lambda: changed({f"{POOL}.1.status": "<b>maybe</b>"}), "not one of"),
    ("logprob-positive", lambda: changed({f"{POOL}.1.logprob": 5.0}), "outside"),
    ("rank-negative", lambda: changed({f"{POOL}.1.rank": -1}), "outside"),
    ("in-beam-text", lambda: changed({f"{POOL}.1.in_beam": "no"}), "true or false"),
    ("node-text-too-long", lambda: changed({f"{POOL}.1.text": "n" * 3000}), "characters long"),
    ("node-text-surrogate", lambda: raw_json(json.dumps(race_data()).replace('" the"', '"\\udc00"', 1)),
     "lone surrogate"),
    ("path-skips-root", lambda: changed({f"{STEP}.accepted_path": [1, 4]}), "not a path from the root"),
    ("path-unknown-node", lambda: changed({f"{STEP}.accepted_path": [0, 77]}), "not a node of the pool"),
    ("accepted-past-path", lambda: changed({f"{STEP}.accepted": 3}), "accepted path holds only"),
    ("path-without-pool", lambda: changed({"traces.plain.steps.1.accepted_path": [0]}), "has no draft pool"),
    # A single run file.
    ("single-run-bad-steps", lambda: json.dumps({**race_data()["traces"]["ddd"], "steps": "x"}).encode(),
     "must be a list"),
]
FILE_IDS = [c[0] for c in FILE_CASES]
assert len(set(FILE_IDS)) == len(FILE_IDS)


# The Run button's inputs in the panel's order (the API's arguments), with each tree setting by its declared name.
GOOD = dict(prompt="the cat", max_new_tokens=24, temperature=0.0, top_p=1.0, seed=0, precision="float32",
            beam_width=4, draft_calls=4, total_tokens=20, max_draft_calls=8, check_steps="3,5,7", threshold=-0.3,
            pin_costs=False, draft_cost=0.05, verify_base=0.1, verify_cost=0.04)
SEED_RANGE = "from 0 to 9,223,372,036,854,775,807"
CHECKS = "'all' or draft calls from 1 to 24, such as 5,7,9"
INPUT_CASES = [
    ("prompt", "", "empty"),
    ("prompt", "   \n", "empty"),
    ("prompt", None, "empty"),
    ("prompt", 42, "must be text"),
    ("prompt", "a\ud800b", "lone surrogate"),
    ("prompt", "x" * 20_001, "20,001 characters"),
    ("max_new_tokens", 0, "max new tokens must be a whole number from 1 to 512, not 0"),
    ("max_new_tokens", 513, "from 1 to 512, not 513"),
    ("max_new_tokens", float("nan"), "from 1 to 512, not nan"),
    ("max_new_tokens", 8.5, "not 8.5: a whole number"),
    ("max_new_tokens", "many", "must be a whole number from 1 to 512, not 'many'"),
    ("max_new_tokens", "٣", "only the digits 0-9"),
    ("temperature", -0.1, "temperature must be a number from 0 to 2"),
    ("temperature", float("inf"), "not inf"),
    ("top_p", 0, "top-p must be a number from 0.01 to 1"),
    ("seed", 2**63, SEED_RANGE),
    ("seed", 2**64 + 5, SEED_RANGE),
    ("seed", -1, SEED_RANGE),
    ("seed", 1.5, "whole number"),
    ("seed", float("nan"), "whole number"),
    ("seed", "abc", "whole number"),
    ("seed", None, "whole number"),
    ("precision", "float8", "precision must be one of"),
    ("precision", None, "precision must be one of"),
    ("beam_width", 0, "EAGLE-2 / DDD: beam width must be a whole number from 1 to 32"),
    ("draft_calls", 17, "EAGLE-2: draft calls must be a whole number from 1 to 16"),
    ("total_tokens", 1, "EAGLE-2 / DDD: total tokens verified"),
    ("max_draft_calls", None, "DDD: max draft calls is empty"),
    ("check_steps", "", "DDD: check after calls is empty"),
    ("check_steps", "   ", "DDD: check after calls is empty"),
    ("check_steps", None, "DDD: check after calls is empty"),
    ("check_steps", ",,,", "lists no draft calls"),
    ("check_steps", "3,99", "DDD: check after calls must be " + CHECKS + ", not 99"),
    ("check_steps", "3,20", "lists draft call 20, after the last one DDD may make (max draft calls: 8)"),
    ("check_steps", "0", CHECKS + ", not 0"),
    ("check_steps", "-1", CHECKS),
    ("check_steps", "a,b", CHECKS),
    ("check_steps", "5;7", CHECKS),
    ("check_steps", "①", "only the digits 0-9"),
    ("check_steps", PAYLOADS[0], CHECKS),
    ("check_steps", "\udfff", "lone surrogate"),
    ("threshold", float("nan"), "DDD: threshold on H must be a number from -1,000 to 0, not nan"),
    ("threshold", float("-inf"), "not -inf"),
    ("threshold", 0.5, "never above 0"),
    ("threshold", None, "empty"),
    ("threshold", "low", "must be a number"),
]


def evil_race() -> bytes:
    """A valid race whose every free text field carries a payload. The answer's payload leads every run's first
    decoded step, so that each run's text still shows its tokens in order and the greedy runs still agree."""
    data = race_data()
    changes = {"title": PAYLOADS[2], "note": PAYLOADS[1]}
    for method in ("plain", "eagle2", "ddd"):
        trace = data["traces"][method]
        first = next(i for i, step in enumerate(trace["steps"]) if not step["prefill"] and step["token_ids"])
        texts = [PAYLOADS[4] * (i == first) + step["text"] for i, step in enumerate(trace["steps"])]
        changes[f"traces.{method}.steps.{first}.text"] = texts[first]
        changes[f"traces.{method}.text"] = "".join(texts)
        changes[f"traces.{method}.prompt"] = PAYLOADS[0]
        changes[f"traces.{method}.model"] = PAYLOADS[3]
        changes[f"traces.{method}.device"] = PAYLOADS[4]
    return changed(changes)
