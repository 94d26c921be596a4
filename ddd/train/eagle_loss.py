"""The EAGLE loss that `python -m ddd.train fit` (ddd/train/fit.py) trains EAGLE-1/2 heads with.

The head's fc and decoder layer train (the target's embeddings and LM head stay frozen) with SmoothL1
between predicted and true next features + 0.1 x cross-entropy of the draft logits against the next token
(or the target's whole distribution), with uniform noise on the input features.

Alignment: for tokens x_0..x_n and features f_0..f_{n-1} (f_t is the target's feature after reading x_t),
the head reads (embed(x_{t+1}), f_t) at position t and its output h_t should equal f_{t+1}; the draft
logits of h_t predict x_{t+2}.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache


class HeadTrainer:
    """The EAGLE loss on batches from `fit.collate`, with the target's embeddings and LM head frozen.

    level2 > 0 adds the same loss one level deeper at that share of positions: there the head reads its own
    guess of the feature (its level-one output one position back) while attending to the real-feature context
    before it, exactly what its second call inside a draft tree sees.
    """

    def __init__(self, target, head, ce_weight: float = 0.1, noise: float = 0.2, soft: bool = False,
                 level2: float = 0.0, seed: int = 0):
        self.target = target
        # The noise and the level-two positions come from the trainer's own generator (a CPU one, so that a
        # run draws the same on any device); checkpoints keep its state.
        self.generator = torch.Generator().manual_seed(seed)
        self.head = head
        self.ce_weight = ce_weight
        # soft: cross-entropy against the target's whole next-token distribution (read from the stored next
        # feature) rather than its one sampled token; the tree needs the draft's top-k order, not just top-1
        self.soft = soft
        self.noise = noise
        self.level2 = level2
        self.embed = target.model.model.embed_tokens
        weight = target.model.lm_head.weight.detach()
        rows = head.draft_to_target()
        self.rows = rows
        self.lm_weight = weight if rows is None else weight[rows.to(weight.device)].contiguous()
        t2d = torch.full((target.vocab_size,), -1, dtype=torch.long, device=weight.device)
        if rows is None:
            t2d = torch.arange(target.vocab_size, device=weight.device)
        else:
            t2d[rows.to(weight.device)] = torch.arange(rows.numel(), device=weight.device)
        self.t2d = t2d

    def forward(self, batch: dict[str, torch.Tensor], noise: bool, cache: DynamicCache | None = None):
        """Level one: (predicted h_t, true f_{t+1}, next token x_{t+2}, embed(x_{t+1})) for every position t."""
        device = self.lm_weight.device
        ids = batch["ids"].to(device)
        feats = batch["features"].to(device=device, dtype=self.lm_weight.dtype)
        width = ids.shape[1] - 2
        with torch.no_grad():
            embeds = self.embed(ids[:, 1:1 + width]).to(self.lm_weight.dtype)
        inputs = feats[:, :width]
        if noise and self.noise > 0:
            draws = torch.rand(inputs.shape, generator=self.generator).to(device=device, dtype=inputs.dtype)
            inputs = inputs + (draws - 0.5) * self.noise
        positions = torch.arange(width, device=device).unsqueeze(0).expand(ids.shape[0], -1)
        predicted = self.head(embeds=embeds, features=inputs, position_ids=positions, cache=cache)
        return predicted, feats[:, 1:1 + width], ids[:, 2:2 + width], embeds

    def deeper(self, embeds: torch.Tensor, guesses: torch.Tensor, columns: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Level two at positions `columns` (each >= 1): t reads (embed(x_{t+1}), guesses[t - 1]) and attends to the
        level-one positions before t, held in `cache`, and to itself."""
        width, count = embeds.shape[1], columns.numel()
        device = embeds.device
        mask = torch.zeros((count, width + count), dtype=torch.bool, device=device)
        mask[:, :width] = torch.arange(width, device=device)[None] < columns[:, None]
        mask[:, width:] = torch.eye(count, dtype=torch.bool, device=device)
        positions = columns[None].expand(embeds.shape[0], -1)
        return self.head(embeds=embeds[:, columns], features=guesses[:, columns - 1], position_ids=positions,
                         attention_mask=mask[None, None], cache=cache)

    def soft_ce(self, logits: torch.Tensor, true_next: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the draft logits against the target's distribution, read from the true next feature
        through the same (draft-vocabulary) LM head."""
        with torch.no_grad():
            wanted = torch.softmax(true_next.float() @ self.lm_weight.T.float(), dim=-1)
        return -(wanted * torch.log_softmax(logits.float(), dim=-1)).sum(-1).mean()

    def terms(self, out: torch.Tensor, want: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Feature regression, cross-entropy and top-1 accuracy of predicted features `out` (N, H)."""
        reg = F.smooth_l1_loss(out, want)
        logits = out @ self.lm_weight.T
        if self.soft:
            ce = self.soft_ce(logits, want)
        else:
            labels = self.t2d[tokens]
            ce = F.cross_entropy(logits, labels, ignore_index=-1) if bool((labels >= 0).any()) else logits.sum() * 0
        with torch.no_grad():
            top = logits.argmax(-1)
            top = top if self.rows is None else self.rows.to(top.device)[top]
            acc = float((top == tokens).float().mean())
        return reg, ce, acc

    def _level2_columns(self, width: int, share: float) -> torch.Tensor:
        columns = torch.arange(1, width, device=self.lm_weight.device)
        if share >= 1.0:
            return columns
        keep = max(1, round(share * columns.numel()))
        order = torch.randperm(columns.numel(), generator=self.generator).to(columns.device)
        return columns[order[:keep].sort().values]

    def loss(self, batch: dict[str, torch.Tensor], noise: bool = True,
             level2: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        level2 = self.level2 if level2 is None else level2
        mask = batch["mask"].to(self.lm_weight.device)
        if mask.shape[1] == 0 or not bool(mask.any()):
            zero = sum(p.sum() * 0 for p in self.head.parameters())
            return zero, {"reg": 0.0, "ce": 0.0, "acc": 0.0, "tokens": 0}
        cache = DynamicCache(config=self.head.config) if level2 > 0 and mask.shape[1] > 1 else None
        predicted, true_next, next_tokens, embeds = self.forward(batch, noise, cache)
        reg, ce, acc = self.terms(predicted[mask], true_next[mask], next_tokens[mask])
        total = reg + self.ce_weight * ce
        parts = {"reg": float(reg.detach()), "ce": float(ce.detach()), "acc": acc, "tokens": int(mask.sum())}
        if cache is not None:
            columns = self._level2_columns(mask.shape[1], level2)
            deep_mask = mask[:, columns]
            if bool(deep_mask.any()):
                deep = self.deeper(embeds, predicted.detach(), columns, cache)
                reg2, ce2, acc2 = self.terms(deep[deep_mask], true_next[:, columns][deep_mask], next_tokens[:, columns][deep_mask])
                total = total + reg2 + self.ce_weight * ce2
                parts |= {"acc2": acc2, "tokens2": int(deep_mask.sum())}
        return total, parts

    @torch.no_grad()
    def evaluate(self, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """Held-out loss and top-1 accuracy (true features, no noise), and top-1 accuracy one level deeper
        (the head reading its own guess of the feature, as in a draft tree's second call)."""
        was_training = self.head.training
        self.head.eval()
        sums = {"loss": 0.0, "reg": 0.0, "ce": 0.0, "acc": 0.0, "acc_self": 0.0}
        count = count2 = 0
        for batch in batches:
            _, parts = self.loss(batch, noise=False, level2=1.0)
            n = parts["tokens"]
            if n == 0:
                continue
            sums["loss"] += (parts["reg"] + self.ce_weight * parts["ce"]) * n
            for key in ("reg", "ce", "acc"):
                sums[key] += parts[key] * n
            count += n
            if "tokens2" in parts:
                sums["acc_self"] += parts["acc2"] * parts["tokens2"]
                count2 += parts["tokens2"]
        self.head.train(was_training)
        out = {k: v / max(1, count) for k, v in sums.items() if k != "acc_self"}
        return out | {"acc_self": sums["acc_self"] / max(1, count2), "tokens": count}
