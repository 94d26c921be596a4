"""Hand-built races for the view tests: traces whose every figure is known."""
from __future__ import annotations

from dataclasses import replace

from components import Race
from ddd.costs import StepCosts
from ddd.metrics import summarize
from ddd.trace import DepthCheck, DraftNode, RunTrace, Step


def node(index, text, parent, depth, logprob, status, rank=0, in_beam=False, token_id=None, score=None):
    return DraftNode(index=index, token_id=100 + index if token_id is None else token_id, text=text, parent=parent,
                     depth=depth, logprob=logprob, score=logprob if score is None else score, rank=rank,
                     in_beam=in_beam, status=status)


def small_pool(statuses: dict[int, str] | None = None) -> list[DraftNode]:
    """root -> ' the'(1) -> ' cat'(4) -> ' sat'(7); siblings and pruned candidates around them."""
    s = {1: "accepted", 2: "rejected", 3: "pruned", 4: "accepted", 5: "rejected", 6: "pruned", 7: "rejected",
         8: "pruned"}
    s.update(statuses or {})
    return [
        node(0, "\n", -1, 0, 0.0, "root"),
        node(1, " the", 0, 1, -0.1, s[1], rank=0, in_beam=True),
        node(2, " a", 0, 1, -2.5, s[2], rank=1, in_beam=True),
        node(3, " one", 0, 1, -4.0, s[3], rank=2),
        node(4, " cat", 1, 2, -0.2, s[4], rank=0, in_beam=True, score=-0.3),
        node(5, " dog", 1, 2, -1.9, s[5], rank=1, score=-2.0),
        node(6, " big", 2, 2, -0.5, s[6], rank=0, score=-3.0),
        node(7, " sat", 4, 3, -0.4, s[7], rank=0, score=-0.7),
        node(8, " ran", 4, 3, -2.0, s[8], rank=1, score=-2.3),
    ]


def spec_step(index=1, *, accepted=2, path=(0, 1, 4), bonus=(99, " on"), calls=3, limit=3, checks=(), pool=None,
              draft_ms=30.0, verify_ms=60.0, other_ms=5.0, text=None):
    pool = small_pool() if pool is None else pool
    nodes = {n.index: n for n in pool}
    drafted = "".join(nodes[i].text for i in path[1:1 + accepted])
    return Step(index=index, token_ids=[nodes[i].token_id for i in path[1:1 + accepted]] + [bonus[0]],
                text=drafted + bonus[1] if text is None else text, accepted=accepted, draft_ms=draft_ms,
                verify_ms=verify_ms, other_ms=other_ms, pool=pool, draft_calls=calls, max_draft_calls=limit,
                verified=sum(1 for n in pool if n.status != "pruned"), accepted_path=list(path), bonus_id=bonus[0],
                bonus_text=bonus[1], checks=[DepthCheck(*c) for c in checks],
                confidence=[c[1] for c in checks])


def prefill(ms=120.0, text="Hello"):
    return Step(index=0, token_ids=[7], text=text, accepted=0, verify_ms=ms, prefill=True)


# The hand-made cost run's costs (make_trace's settings for "cost").
HAND_COSTS = StepCosts(draft_cost=0.05, verify_base=0.1, verify_cost=0.04)


def weighing(call, confidence, expected, verified, deeper_expected, deeper_verified, costs=HAND_COSTS):
    """A cost rule's check as ddd.costs.decide records it: the best tree after `call` (E expected of `verified`), the
    forecast tree one call deeper, and whether that one's rate was not the higher (a stop)."""
    time, deeper = costs.time(call, verified), costs.time(call + 1, deeper_verified)
    stop = not (deeper_expected + 1) / deeper > (expected + 1) / time
    return call, confidence, stop, expected, time, verified, deeper_expected - expected, deeper - time


# After three calls: go on (1.30 / 1.44 beats 1.80 / 1.31), go on, then stop (2.65 / 1.58 is under 2.60 / 1.53).
COST_CHECKS = (weighing(1, -0.1, 0.8, 5, 1.3, 7), weighing(2, -0.2, 1.3, 7, 1.6, 8), weighing(3, -0.5, 1.6, 8, 1.65, 8))


def make_trace(method, steps, settings=None, temperature=0.0):
    defaults = {"plain": {}, "eagle2": {"beam_width": 3, "draft_calls": 3, "total_tokens": 8},
                "ddd": {"beam_width": 3, "max_draft_calls": 6, "check_steps": [3, 5], "threshold": -0.3,
                        "total_tokens": 8},
                "cost": {"beam_width": 3, "max_draft_calls": 6, "total_tokens": 8, "draft_cost": 0.05,
                         "verify_base": 0.1, "verify_cost": 0.04}}
    trace = RunTrace(method=method, settings=settings or defaults[method],
                     sampling={"temperature": temperature, "top_p": 1.0, "top_k": 0, "seed": 0}, model="hand-made",
                     head="hand-made", prompt="Say hi", prompt_tokens=5, steps=steps,
                     text="".join(s.text for s in steps), stop_reason="max_new_tokens")
    trace.summary = summarize(steps)
    return trace


# The hand race's answer after its prefill: greedy runs of one race emit the same tokens (components/racecheck.py).
HAND_ANSWER = ((101, " the"), (104, " cat"), (99, " on"), (98, " hey"), (104, " cat"), (99, " on"))


def plain_trace(n=6, ms=50.0):
    tokens = [HAND_ANSWER[i - 1] if i <= len(HAND_ANSWER) else (i, f" w{i}") for i in range(1, n + 1)]
    return make_trace("plain", [prefill()] + [Step(index=i, token_ids=[token], text=text, accepted=0, verify_ms=ms)
                                              for i, (token, text) in enumerate(tokens, 1)])


def hand_race():
    nothing = small_pool({1: "rejected", 4: "rejected"})  # a step that accepted nothing: its path is the root alone
    eagle2 = make_trace("eagle2", [prefill(), spec_step(1), spec_step(2, accepted=0, path=(0,), bonus=(98, " hey"),
                                                                      pool=nothing)])
    hey = small_pool()
    hey[1] = replace(hey[1], token_id=98, text=" hey")  # the answer goes on as EAGLE-2's did
    ddd = make_trace("ddd", [
        prefill(),
        spec_step(1, calls=3, limit=6, checks=[(3, -0.9, True)]),  # early stop: ghost levels 4..6
        spec_step(2, calls=6, limit=6, checks=[(3, -0.1, False), (5, -0.2, False)], pool=hey),  # deeper than EAGLE-2's 3
    ])
    return Race(traces={"plain": plain_trace(), "eagle2": eagle2, "ddd": ddd}, title="hand race")


def cost_race():
    """The hand race with a cost run: it weighed after each of its three draft calls and stopped there."""
    race = hand_race()
    race.traces["cost"] = make_trace("cost", [prefill(), spec_step(calls=3, limit=6, checks=COST_CHECKS)])
    return race


def by_meta(fig, meta):
    return [t for t in fig.data if t.meta == meta]
