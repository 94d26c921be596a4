"""Draft-head checkpoints: writing a head in its published layout, and loading a head directory or hub id
with every config field and tensor checked before the head is used.

Both layouts load through `load_head`, which tells them apart by their keys: EAGLE-1/EAGLE-2 heads
(ddd/head.py) name their decoder layer `layers.0.*`, EAGLE-3 heads (ddd/eagle3.py) `midlayer.*`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .costs import Calibration, CalibrationError
from .eagle3 import Eagle3Head
from .head import DraftHead, EagleHead, HeadLoadError, for_target, one_line
from .hub import HEAD_FILES_PATTERNS, fetch, is_hub_id
from .models import ModelLoadError, Target

HEAD_FILES = ("model.safetensors", "pytorch_model.bin")
# Keys a checkpoint may carry that are not weights of the head: the draft-vocabulary maps, which are checked
# on their own, and a copy of the target's embeddings in a head of the target's width (which reads the
# target's own; a head of another width has embeddings of its own width, a weight like any other).
_NOT_WEIGHTS = ("embed_tokens.weight", "d2t", "t2d")
_EMBEDDINGS = "embed_tokens.weight"
_SHOWN = 6  # keys listed in a message before it says how many more there are
CALIBRATION_KEY = "acceptance_calibration"  # the head's measured acceptance rates (ddd/costs.py), in config.json


def save_head(head: DraftHead, directory: str | Path, extra: dict | None = None) -> Path:
    """Write `head` in its published layout: config.json and model.safetensors."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict()
    config.update({**head.config_extra(), **(extra or {})})
    if head.calibration.measured:
        config[CALIBRATION_KEY] = head.calibration.to_json()
    (directory / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in head.state_dict_official().items()}
    save_file(tensors, directory / "model.safetensors")
    return directory


def load_head(directory: str | Path, target: Target) -> DraftHead:
    """Load a head checkpoint directory (official EAGLE or EAGLE-3 layout, or ours) and check that it fits
    `target`; anything that does not gives a HeadLoadError saying what. A hub id (owner/name) is fetched first."""
    directory = _head_directory(str(directory))
    raw = _read_config(directory)
    weights = _read_weights(directory)
    head = _head_class(weights, directory).from_checkpoint(raw, weights, target, directory)
    own = _check_weights(head, weights, target, directory)
    head.load_official(own)
    if CALIBRATION_KEY in raw:
        try:
            head.calibration = Calibration.from_json(raw[CALIBRATION_KEY])
        except CalibrationError as err:
            raise HeadLoadError(f"{directory / 'config.json'}: {CALIBRATION_KEY}: {err}.") from None
    # Its own generator: a test input must not move the caller's random draws.
    generator = torch.Generator().manual_seed(0)
    embeds = torch.randn(1, 2, head.config.hidden_size, generator=generator)
    features = torch.randn(1, 2, head.feature_size, generator=generator)
    try:
        with torch.no_grad():
            head(embeds, head.fuse(features), torch.arange(2)[None])
    # The checks above cover what we know can go wrong; this catches config combinations nobody listed.
    except Exception as err:
        raise HeadLoadError(f"The head at {directory} fails on a test input: {one_line(err)}") from None
    return for_target(head, target)


def _head_directory(spec: str) -> Path:
    if not is_hub_id(spec):
        return Path(spec)
    try:
        return fetch(spec, "draft head", HEAD_FILES_PATTERNS)
    except ModelLoadError as err:
        raise HeadLoadError(str(err)) from None


def _listing(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN])
    return shown + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")


def _read_config(directory: Path) -> dict:
    path = directory / "config.json"
    if not path.exists():
        raise HeadLoadError(f"No draft head at {directory}: config.json is missing.")
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HeadLoadError(f"{path} is not readable JSON: {err}.") from None
    if not isinstance(raw, dict):
        raise HeadLoadError(f"{path} holds a JSON {type(raw).__name__}, not a config object.")
    return raw


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    for name in HEAD_FILES:
        path = directory / name
        if not path.exists():
            continue
        try:
            if name.endswith(".safetensors"):
                weights = load_file(path)
            else:
                weights = torch.load(path, map_location="cpu", weights_only=True)
        # A damaged file fails inside safetensors or the unpickler with whatever error it meets first.
        except Exception as err:
            raise HeadLoadError(f"Cannot read {path}: {one_line(err)}") from None
        if not isinstance(weights, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
            raise HeadLoadError(f"{path} does not hold a dictionary of named tensors.")
        return weights
    raise HeadLoadError(f"No head weights in {directory}: expected one of {', '.join(HEAD_FILES)}.")


def _head_class(weights: dict[str, torch.Tensor], where: Path) -> type[DraftHead]:
    fc = weights.get("fc.weight")
    if fc is None:
        raise HeadLoadError(f"{where} is not an EAGLE head: it has no `fc.weight` (keys: {_listing(sorted(weights))}).")
    if fc.ndim != 2:
        raise HeadLoadError(f"`fc.weight` in {where} is not a matrix: shape {list(fc.shape)}.")
    return Eagle3Head if any(k.startswith("midlayer.") for k in weights) else EagleHead


def _check_weights(head: DraftHead, weights: dict[str, torch.Tensor], target: Target,
                   where: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's weights of the head, each checked against the shape the config gives it; a copy of
    the target's embeddings that the head does not use is checked against the target's table."""
    expected = head.official_weights()
    given = {k: v for k, v in weights.items() if k not in _NOT_WEIGHTS or k in expected}
    copy = weights.get(_EMBEDDINGS) if _EMBEDDINGS not in expected else None
    if copy is not None and list(copy.shape) != [target.vocab_size, target.hidden_size]:
        raise HeadLoadError(f"Head weights in {where}: {_EMBEDDINGS} {list(copy.shape)} (expected "
                            f"{[target.vocab_size, target.hidden_size]}, the target's embedding table, for a head of "
                            "the target's width).")
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    shapes = [f"{k} {list(given[k].shape)} (expected {list(expected[k].shape)})"
              for k in sorted(set(given) & set(expected)) if given[k].shape != expected[k].shape]
    problems = ([f"missing {_listing(missing)}"] if missing else []) + \
               ([f"unexpected {_listing(unexpected)}"] if unexpected else []) + \
               ([f"wrong shapes: {_listing(shapes)}"] if shapes else [])
    if problems:
        raise HeadLoadError(f"Head weights in {where} do not match the {head.kind.upper()} layout its config "
                            "describes: " + "; ".join(problems) + ".")
    not_float = sorted(k for k, v in given.items() if not v.dtype.is_floating_point)
    if not_float:
        raise HeadLoadError(f"Head weights in {where} are not floating point: {_listing(not_float)}.")
    broken = sorted(k for k, v in given.items() if not bool(torch.isfinite(v).all()))
    if broken:
        raise HeadLoadError(f"Head weights in {where} hold NaN or infinite values: {_listing(broken)}.")
    return given
