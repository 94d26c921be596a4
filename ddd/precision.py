"""Precision modes: float32, bfloat16, float16, and int8 for CPUs.

int8 turns every Linear into `Int8Linear`: int8 weights with one scale per output channel, activations
quantized on the fly with one scale per ROW. torch's stock dynamic quantization uses one scale per tensor, so
the tokens of a verified tree would change each other's rounding and speculative decoding would stop being
lossless. With per-row scales, a row's result does not depend on the rows beside it.

Attention has the same problem in a milder form: a tree token's keys sit among masked siblings, a plain
token's do not, so the float32 reductions run in a different order and differ in the last bit; int8
rounding downstream magnifies such bits into different logits. `exact` attention computes in float64 and
rounds to float32 once, so both orders give the same float32 result (barring a tie at float64 precision).
The linears the int8 mode leaves in float (`ExactLinear`, the first decoder layer) are computed the same way,
and so is every linear of bfloat16 and float16 on a CPU (`to_exact`).
"""
from __future__ import annotations

import warnings

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

# transformers keeps one registry of attention functions per process. A copy of this module (the export-generate
# folder, which transformers loads as remote code) registers its functions under names of its own, so that loading
# that folder does not put its functions under this package's models, nor this package's under its.
_COPY = "" if __name__ == "ddd.precision" else "_" + "".join(c if c.isalnum() else "_" for c in __name__)
EXACT_ATTENTION = "ddd_exact" + _COPY
TREE_ATTENTION = "ddd_sdpa" + _COPY


