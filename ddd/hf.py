"""EAGLE, EAGLE-2, DDD and the cost rule inside transformers' own `model.generate()`:

    out = model.generate(**inputs, custom_generate=ddd.hf.generate, head=HEAD, method="ddd", max_new_tokens=64)

generate() prepares the inputs and the generation config as always, then hands its decoding loop to `generate`
here, which runs the engine's Generation on the prompt's token ids and answers as generate() would: the
sequences, or with `return_dict_in_generate=True` an output whose `trace` is the run's RunTrace.
`generate_folder` is what a folder written by `python -m ddd export-generate DIR` runs (custom_generate=DIR).
"""
from __future__ import annotations

import inspect
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from transformers import AutoTokenizer, GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.generation import (EosTokenCriteria, GenerateDecoderOnlyOutput, MaxLengthCriteria,
                                     TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

from .catalog import choose_head, resolve_head
from .engine import Generation
from .head import DraftHead, HeadLoadError
from .models import DEFAULT_MODEL, SUPPORTED_TYPES, ModelLoadError, Target, cache_dir
from .precision import Int8Linear
from .settings import METHOD_DECLARATIONS, SEED, Sampling, SettingsError, check_method, method_settings
from .trace import RunTrace

# Every method's settings, each a keyword argument of generate() (transformers passes a custom loop only the
# keyword arguments its signature names).
SETTING_NAMES = tuple(sorted({s.name for declared in METHOD_DECLARATIONS.values() for s in declared}))
# The logits warpers of sampling, in the order ddd.acceptance.probabilities applies them.
WARPERS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
STOPS = (MaxLengthCriteria, EosTokenCriteria)
EXTRA_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
# What generate() itself puts among the model's inputs; the engine runs its own forwards and cache.
PREPARED_INPUTS = ("attention_mask", "position_ids", "logits_to_keep", "use_cache", "cache", "past_key_values")


class GenerateError(ValueError):
    """A generate() argument this loop cannot honour as transformers' own loop would; the message says which."""


@dataclass
class GenerateOutput(GenerateDecoderOnlyOutput):
    """generate()'s output (`sequences`) with the run's trace: every step's tree, depth, acceptance and timing."""

    trace: RunTrace | None = None


def generate(model: PreTrainedModel, input_ids: torch.LongTensor, logits_processor: Any = None,
             stopping_criteria: Any = None, generation_config: GenerationConfig | None = None,
             head: str | DraftHead | None = None, method: str = "ddd", **model_kwargs: Any):
    """generate()'s decoding loop by `method` (plain, eagle, eagle2, ddd, cost) with `head` (a head directory, a
    hub id, 'random' or a loaded DraftHead; None: the shipped head, for the default model only). The method's
    settings are keyword arguments by their declared names (threshold=-0.5). Greedy or sampled as the
    generation config says (do_sample, temperature, top_k, top_p; the seed drawn from torch's global
    generator), stopping at max_new_tokens / max_length and the config's eos tokens; one sequence at a time."""
    streamer = _streamer(sys._getframe(1))
    settings = {name: model_kwargs.pop(name) for name in SETTING_NAMES if name in model_kwargs}
    settings = {name: value for name, value in settings.items() if value is not None}
    config = generation_config if generation_config is not None else model.generation_config
    _check_call(input_ids, stopping_criteria, config, model_kwargs)
    target = _target(model, getattr(streamer, "tokenizer", None))
    prompt = _unpadded(input_ids[0], model_kwargs.get("attention_mask"))
    draft_head = _head(head, check_method(method), target)
    run = Generation(target, draft_head, prompt, method, max_new_tokens=config.max_length - input_ids.shape[1],
                     sampling=_sampling(logits_processor or [], config), settings=method_settings(method, **settings),
                     eos_ids=_eos(config), record=bool(config.return_dict_in_generate))
    try:
        for step in run:
            for token in step.token_ids:  # one token per put, as transformers' own loop streams
                if streamer is not None:
                    streamer.put(torch.tensor([token]))
    finally:
        if streamer is not None:
            streamer.end()
    new = torch.tensor([run.token_ids], dtype=input_ids.dtype, device=input_ids.device)
    sequences = torch.cat((input_ids, new), dim=1)
    if config.return_dict_in_generate:
        return GenerateOutput(sequences=sequences, trace=run.trace)
    return sequences


def _with_settings(function):
    """`function` with every declared setting in its signature, where generate() looks for a loop's own
    keyword arguments; the values arrive in its **model_kwargs."""
    signature = inspect.signature(function)
    *named, rest = signature.parameters.values()
    declared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in SETTING_NAMES]
    function.__signature__ = signature.replace(parameters=[*named, *declared, rest])
    return function


generate = _with_settings(generate)


def generate_folder(model: PreTrainedModel, **arguments: Any):
    """What an exported folder's custom_generate/generate.py runs: transformers calls a folder's generate with
    generate()'s own arguments, unprepared, so they go through generate()'s preparation with `generate` as the
    loop."""
    return GenerationMixin.generate(model, custom_generate=generate, **arguments)


def _streamer(caller: FrameType) -> Any:
    """The streamer given to the generate() call that runs this loop. generate() puts the prompt into it but,
    for a callable custom_generate, passes on only the keyword arguments the callable's signature adds to its
    own loop's (transformers 5), so the streamer is read from that call itself."""
    if caller.f_code is inspect.unwrap(GenerationMixin.generate).__code__:
        return caller.f_locals.get("streamer")
    return None


