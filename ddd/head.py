"""The EAGLE draft head: fc(2H -> H) + one stock Llama decoder layer without its input norm.

Reads and writes the official EAGLE-1/EAGLE-2 checkpoint layout (config.json + weights with keys
`fc.*`, `layers.0.*`). Our own heads may add `d2t`, a reduced draft vocabulary given as EAGLE-3 style
offsets (target_id = draft_id + d2t[draft_id]), so the draft LM head multiplies fewer rows.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from .models import DEFAULT_MODEL, Target

HEAD_FILES = ("model.safetensors", "pytorch_model.bin")
# The head trained for the default model ships with the project.
SHIPPED_HEAD = Path(__file__).resolve().parent.parent / "assets" / "head"
# Keys an official checkpoint may carry that the head does not use (it reads the target's embeddings).
_IGNORED_KEYS = ("embed_tokens.weight",)


class HeadLoadError(ValueError):
    """A draft head could not be loaded or does not fit the target; the message says which numbers disagree."""


class EagleHead(nn.Module):
    def __init__(self, config: LlamaConfig, bias: bool = True, d2t: torch.Tensor | None = None):
        super().__init__()
        config.num_hidden_layers = 1
        config._attn_implementation = "sdpa"
        self.config = config
        self.bias = bias
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=bias)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.layer.input_layernorm = nn.Identity()
        self.rotary = LlamaRotaryEmbedding(config)
        self.register_buffer("d2t", d2t, persistent=False)

    @property
    def draft_vocab_size(self) -> int:
        return self.config.vocab_size if self.d2t is None else int(self.d2t.numel())

    def draft_to_target(self) -> torch.Tensor | None:
        """Target token id of each draft-vocabulary row, or None for the full vocabulary."""
        if self.d2t is None:
            return None
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def forward(
        self,
        embeds: torch.Tensor,
        features: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache=None,
    ) -> torch.Tensor:
        """Predicted next features, (batch, seq, H), from token embeddings and the features one step behind."""
        hidden = self.fc(torch.cat((embeds, features), dim=-1))
        rope = self.rotary(hidden, position_ids)
        return self.layer(
            hidden,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=cache is not None,
            position_embeddings=rope,
        )

    def state_dict_official(self) -> dict[str, torch.Tensor]:
        out = {}
        for key, value in self.state_dict().items():
            if key.startswith("rotary."):
                continue
            out[key.replace("layer.", "layers.0.", 1) if key.startswith("layer.") else key] = value
        if self.d2t is not None:
            out["d2t"] = self.d2t
        return out


def new_head(target: Target, draft_vocab: torch.Tensor | None = None, seed: int = 0) -> EagleHead:
    """A randomly initialised head shaped for `target` (draft_vocab: the target ids to keep, ascending)."""
    cfg = target.model.config
    config = LlamaConfig(
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        vocab_size=target.vocab_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters=dict(cfg.rope_parameters),
        hidden_act=cfg.hidden_act,
        num_hidden_layers=1,
    )
    d2t = None
    if draft_vocab is not None:
        draft_vocab = torch.as_tensor(draft_vocab, dtype=torch.long).sort().values
        d2t = draft_vocab - torch.arange(draft_vocab.numel())
    torch.manual_seed(seed)
    head = EagleHead(config, bias=True, d2t=d2t)
    return head.to(device=target.device, dtype=target.model.dtype)


def save_head(head: EagleHead, directory: str | Path, extra: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict()
    config.update({"bias": head.bias, "architectures": ["EagleHead"], **(extra or {})})
    (directory / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict_official().items()}
    save_file(tensors, directory / "model.safetensors")
    return directory


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").exists():
        return load_file(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").exists():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise HeadLoadError(f"No head weights in {directory}: expected one of {', '.join(HEAD_FILES)}.")


def load_head(directory: str | Path, target: Target) -> EagleHead:
    """Load a head checkpoint directory (official EAGLE layout or ours) and check that it fits `target`."""
    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise HeadLoadError(f"No draft head at {directory}: config.json is missing.")
    raw = json.loads((directory / "config.json").read_text())
    weights = _read_weights(directory)
    if "fc.weight" not in weights:
        raise HeadLoadError(f"{directory} is not an EAGLE head: it has no `fc.weight` (keys: {sorted(weights)[:5]}...).")
    hidden = weights["fc.weight"].shape[0]
    problems = []
    if hidden != target.hidden_size:
        problems.append(f"hidden size: head {hidden}, target {target.hidden_size}")
    vocab = raw.get("vocab_size", target.vocab_size)
    if vocab != target.vocab_size:
        problems.append(f"vocabulary: head {vocab}, target {target.vocab_size}")
    if problems:
        raise HeadLoadError(f"The head at {directory} does not fit {target.name}: " + "; ".join(problems) + ".")
    bias = bool(raw.get("bias", "fc.bias" in weights))
    fields = {k: v for k, v in raw.items() if k not in ("bias", "architectures", "torch_dtype", "dtype")}
    config = LlamaConfig(**fields)
    if "rope_theta" in raw and "rope_parameters" not in raw:
        config.rope_parameters = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    d2t = weights.pop("d2t", None)
    if d2t is not None and int((torch.arange(d2t.numel()) + d2t).max()) >= target.vocab_size:
        raise HeadLoadError(f"The head's draft vocabulary points past the target's {target.vocab_size} tokens.")
    head = EagleHead(config, bias=bias, d2t=d2t)
    state = {}
    for key, value in weights.items():
        if key in _IGNORED_KEYS:
            continue
        state[key.replace("layers.0.", "layer.", 1)] = value
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("rotary.")]
    if missing or unexpected:
        raise HeadLoadError(f"Head weights in {directory} do not match the EAGLE layout: missing {missing}, unexpected {unexpected}.")
    head.name = str(directory)
    return for_target(head, target)


def for_target(head: EagleHead, target: Target) -> EagleHead:
    """Put a head on the target's device and in its precision."""
    head = head.to(device=target.device, dtype=target.model.dtype).eval().requires_grad_(False)
    if target.precision == "int8":
        from .precision import quantize_int8

        quantize_int8(head)
    return head


def resolve_head(spec: str | None, target: Target) -> tuple[EagleHead, str]:
    """The head a user asked for: a directory, "random", or None for the shipped head of the default model.

    Returns the head and a note for the user when it is not the one they might expect.
    """
    if spec == "random":
        head = for_target(new_head(target), target)
        head.name = "random"
        return head, "Using a randomly initialised draft head: speculative methods will accept almost nothing."
    if spec is None:
        if target.name == DEFAULT_MODEL and (SHIPPED_HEAD / "config.json").exists():
            return load_head(SHIPPED_HEAD, target), ""
        head, _ = resolve_head("random", target)
        return head, f"No trained draft head for {target.name} was given (--head DIR): using a random head."
    return load_head(spec, target), ""
