"""The decoding loop: one entry point, `generate`, for plain decoding and every drafting strategy.

Each step drafts (speculative methods), verifies with ONE target forward over the tree, accepts, and
commits: the target's KV cache keeps only the prefix and the accepted path. Every step yields a trace
record; nothing in the record feeds back into decoding.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from transformers import DynamicCache

from .acceptance import Acceptance, TreeLogits, accept_greedy, accept_sampled, next_token
from .costs import LADDER, CostMeter, StepCosts, meter_for
from .devices import clock_after
from .drafting import Draft, Drafter, DynamicTreeDrafter, HeadRunner, StaticTreeDrafter
from .head import DraftHead
from .kvcache import keep_cache
from .models import Target
from .ops import OpCounter
from .settings import (MAX_NEW_TOKENS, SETTINGS_CLASSES, Sampling, SettingsError, check_method, method_settings,
                       settings_dict)
from .metrics import summarize
from .trace import DraftNode, RunTrace, Step, StepOps
from .tree import DraftTree, Pool


class PromptError(ValueError):
    """The prompt cannot be decoded (empty, or longer than the model's context)."""


def make_drafter(method: str, settings: Any, head: DraftHead | None, meter: CostMeter | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> Drafter | None:
    if check_method(method) == "plain":
        return None
    if method == "eagle":
        return StaticTreeDrafter(settings)
    if method == "eagle2":
        return DynamicTreeDrafter.eagle2(settings)
    if method == "cost":
        return DynamicTreeDrafter.cost(settings, head.calibration, meter, clock)
    return DynamicTreeDrafter.ddd(settings)


def cost_meter(target: Target, head: DraftHead, settings: Any) -> CostMeter | None:
    """The process's meter of this pair's step costs for a measuring cost rule (None where its costs are
    pinned): one per target, head, precision, device and beam width (a draft call expands beam_width nodes)."""
    if settings.pin_costs:
        return None
    key = (id(head), target.precision, str(target.device), settings.beam_width)
    return meter_for(target.model, key, StepCosts.of(settings))


def encode_prompt(target: Target, prompt: str, chat: bool = True) -> list[int]:
    """Token ids of a user prompt, through the tokenizer's chat template when it has one."""
    if not prompt or not prompt.strip():
        raise PromptError("The prompt is empty: type a question or pick an example.")
    tok = target.tokenizer
    if chat and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tok(prompt)["input_ids"]
    return fitting(target, ids)


def prompt_ids(target: Target, prompt: str | list[int], chat: bool = True) -> list[int]:
    """A prompt given as text (encoded as `encode_prompt` does) or as the target's token ids, checked."""
    if isinstance(prompt, str):
        return encode_prompt(target, prompt, chat)
    ids = list(prompt)
    if not ids:
        raise PromptError("The prompt has no tokens.")
    if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < target.vocab_size for t in ids):
        raise PromptError(f"The prompt's token ids must be whole numbers from 0 to {target.vocab_size - 1} "
                          f"({target.name}'s vocabulary).")
    return fitting(target, ids)


def fitting(target: Target, ids: list[int]) -> list[int]:
    """`ids` when they leave room in the target's context for at least one new token."""
    if len(ids) >= target.context_limit - 1:
        raise PromptError(
            f"The prompt is {len(ids)} tokens long but {target.name} reads at most {target.context_limit} "
            "tokens including its answer: shorten the prompt."
        )
    return ids


def chain_end(pool: dict[str, torch.Tensor], last: int, bonus: int, in_draft_vocab: torch.Tensor | None) -> str:
    """Why the accepted chain ended at pool node `last`, the target adding `bonus` (trace.CHAIN_ENDS). A kept
    child equal to the bonus would have been accepted (greedy) or was ruled out of it (sampling), so a child
    equal to it was pruned."""
    children = pool["parents"] == last
    if not bool(children.any()):
        return "tree_end"
    if bool((pool["tokens"][children] == bonus).any()):
        return "pruned"
    if in_draft_vocab is not None and not bool(in_draft_vocab[bonus]):
        return "outside_vocab"
    return "not_drafted"


class Generation:
    """An iterator of Steps; after (or during) iteration `.trace` holds the whole run."""

    def __init__(self, target: Target, head: DraftHead | None, prompt: str | list[int], method: str = "ddd", *,
                 max_new_tokens: int = MAX_NEW_TOKENS.default, sampling: Sampling | None = None,
                 settings: Any = None, chat: bool = True, record: bool = True, eos_ids: set[int] | None = None,
                 clock: Callable[[], float] = time.perf_counter, count_ops: bool = False):
        self.target, self.head, self.method = target, head, check_method(method)
        self.clock = clock  # every step's timings read it (tests inject one)
        # A copy: the run must not change the caller's object, nor the caller the run's.
        self.sampling = replace(sampling) if sampling is not None else Sampling()
        self.sampling.validate()
        self.settings = settings if settings is not None else method_settings(method)
        if not isinstance(self.settings, SETTINGS_CLASSES[method]):
            raise SettingsError(f"Method {method!r} takes {SETTINGS_CLASSES[method].__name__}, not "
                                f"{type(self.settings).__name__}.")
        if method != "plain" and head is None:
            raise SettingsError(f"Method {method!r} needs a draft head; load one or use method 'plain'.")
        self.settings.validate(head.draft_vocab_size if head is not None else target.vocab_size)
        self.max_new_tokens = MAX_NEW_TOKENS.parse(max_new_tokens)
        self.record = record
        # Each step's dispatched operations by phase (ddd/ops.py), read at the same points as its timings.
        self._ops = OpCounter() if count_ops else None
        self.prompt_ids = prompt_ids(target, prompt, chat)
        self.meter = cost_meter(target, head, self.settings) if method == "cost" else None
        self.drafter = make_drafter(method, self.settings, head, self.meter, clock)
        self.token_ids: list[int] = []
        self._text = ""
        self._stop_requested = False
        self._token_text: dict[int, str] = {}
        # transformers' generate() stops at its generation config's eos tokens only (ddd.hf passes them).
        self._eos = target.eos_ids() if eos_ids is None else set(eos_ids)
        self._in_draft_vocab = None
        draft_vocab = head.draft_to_target() if head is not None else None
        if draft_vocab is not None:
            self._in_draft_vocab = torch.zeros(target.vocab_size, dtype=torch.bool, device=draft_vocab.device)
            self._in_draft_vocab[draft_vocab] = True
        self.trace = RunTrace(
            method=method, settings=settings_dict(self.settings), sampling=settings_dict(self.sampling),
            model=target.name, head=getattr(head, "name", None) if head is not None else None,
            prompt=prompt if isinstance(prompt, str) else target.tokenizer.decode(self.prompt_ids),
            prompt_tokens=len(self.prompt_ids), precision=target.precision, device=str(target.device),
            head_kind=head.kind if head is not None else None,
            calibration=head.calibration.to_json() if head is not None and head.calibration.measured else None,
        )
        # The target's forwards also give the head its features: the hidden states it reads, when they are
        # not only the final one. Plain decoding asks for nothing extra.
        ids = head.hidden_state_ids if self.drafter is not None else None
        self._feature_request = {"output_hidden_states": ids} if ids else {}

    def stop(self) -> None:
        """Ask the run to end after the current step (thread- and signal-safe: it only sets a flag)."""
        self._stop_requested = True

    @property
    def text(self) -> str:
        return self._text

    def _sync(self) -> float:
        return clock_after(self.target.device, self.clock)

    def _ops_since(self) -> int:
        """Operations dispatched since the last call (0 when not counting)."""
        return self._ops.mark() if self._ops is not None else 0

    def __iter__(self) -> Iterator[Step]:
        # Inference mode is entered per step, never held across a yield: it is thread-wide state, and runs
        # advanced in turn (ddd.turns) would otherwise leave it switched on for the caller, restored out of order.
        steps = self._run()
        while True:
            with torch.inference_mode(), self._ops or contextlib.nullcontext():
                step = next(steps, None)
            if step is None:
                break
            yield step
        self.trace.summary = summarize(self.trace.steps)

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> Iterator[Step]:
        model = self.target.model
        device = self.target.device
        generator = torch.Generator().manual_seed(self.sampling.seed)
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([self.prompt_ids], device=device)

        start = self._sync()
        self._ops_since()
        hidden, features = self._forward(input_ids=ids, cache=cache, use_cache=True)
        logits = model.lm_head(hidden[-1:])[0]
        if self.meter is not None and not self.meter.timed:
            self._time_sizes(cache, ids[0, -1])
        verified = self._sync()
        token = next_token(logits, self.sampling, generator)
        step = Step(index=0, token_ids=[token], text="", accepted=0, verify_ms=(verified - start) * 1e3, prefill=True)
        ops = StepOps(verify=self._ops_since())
        if self._emit(step, verified, ops):
            yield step
            return
        yield step

        runner = HeadRunner(self.head, self.target) if self.drafter else None
        # What the head has not seen yet: features f_t with the tokens x_{t+1} that follow them.
        pending_features, pending_next = features, ids[0, 1:].tolist() + [token]
        limit = self.target.context_limit
        index = 1
        while True:
            if self._stop_requested:
                # Steps already handed out stay as they were: a stopped run's text is what its steps emitted
                # (a character still waiting for its last bytes is dropped).
                self.trace.stop_reason = "stopped"
                self.trace.text = self._text
                return
            past = cache.get_seq_length()
            start = self._sync()
            ops = StepOps(other=self._ops_since())  # the loop's own, between two steps
            if runner is None:
                draft = None
                drafted = start  # nothing to draft: the whole forward is verification
                hidden = model.model(input_ids=torch.tensor([[token]], device=device), cache=cache,
                                     use_cache=True).last_hidden_state[0]
                logits = model.lm_head(hidden[-1:])[0]
                acceptance = Acceptance([0], next_token(logits, self.sampling, generator))
                verified = self._sync()
                ops.verify = self._ops_since()
                accepted_tokens = []
            else:
                root = torch.tensor(token, device=device)
                depth_limit = limit - 1 - past
                if depth_limit >= 1:
                    root_feature = runner.extend(torch.tensor(pending_next, device=device), pending_features)
                    draft = self.drafter.draft(runner, root, root_feature, depth_limit)
                    pending_features, pending_next = pending_features[:0], []
                else:  # at the context limit: verify the root alone, one plain step
                    pool = Pool.with_root(root).cat()
                    draft = Draft(pool, DraftTree.from_pool(pool, torch.zeros(1, dtype=torch.long, device=device)),
                                  torch.zeros(0, dtype=torch.long))
                drafted = self._sync()
                ops.draft = self._ops_since()
                hidden, features = self._verify(cache, draft.tree, past)
                acceptance = self._accept(draft, TreeLogits(hidden, model.lm_head), generator)
                verified = self._sync()
                ops.verify = self._ops_since()
                keep_cache(cache, past, acceptance.path, device)
                path = torch.tensor(acceptance.path, device=device)
                accepted_tokens = draft.tree.tokens[path[1:]].tolist()
                pending_features = torch.cat((pending_features, features[path]))
                pending_next = pending_next + accepted_tokens + [acceptance.bonus]
            new = accepted_tokens + [acceptance.bonus]
            token = acceptance.bonus
            step = Step(index=index, token_ids=new, text="", accepted=len(new) - 1,
                        draft_ms=(drafted - start) * 1e3, verify_ms=(verified - drafted) * 1e3)
            if draft is not None:
                self._describe(step, draft, acceptance)
            done = self._emit(step, verified, ops)
            if self.drafter is not None:
                self.drafter.observe(step)
            if not done and cache.get_seq_length() >= limit:
                self.trace.stop_reason = f"context limit: {self.target.name} reads at most {limit} tokens"
                done = True
            yield step
            if done:
                return
            index += 1

    def _forward(self, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's final hidden states (seq, H) and the head's features (seq, F) from one forward."""
        output = self.target.model.model(**inputs, **self._feature_request)
        hidden = output.last_hidden_state[0]
        return hidden, (self.head.target_features(output)[0] if self.drafter is not None else hidden)

    def _time_sizes(self, cache: DynamicCache, token: torch.Tensor) -> None:
        """The meter's warm-up, once per pair in a process, inside the prefill: a verify forward over each size of
        the ladder up to the settings' total tokens, each left out of the cache again; the second of two counts
        (a shape's first forward pays for allocations)."""
        past = cache.get_seq_length()
        for size in [n for n in LADDER if n <= min(self.settings.total_tokens, self.target.context_limit - 1 - past)]:
            for _ in range(2):
                start = self._sync()
                hidden, _ = self._forward(input_ids=token.repeat(1, size), position_ids=torch.arange(
                    past, past + size, device=token.device)[None], cache=cache, use_cache=True)
                self.target.model.lm_head(hidden[:1]).argmax(-1)
                elapsed = self._sync() - start
                cache.crop(-size)
            self.meter.time_verify(size, elapsed)

    def _verify(self, cache: DynamicCache, tree: DraftTree, past: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One target forward over the whole tree: each node sees the prefix, its ancestors and itself."""
        mask = tree.attention_mask(past, self.target.model.dtype)
        return self._forward(input_ids=tree.tokens[None], attention_mask=mask, position_ids=(past + tree.depths)[None],
                             cache=cache, use_cache=True)

    def _accept(self, draft: Draft, logits: TreeLogits, generator: torch.Generator) -> Acceptance:
        if self.sampling.greedy:
            return accept_greedy(draft.tree, logits)
        return accept_sampled(draft.tree, logits, self.sampling, generator, draft.pool["ranks"][draft.tree.pool_index])

    def _emit(self, step: Step, verified_at: float, ops: StepOps) -> bool:
        """Apply the stop rules to the step's tokens, add its text, finish its timing; True when the run ends."""
        done = False
        for i, tok in enumerate(step.token_ids):
            if tok in self._eos:
                step.token_ids = step.token_ids[: i + 1]
                self.trace.stop_reason = "end of turn"
                done = True
                break
        room = self.max_new_tokens - len(self.token_ids)
        if len(step.token_ids) >= room:
            step.token_ids = step.token_ids[:room]
            self.trace.stop_reason = self.trace.stop_reason or "max_new_tokens"
            done = True
        step.accepted = min(step.accepted, max(len(step.token_ids) - 1, 0)) if not step.prefill else 0
        self.token_ids.extend(step.token_ids)
        text = self.target.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # hold back half a multi-byte character until it completes
            step.text, self._text = text[len(self._text):], text
        if done:
            step.text += self._finish()
        self.trace.steps.append(step)
        step.other_ms = (self._sync() - verified_at) * 1e3
        if self._ops is not None:
            ops.other += self._ops_since()
            step.ops = ops
        return done

    def _finish(self) -> str:
        """Settle the run's text (flushing any held-back partial character); returns what it added."""
        final = self.target.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        added, self._text = final[len(self._text):], final
        self.trace.text = final
        return added

    def _describe(self, step: Step, draft: Draft, acceptance: Acceptance) -> None:
        step.draft_calls = draft.draft_calls
        step.max_draft_calls = draft.max_draft_calls
        step.verified = len(draft.tree)
        step.checks = draft.checks
        step.costs = draft.costs
        step.confidence = [float(c) for c in draft.confidence]
        step.bonus_id = acceptance.bonus
        step.bonus_text = self._token(acceptance.bonus)
        tree_index = draft.tree.pool_index.tolist()
        step.accepted_path = [tree_index[i] for i in acceptance.path]
        step.chain_end = chain_end(draft.pool, step.accepted_path[-1], acceptance.bonus, self._in_draft_vocab)
        if not self.record:
            return
        pool = {k: v.tolist() for k, v in draft.pool.items()}
        kept = set(tree_index)
        accepted = set(step.accepted_path)
        beam = set(draft.in_beam.tolist())
        for i, tok in enumerate(pool["tokens"]):
            status = ("root" if i == 0 else "accepted" if i in accepted else "rejected" if i in kept else "pruned")
            step.pool.append(DraftNode(
                index=i, token_id=tok, text=self._token(tok), parent=pool["parents"][i], depth=pool["depths"][i],
                logprob=pool["logprobs"][i], score=pool["scores"][i], rank=pool["ranks"][i], in_beam=i in beam,
                status=status,
            ))

    def _token(self, token_id: int) -> str:
        if token_id not in self._token_text:
            self._token_text[token_id] = self.target.tokenizer.decode([token_id])
        return self._token_text[token_id]


def generate(target: Target, head: DraftHead | None, prompt: str | list[int], method: str = "ddd", *,
             max_new_tokens: int = MAX_NEW_TOKENS.default, sampling: Sampling | None = None, chat: bool = True,
             record: bool = True, temperature: float | None = None, top_p: float | None = None,
             seed: int | None = None, count_ops: bool = False, **settings: Any) -> Generation:
    """Decode `prompt` (text, or the target's token ids as they are) with `method` (plain, eagle, eagle2, ddd,
    cost). Extra keyword arguments are the method's settings (e.g. beam_width=10, threshold=-0.3; ddd.settings
    declares them); temperature/top_p/seed are shortcuts into `sampling`, applied to a copy of it. With `count_ops`
    every step records the operations it dispatched (ddd/ops.py), which slows the run."""
    shortcuts = {name: value for name, value in (("temperature", temperature), ("top_p", top_p), ("seed", seed))
                 if value is not None}
    sampling = replace(sampling or Sampling(), **shortcuts)
    return Generation(target, head, prompt, method, max_new_tokens=max_new_tokens, sampling=sampling,
                      settings=method_settings(method, **settings), chat=chat, record=record, count_ops=count_ops)