def _check_call(input_ids: torch.Tensor, stopping_criteria: Any, config: GenerationConfig,
                model_kwargs: dict[str, Any]) -> None:
    """Refuse, in one line, what transformers' own loop would do and this one would not."""
    if config.num_beams and config.num_beams > 1:
        raise GenerateError("ddd.hf.generate decodes one sequence, not a beam search: leave num_beams at 1.")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        rows = input_ids.shape[0] if input_ids.dim() == 2 else "not 2-D"
        raise GenerateError(f"ddd.hf.generate decodes one sequence at a time (batch size 1), and input_ids holds "
                            f"{rows} rows: call generate() once per prompt, with num_return_sequences=1.")
    asked = [name for name in EXTRA_OUTPUTS if getattr(config, name, False)]
    if asked and config.return_dict_in_generate:
        raise GenerateError(f"ddd.hf.generate returns the sequences and the run's trace, not {', '.join(asked)}: "
                            "the trace has each step's tokens, tree and scores.")
    others = [type(c).__name__ for c in stopping_criteria or [] if not isinstance(c, STOPS)]
    if others:
        raise GenerateError(f"ddd.hf.generate stops at max_new_tokens and the eos tokens only, not at "
                            f"{', '.join(others)}.")
    unknown = sorted(set(model_kwargs) - set(PREPARED_INPUTS))
    if unknown:
        raise GenerateError(f"ddd.hf.generate does not take {', '.join(unknown)}; its own arguments are head, method "
                            f"and the settings {', '.join(SETTING_NAMES)}.")
    for name in ("cache", "past_key_values"):
        cache = model_kwargs.get(name)
        if cache is not None and cache.get_seq_length() > 0:
            raise GenerateError("ddd.hf.generate starts from the prompt: pass no filled cache (past_key_values).")


def _target(model: PreTrainedModel, tokenizer: Any) -> Target:
    """The engine's view of `model`: its name (the default model's as the engine names it), precision and
    tokenizer (the streamer's, else the one saved beside the model), which writes the trace's text."""
    model_type = model.config.model_type
    if model_type not in SUPPORTED_TYPES:
        raise ModelLoadError(f"The model is a {model_type!r}; supported families: {', '.join(SUPPORTED_TYPES)}.")
    path = str(model.name_or_path)
    name = DEFAULT_MODEL if path and Path(path) == cache_dir() / DEFAULT_MODEL else path or model_type
    quantized = any(isinstance(m, Int8Linear) for m in model.modules())
    precision = "int8" if quantized else str(model.dtype).removeprefix("torch.")
    return Target(model=model, tokenizer=tokenizer or _tokenizer(path), name=name, precision=precision)


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"ddd.hf.generate writes the run's text with the model's tokenizer, and none loads "
                             f"from {path!r} ({first}); give generate() a streamer with the tokenizer.") from None


def _unpadded(ids: torch.Tensor, mask: torch.Tensor | None) -> list[int]:
    """The prompt's ids without left padding (what the attention mask hides)."""
    if mask is None or bool(mask.all()):
        return ids.tolist()
    kept = mask[0].bool()
    first = int(kept.int().argmax())
    if not bool(kept[first:].all()):
        raise GenerateError("ddd.hf.generate reads a prompt padded on the left only: the attention mask hides "
                            "tokens after the first it shows.")
    return ids[first:].tolist()


def _head(spec: str | DraftHead | None, method: str, target: Target) -> DraftHead | None:
    """The draft head for `spec`, loaded and checked as the engine loads any head."""
    if method == "plain":
        return None
    if isinstance(spec, DraftHead):
        return spec
    if spec is not None and not isinstance(spec, str):
        raise HeadLoadError(f"head must be a head directory, a hub id, 'random' or a loaded head (ddd.resolve_head), "
                            f"not {type(spec).__name__}.")
    if spec is None and choose_head(None, target.name).source is None:
        raise SettingsError(f"Method {method!r} needs a draft head: pass head= a head directory, a hub id or a loaded "
                            "head (the shipped head goes with the default model only).")
    head, note = resolve_head(spec, target)
    if note:
        warnings.warn(note, stacklevel=3)
    return head


def _sampling(processors: Any, config: GenerationConfig) -> Sampling:
    """The engine's Sampling for generate()'s logits processors: greedy with none, else temperature, top-k and
    top-p in that order (the distribution ddd.acceptance.probabilities computes); anything else is refused."""
    if not config.do_sample:
        if len(processors):
            raise GenerateError(f"ddd.hf.generate decodes greedily without logits processors, not with "
                                f"{', '.join(type(p).__name__ for p in processors)}.")
        return Sampling()
    values: dict[str, float] = {"temperature": 1.0}
    order = -1
    for processor in processors:
        kind = next((i for i, warper in enumerate(WARPERS) if type(processor) is warper), None)
        if kind is None or kind <= order or getattr(processor, "min_tokens_to_keep", 1) != 1:
            raise GenerateError(f"ddd.hf.generate samples with temperature, top_k and top_p only (applied in that "
                                f"order, keeping at least one token), not with {type(processor).__name__}.")
        order = kind
        name = ("temperature", "top_k", "top_p")[kind]
        values[name] = getattr(processor, name)
    # The seed comes from torch's global generator, so that torch.manual_seed() repeats a sampled run.
    seed = int(torch.randint(int(SEED.high), ()))
    return Sampling(**values, seed=seed)


def _eos(config: GenerationConfig) -> set[int]:
    eos = config.eos_token_id
    if eos is None:
        return set()
    return set(eos if isinstance(eos, (list, tuple)) else [eos])

