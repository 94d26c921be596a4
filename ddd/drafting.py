"""Drafting strategies behind one interface: a static tree (EAGLE), a dynamic tree (EAGLE-2), and a
dynamic tree whose depth a policy chooses per step: from the draft's confidence (DDD) or from expected
gains and measured costs (the cost rule)."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from .head import DraftHead
from .models import Target
from .costs import Calibration, CostMeter, StepCosts, best_tree, child_probabilities, decide
from .settings import CostSettings, DDDSettings, Eagle2Settings, EagleSettings
from .trace import FILE_DECIMALS, CostsUsed, DepthCheck, Step
from .tree import DraftTree, Pool, rerank


class HeadRunner:
    """Runs the draft head: its KV cache holds only accepted context; tree nodes go on top and are dropped.

    Context positions take the target's features (fused by the head); tree nodes take their parent's output.
    A step's tree mask lives in one buffer: row 0 sees the context only (the root's row), row s + 1 is tree slot
    s's (the context, its ancestors, itself), so a call's rows are its parents' rows plus one entry each. Rotary
    embeddings come from a table of positions (each row is what the head's rotary gives that position alone).
    """

    def __init__(self, head: DraftHead, target: Target):
        self.head = head
        self.embed = head.embedding(target)
        self.vocab_ids = head.draft_to_target()
        self.draft_lm = head.draft_lm(target)
        self.cache = DynamicCache(config=head.config)
        self.dtype, self.device = target.model.dtype, target.device
        self.min_value = torch.finfo(target.lm_weight.dtype).min
        self._tree_start = 0
        self._slots = 0
        self._rows = torch.zeros(0, 0, device=target.device)
        self._cos = self._sin = torch.zeros(1, 0, 0, device=target.device)

    @property
    def context_length(self) -> int:
        return self.cache.get_seq_length()

    def logprobs(self, features: torch.Tensor) -> torch.Tensor:
        """Draft log-probabilities over the draft vocabulary from head outputs."""
        logits = self.draft_lm(features)
        return torch.log_softmax(logits if logits.dtype == torch.float32 else logits.float(), dim=-1)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.vocab_ids is None else self.vocab_ids[draft_ids]

    def _rope(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary cos and sin of positions start .. start + count - 1, (1, count, D)."""
        if start + count > self._cos.shape[1]:  # grown by doubling: a run reads it a few times, not every step
            length = max(2 * (start + count), 256)
            positions = torch.arange(length, device=self.device)[None]
            self._cos, self._sin = self.head.rotary(torch.zeros(0, dtype=self.dtype, device=self.device), positions)
        return self._cos.narrow(1, start, count), self._sin.narrow(1, start, count)

    def extend(self, next_tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Feed accepted positions (target features f_t with tokens x_{t+1}); returns the last output (H,)."""
        start = self.context_length
        n = next_tokens.numel()
        # Position start + i sees every position up to itself: everything above that diagonal is masked.
        mask = torch.full((n, start + n), self.min_value, dtype=self.dtype, device=self.device).triu_(start + 1)
        out = self.head(self.embed(next_tokens.view(1, -1)), self.head.fuse(features.view(1, n, -1)), None,
                        mask.view(1, 1, n, start + n), self.cache, self._rope(start, n))
        return out[0, -1]

    def begin_tree(self, slots: int) -> None:
        """A new tree of at most `slots` expanded nodes."""
        self._tree_start = start = self.context_length
        self._slots = 0
        self._rows = torch.full((slots + 1, start + slots), self.min_value, dtype=self.dtype, device=self.device)
        self._rows[:, :start] = 0

    def expand(self, tokens: torch.Tensor, parent_features: torch.Tensor, depth: int, parent_rows: torch.Tensor):
        """Run tree nodes of one depth at once; each sees the context, its expanded ancestors and itself.

        parent_rows gives each node's parent's mask row (0: the root; what an earlier call returned otherwise).
        Returns the nodes' predicted features (n, H) and the row of the first (the others' follow it), for their
        children.
        """
        n = tokens.numel()
        first, start = self._slots, self._tree_start
        end = start + first + n
        rows = self._rows[parent_rows]
        rows.diagonal(start + first).fill_(0)  # each node sees itself
        self._rows[first + 1 : first + 1 + n] = rows
        self._slots += n
        hidden = self.head.next_hidden(parent_features).view(1, n, -1)
        out = self.head(self.embed(tokens.view(1, -1)), hidden, None, rows[:, :end].view(1, 1, n, end), self.cache,
                        self._rope(start - 1 + depth, 1))
        return out[0], first + 1

    def end_tree(self) -> None:
        removed = self.context_length - self._tree_start
        if removed:
            self.cache.crop(-removed)


@dataclass
class Draft:
    """What a drafter hands to verification, plus what the trace records about how it was made."""

    pool: dict[str, torch.Tensor]
    tree: DraftTree
    in_beam: torch.Tensor  # pool indices that were expanded
    confidence: list[torch.Tensor] = field(default_factory=list)  # H after each draft call (0-dim tensors)
    checks: list[DepthCheck] = field(default_factory=list)
    draft_calls: int = 0
    max_draft_calls: int = 0
    costs: CostsUsed | None = None


class Drafter(ABC):
    """Grows a draft tree from the head's root prediction. `depth_limit` caps the tree near the context limit."""

    @abstractmethod
    def draft(self, runner: HeadRunner, root_token: torch.Tensor, root_feature: torch.Tensor, depth_limit: int) -> Draft:
        ...

    def observe(self, step: Step) -> None:
        """A finished step, timed: a drafter that learns from timings (the cost rule) reads them here."""


class StaticTreeDrafter(Drafter):
    """EAGLE-1: a fixed tree of draft ranks; one draft call per level."""

    def __init__(self, settings: EagleSettings):
        paths = sorted({tuple(p) for p in settings.tree}, key=lambda p: (len(p), p))
        self.paths = paths
        self.depth = max(len(p) for p in paths)
        self.parents_with_children = {p[:-1] for p in paths}

    def draft(self, runner, root_token, root_feature, depth_limit):
        device = root_token.device
        pool = Pool.with_root(root_token)
        # Per tree path: pool index, cumulative score, and (once expanded) head output, slot and logprobs.
        index_of: dict[tuple[int, ...], int] = {(): 0}
        score_of = {(): torch.zeros((), device=device)}
        feature_of, row_of, logprobs_of = {(): root_feature}, {(): 0}, {(): runner.logprobs(root_feature)}
        in_beam: list[int] = []
        confidence = []
        calls = 1
        runner.begin_tree(len(self.parents_with_children))
        for level in range(1, min(self.depth, depth_limit) + 1):
            level_paths = [p for p in self.paths if len(p) == level and p[:-1] in logprobs_of]
            if not level_paths:
                break
            parents = [p[:-1] for p in level_paths]
            ranks = torch.tensor([p[-1] for p in level_paths], device=device)
            parent_lp = torch.stack([logprobs_of[q] for q in parents])
            draft_ids = parent_lp.topk(int(ranks.max()) + 1, dim=1).indices.gather(1, ranks[:, None]).squeeze(1)
            logprob = parent_lp.gather(1, draft_ids[:, None]).squeeze(1)
            score = torch.stack([score_of[q] for q in parents]) + logprob
            tokens = runner.to_target_ids(draft_ids)
            first = pool.add(tokens, torch.tensor([index_of[q] for q in parents], device=device), level, logprob,
                             score, ranks)
            for j, p in enumerate(level_paths):
                index_of[p], score_of[p] = first + j, score[j]
            confidence.append(torch.logsumexp(score, 0))
            expand = [j for j, p in enumerate(level_paths) if p in self.parents_with_children]
            if not expand or level == min(self.depth, depth_limit):
                break
            rows = torch.tensor(expand, device=device)
            feats, first_row = runner.expand(
                tokens[rows],
                torch.stack([feature_of[parents[j]] for j in expand]),
                level,
                torch.tensor([row_of[parents[j]] for j in expand], device=device),
            )
            calls += 1
            lps = runner.logprobs(feats)
            for row, j in enumerate(expand):
                p = level_paths[j]
                feature_of[p], row_of[p], logprobs_of[p] = feats[row], first_row + row, lps[row]
                in_beam.append(index_of[p])
        runner.end_tree()
        cat = pool.cat()
        keep = torch.arange(pool.size, device=device)
        expanded = torch.tensor(in_beam, dtype=torch.long, device=device)
        return Draft(cat, DraftTree.from_pool(cat, keep), expanded, confidence, [], calls, self.depth)


class DepthPolicy(ABC):
    """Chooses, call by call, whether the dynamic tree grows one more level, and which drafted nodes the
    target verifies."""

    max_calls: int

    def begin(self) -> None:
        """A new step's tree starts."""

    @abstractmethod
    def check(self, call: int, confidence: torch.Tensor, pool: Pool, beam: torch.Tensor) -> DepthCheck | None:
        """After draft call `call`: None if no check runs there, else the check and whether to stop. `beam`: the
        pool indices the next call would expand."""

    def keep(self, pool: Pool, cat: dict[str, torch.Tensor], calls: int, total_tokens: int) -> torch.Tensor:
        """Pool indices to verify (`cat`: the pool's tensors): the root and the best `total_tokens - 1` nodes by
        draft score (EAGLE-2)."""
        return rerank(cat["scores"], total_tokens)

    def costs_used(self) -> CostsUsed | None:
        """What the step's decisions were priced with, for the trace (None: no prices)."""
        return None

    def observe(self, step: Step) -> None:
        """The step, timed (Drafter.observe)."""


@dataclass
class FixedDepth(DepthPolicy):
    max_calls: int

    def check(self, call, confidence, pool, beam):
        return None


@dataclass
class ConfidenceDepth(DepthPolicy):
    """DDD: stop drafting when the beam's total draft probability, H = logsumexp(beam scores), falls below x."""

    max_calls: int
    check_steps: set[int]
    threshold: float

    def check(self, call, confidence, pool, beam):
        if call not in self.check_steps:
            return None
        value = float(confidence)  # the only host sync a check costs
        return DepthCheck(call=call, confidence=value, stop=value < self.threshold)


class CostDepth(DepthPolicy):
    """The cost rule (ddd/costs.py): after every call, draft one more level only while its forecast gain in
    expected accepted tokens per unit of expected time beats the step's current rate; verify the number of
    tokens with the best expected rate, taking nodes by calibrated path probability.

    With a `meter` the costs are this machine's, measured as the run decodes: each step starts from the meter's
    latest estimate, times its draft calls on `clock` (the check after each call reads the pool, a host sync on
    CUDA) and hands its step timings back; now and then it verifies a size the meter has not timed lately.
    Without one, `costs` stay as given (pinned)."""

    def __init__(self, max_calls: int, max_verified: int, costs: StepCosts, calibration: Calibration,
                 meter: CostMeter | None = None, clock: Callable[[], float] = time.perf_counter):
        self.max_calls, self.max_verified, self.calibration = max_calls, max_verified, calibration
        self.pinned, self.meter, self.clock = costs, meter, clock
        self.begin()

    def begin(self) -> None:
        self._path = [1.0]  # calibrated path probability of each pool node, the root first
        self._chunks = 1  # the pool's chunks (levels) read into _path: the root's is its 1.0 above
        self._parent_mass = 1.0  # what the nodes expanded by the latest call carried (the root: 1)
        self._called_at: float | None = None
        self._retimed = False
        self.costs, self._step_ms = self.meter.costs() if self.meter is not None else (self.pinned, None)
        if self.meter is not None:  # at the precision a race file keeps, so a saved race's weighings recompute exactly
            c = self.costs
            self.costs = StepCosts(max(round(c.draft_cost, FILE_DECIMALS), 10.0 ** -FILE_DECIMALS),
                                   round(c.verify_base, FILE_DECIMALS), round(c.verify_cost, FILE_DECIMALS))

    def _read(self, pool: Pool) -> float:
        """Path probabilities of the chunks added since the last read; returns the newest chunk's sum."""
        mass = 0.0
        while self._chunks < len(pool.tokens):
            level = child_probabilities(self._path, pool.parents[self._chunks].tolist(),
                                        pool.logprobs[self._chunks].exp().tolist(), self.calibration)
            self._path += level
            mass = sum(level)
            self._chunks += 1
        return mass

    def check(self, call, confidence, pool, beam):
        level_mass = self._read(pool)
        if self.meter is not None:
            now = self.clock()
            if self._called_at is not None:  # one draft call since the last check
                self.meter.time_draft_call(now - self._called_at)
            self._called_at = now
        beam_probs = [self._path[i] for i in beam.tolist()]
        decision = decide(call, self._path[1:], level_mass, self._parent_mass, beam_probs, self.costs,
                          self.max_verified)
        self._parent_mass = sum(beam_probs)
        now = decision.now
        return DepthCheck(call=call, confidence=float(confidence), stop=decision.stop, expected=now.expected,
                          time=now.time, verified=now.verified, gain=decision.gain, time_gain=decision.time_gain)

    def keep(self, pool, cat, calls, total_tokens):
        self._read(pool)  # the last call's level: no check follows it
        verified = best_tree(self._path[1:], calls, self.costs, total_tokens).verified
        size = self.meter.retime(min(total_tokens, len(self._path))) if self.meter is not None else None
        if size is not None and size != verified:
            verified, self._retimed = size, True
        path = torch.tensor(self._path, device=cat["depths"].device).clamp_min(1e-30).log()
        return rerank(path, verified)

    def costs_used(self) -> CostsUsed:
        c = self.costs
        return CostsUsed(c.draft_cost, c.verify_base, c.verify_cost, self._step_ms is not None, self._step_ms,
                         self._retimed)

    def observe(self, step: Step) -> None:
        if self.meter is not None and not step.prefill:
            self.meter.time_step(step.draft_calls, step.verified, step.draft_ms / 1e3, step.verify_ms / 1e3,
                                 step.other_ms / 1e3)


class DynamicTreeDrafter(Drafter):
    """EAGLE-2: expand the K (`beam_width`) best nodes per level by cumulative score, then keep the best
    `total_tokens`."""

    def __init__(self, beam_width: int, total_tokens: int, policy: DepthPolicy):
        self.beam_width = beam_width
        self.total_tokens = total_tokens
        self.policy = policy
        self._made: dict[str, torch.Tensor] | None = None

    @classmethod
    def eagle2(cls, s: Eagle2Settings) -> "DynamicTreeDrafter":
        return cls(s.beam_width, s.total_tokens, FixedDepth(s.draft_calls))

    @classmethod
    def ddd(cls, s: DDDSettings) -> "DynamicTreeDrafter":
        return cls(s.beam_width, s.total_tokens, ConfidenceDepth(s.max_draft_calls, s.checks(), s.threshold))

    @classmethod
    def cost(cls, s: CostSettings, calibration: Calibration, meter: CostMeter | None = None,
             clock: Callable[[], float] = time.perf_counter) -> "DynamicTreeDrafter":
        """The cost rule: at `meter`'s measured costs, or at its settings' without one (ddd.engine.cost_meter gives
        none where they are pinned)."""
        return cls(s.beam_width, s.total_tokens, CostDepth(s.max_draft_calls, s.total_tokens, StepCosts.of(s),
                                                           calibration, meter, clock))

    def observe(self, step: Step) -> None:
        self.policy.observe(step)

    def _constants(self, device: torch.device) -> dict[str, torch.Tensor]:
        """Index tensors every step of this drafter reads, made once: ranks of a node's K children, each row's
        parent among a K x K block of children, and the first level's pool indices."""
        if self._made is None or self._made["ranks"].device != device:
            k = self.beam_width
            ranks = torch.arange(k, device=device)
            self._made = {"ranks": ranks, "child_ranks": ranks.repeat(k), "parent_of_child": ranks.repeat_interleave(k),
                          "level_one": ranks + 1, "root_rows": torch.zeros(k, dtype=torch.long, device=device)}
        return self._made

    def draft(self, runner, root_token, root_feature, depth_limit):
        k = self.beam_width
        made = self._constants(root_token.device)
        pool = Pool.with_root(root_token)
        logprob, draft_ids = runner.logprobs(root_feature).topk(k)
        beam_tokens = runner.to_target_ids(draft_ids)
        pool.add(beam_tokens, made["root_rows"], 1, logprob, logprob, made["ranks"])
        beam, beam_scores = made["level_one"], logprob
        beam_features = root_feature.expand(k, -1)
        beam_rows = made["root_rows"]  # the root's mask row, 0, for each
        in_beam, confidence, checks = [], [torch.logsumexp(beam_scores, 0)], []
        max_calls = min(self.policy.max_calls, depth_limit)
        calls = 1
        self.policy.begin()
        runner.begin_tree(k * (max_calls - 1))
        while calls < max_calls:
            check = self.policy.check(calls, confidence[-1], pool, beam)
            if check is not None:
                checks.append(check)
                if check.stop:
                    break
            feats, first_row = runner.expand(beam_tokens, beam_features, calls, beam_rows)
            in_beam.append(beam)
            calls += 1
            child_lp, child_ids = runner.logprobs(feats).topk(k, dim=-1)  # (k, k)
            child_scores = (beam_scores[:, None] + child_lp).view(-1)
            child_tokens = runner.to_target_ids(child_ids.view(-1))
            first = pool.add(child_tokens, beam[made["parent_of_child"]], calls, child_lp, child_scores,
                             made["child_ranks"])
            beam_scores, best = child_scores.topk(k)
            parent = best // k
            beam, beam_tokens = best + first, child_tokens[best]
            beam_features, beam_rows = feats[parent], parent + first_row
            confidence.append(torch.logsumexp(beam_scores, 0))
        runner.end_tree()
        cat = pool.cat()
        keep = self.policy.keep(pool, cat, calls, self.total_tokens)
        expanded = torch.cat(in_beam) if in_beam else torch.zeros(0, dtype=torch.long, device=root_token.device)
        return Draft(cat, DraftTree.from_pool(cat, keep), expanded, confidence, checks, calls, self.policy.max_calls,
                     self.policy.costs_used())
