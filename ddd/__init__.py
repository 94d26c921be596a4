"""DDD Explorer's engine: plain, EAGLE, EAGLE-2 and Dynamic Depth Decoding on stock transformers models."""
from .eagle3 import Eagle3Head, new_eagle3_head
from .engine import Generation, PromptError, encode_prompt, generate
from .catalog import resolve_head
from .head import DraftHead, EagleHead, HeadLoadError, load_head, new_head, save_head
from .models import DEFAULT_MODEL, ModelLoadError, Target, load_target
from .settings import METHODS, Sampling, SettingsError, method_settings
from .trace import SCHEMA_VERSION, DraftNode, RunTrace, Step, TraceFileError

__all__ = [
    "DEFAULT_MODEL", "METHODS", "SCHEMA_VERSION", "DraftHead", "DraftNode", "Eagle3Head", "EagleHead", "Generation",
    "HeadLoadError", "ModelLoadError", "PromptError", "RunTrace", "Sampling", "SettingsError", "Step", "Target",
    "TraceFileError", "encode_prompt", "generate", "load_head", "load_target", "method_settings", "new_eagle3_head",
    "new_head", "resolve_head", "save_head",
]