class Int8Linear(nn.Module):
    """A Linear computed with int8 weights (per output channel) and int8 activations (per row).

    With `input_amax` (each input channel's largest |x| on calibration text), two fixes for the few input
    channels that carry huge values, which would otherwise set every row's scale and leave the other
    channels a handful of int8 levels: the `outliers` largest channels are multiplied in float32, and the
    rest are smoothed (x / s, W * s with s = amax^0.5 / max|W|^0.5, SmoothQuant's balance of the two ranges).
    """

    def __init__(self, linear: nn.Linear, input_amax: torch.Tensor | None = None, outliers: int = 16,
                 keep_float_weight: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float().clone()
        inv_smooth = None
        cols = torch.zeros(0, dtype=torch.long)
        if input_amax is not None:
            cols = input_amax.float().topk(min(outliers, self.in_features - 1)).indices.sort().values
            smooth = (input_amax.float().clamp_min(1e-5).sqrt() / weight.abs().amax(0).clamp_min(1e-5).sqrt())
            weight = weight * smooth
            weight[:, cols] = 0  # so that they do not set the int8 weight scales either
            inv_smooth = 1 / smooth
            inv_smooth[cols] = 0  # outlier channels leave the int8 product entirely
        self.register_buffer("_inv_smooth", inv_smooth, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        self.register_buffer("_cols_weight", linear.weight.detach().double()[:, cols].T.contiguous(), persistent=False)
        scales = (weight.abs().amax(1).clamp_min(1e-12) / 127).double()
        with warnings.catch_warnings():  # quantized tensors are deprecated, but they are fbgemm's only way in
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch.quantize_per_channel(weight, scales, torch.zeros_like(scales, dtype=torch.long), 0,
                                                 torch.qint8)
        self._packed = torch.ops.quantized.linear_prepack(qweight, None)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        # The draft head reads rows of the target's LM head, so that one keeps its float weight.
        self.weight = linear.weight if keep_float_weight else None
        # fbgemm picks one activation range per call from the tensor's min and max. Every row is scaled to
        # max |x| = 1 and this extra row pins min = -1 and max = 1, so the range is the same for every call.
        span = torch.zeros(1, self.in_features)
        span[0, 0], span[0, -1] = -1.0, 1.0
        self.register_buffer("_span", span, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()
        smoothed = rows if self._inv_smooth is None else rows * self._inv_smooth
        scale = smoothed.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
        unit = torch.cat((smoothed / scale, self._span))
        out = torch.ops.quantized.linear_dynamic(unit, self._packed, True)[:-1] * scale
        if self._cols.numel():
            # In float64, as ExactLinear: a float32 product is exact there, so the sum's order (which the
            # kernel picks by the number of rows) stays far below float32's last bit. Elementwise float32
            # products would be batch-invariant too, but their (rows, outliers, out) intermediate made the
            # LM head's cost grow tenfold from 8 to 16 verified rows.
            out = out + (rows[:, self._cols].double() @ self._cols_weight).float()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"float_channels={self._cols.numel()}")


class ExactLinear(nn.Module):
    """A float Linear computed in float64 and rounded once (the layers int8 leaves in float; every linear of
    bfloat16 and float16 on a CPU): float32 GEMM kernels sum in an order that depends on the number of rows,
    float64 errors stay far below the result's last bit, so a row's result no longer depends on the rows
    beside it."""

    def __init__(self, linear: nn.Linear, keep_float_weight: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("_weight", linear.weight.detach().double().T.contiguous(), persistent=False)
        self.register_buffer("_bias", None if linear.bias is None else linear.bias.detach().double(), persistent=False)
        self.weight = linear.weight if keep_float_weight else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.double() @ self._weight
        if self._bias is not None:
            out += self._bias
        return out.to(x.dtype)


def input_ranges(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each nn.Linear's largest |input| per channel while `model` reads `batches` of token ids."""
    amax: dict[str, torch.Tensor] = {}

    def hook(name: str):
        def record(_module, inputs, _output):
            seen = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).abs().amax(0).float()
            amax[name] = torch.maximum(amax[name], seen) if name in amax else seen
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        with torch.inference_mode():
            for ids in batches:
                model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return amax


def quantize_int8(module: nn.Module, ranges: dict[str, torch.Tensor] | None = None, keep_float: tuple[str, ...] = (),
                  skip: tuple[str, ...] = ()) -> nn.Module:
    """Replace every nn.Linear inside `module` (in place) by an Int8Linear, calibrated with `ranges` (from
    `input_ranges`) when given. Names in `keep_float` keep their float weight reachable as `.weight`;
    linears under a name in `skip` become ExactLinears."""
    def make(full: str, linear: nn.Linear) -> nn.Module:
        if any(full.startswith(prefix) for prefix in skip):
            return ExactLinear(linear, keep_float_weight=full in keep_float)
        amax = None if ranges is None else ranges.get(full)
        return Int8Linear(linear, amax, keep_float_weight=full in keep_float)

    return _replace_linears(module, make)


def _replace_linears(module: nn.Module, make) -> nn.Module:
    """Replace every nn.Linear inside `module`, in place, by make(its full name, it)."""
    for name, child in list(module.named_modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, nn.Linear):
                setattr(child, attr, make(f"{name}.{attr}" if name else attr, sub))
    return module


def exact_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """Scaled dot-product attention in float64, rounded to the query's dtype once at the end."""
    batch, heads, n, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    # Query heads that share a key/value head go into one matrix product, so keys are never repeated.
    q = query.double().reshape(batch, kv_heads, heads // kv_heads * n, dim)
    scores = (q @ key.double().transpose(2, 3)).mul_(scaling).view(batch, kv_heads, heads // kv_heads, n, kv_len)
    if attention_mask is not None:
        scores += attention_mask[..., :kv_len].double()[:, :, None]
    out = torch.softmax(scores, dim=-1).view(batch, kv_heads, -1, kv_len) @ value.double()
    return out.view(batch, heads, n, dim).to(query.dtype).transpose(1, 2).contiguous(), None


def masked_gqa(device: torch.device) -> bool:
    """Whether sdpa on `device` reads grouped key/value heads in place under a mask: a CPU's does; on a GPU the
    memory-efficient kernel takes a mask but not grouped heads."""
    return device.type == "cpu"


def tree_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except for a masked forward (a draft tree) on a CPU: there the query heads
    that share a key/value head read it in place (`enable_gqa`) where transformers first repeats every key and
    value head, six more operations a layer in each tree forward (the result is the same to the bit). Elsewhere
    (`masked_gqa`) the repeat stays."""
    if attention_mask is None or dropout or not masked_gqa(query.device):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if attention_mask.shape[-1] != key.shape[-2]:
        attention_mask = attention_mask[..., : key.shape[-2]]
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                           enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(EXACT_ATTENTION, exact_attention)
AttentionMaskInterface.register(EXACT_ATTENTION, eager_mask)
AttentionInterface.register(TREE_ATTENTION, tree_attention)
AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)


# Calibration chat for the activation ranges: prose, code, arithmetic, a list, other languages. It goes
# through the chat template when there is one: the template's own tokens carry some of the largest values.
CALIBRATION_CHAT = [
    {"role": "user", "content": "Tell me a short story about a lighthouse keeper."},
    {"role": "assistant", "content": "The old lighthouse keeper climbed the stairs each evening, counting the "
                                     "steps as his father had done. When the storm came in November, the lamp "
                                     "failed twice, and he kept it burning with oil from the kitchen."},
    {"role": "user", "content": "Write a Python function that returns the first n Fibonacci numbers."},
    {"role": "assistant", "content": "def fibonacci(n: int) -> list[int]:\n    seq = [0, 1]\n    while len(seq) < n:"
                                     "\n        seq.append(seq[-1] + seq[-2])\n    return seq[:n]"},
    {"role": "user", "content": "A train travels 180 km in 2.5 hours. What is its average speed?"},
    {"role": "assistant", "content": "Its average speed is 180 / 2.5 = 72 km/h."},
    {"role": "user", "content": "Give me three tips for better sleep, then translate the first into French."},
    {"role": "assistant", "content": "1. Keep a regular schedule. 2. Avoid screens before bed. 3. Keep the room "
                                     "cool. In French: Gardez un horaire régulier."},
]


def calibration_ids(tokenizer) -> torch.Tensor:
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(CALIBRATION_CHAT, tokenize=False)
    else:
        text = "\n".join(m["content"] for m in CALIBRATION_CHAT)
    return torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])


def to_int8(model: PreTrainedModel, tokenizer=None) -> PreTrainedModel:
    """Put a float32 causal LM into the int8 mode: int8 linears (LM head included) calibrated on
    CALIBRATION_CHAT when a tokenizer is given, the first decoder layer left in float32 (int8 there costs
    the most agreement with float32), and exact attention."""
    ranges = None
    if tokenizer is not None:
        ranges = input_ranges(model, [calibration_ids(tokenizer).to(model.device)])
    quantize_int8(model, ranges, keep_float=("lm_head",), skip=("model.layers.0.",))
    model.set_attn_implementation(EXACT_ATTENTION)
    return model


def to_exact(model: PreTrainedModel) -> PreTrainedModel:
    """bfloat16 / float16 on a CPU: every linear an ExactLinear and exact attention, so a token's logits do
    not depend on the other tokens of a verified tree. Native bfloat16 kernels are batch-dependent, and
    rounding to 8 bits makes their differences visible: 18 of 28 greedy outputs diverged on dev questions.
    On this project's AVX2 CPU the float64 products are no slower than the bfloat16 kernels."""
    _replace_linears(model, lambda full, linear: ExactLinear(linear, keep_float_weight=full == "lm_head"))
    model.set_attn_implementation(EXACT_ATTENTION)
    return model


def apply_precision(model: PreTrainedModel, precision: str, device: str, tokenizer=None) -> PreTrainedModel:
    """What a precision mode does to a freshly loaded model beyond its float dtype: int8 quantizes; bfloat16
    and float16 on a CPU compute exactly; elsewhere the native kernels stay, sdpa's as `tree_attention` calls them."""
    if precision == "int8":
        return to_int8(model, tokenizer)
    if precision in ("bfloat16", "float16") and device == "cpu":
        return to_exact(model)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(TREE_ATTENTION)
    return model
