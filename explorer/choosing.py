"""The model menu: the papers' target/head pairs (ddd.catalog), or any model and head typed in, each checked
for memory before anything loads. On a CPU only what races there at a usable pace is offered; on a ZeroGPU
Space the menu is off (its models load once, at start-up)."""
from __future__ import annotations

from components.inputs import InputError, text
from ddd.catalog import PAIRS, ModelPair, check_fits
from ddd.hub import HUB_ID
from ddd.models import ModelLoadError

from .layout import Ui
from .models import Models
from .presets import GPU_PRESET, PRESETS, widget_values
from .viewing import message, warn

OTHER = "another model (type its ids below)"
MAX_ID_CHARS = 300


def offered(device: str) -> list[ModelPair]:
    return [p for p in PAIRS if device.startswith("cuda") or not p.gpu_only]


def menu_labels(device: str) -> list[str]:
    return [p.label for p in offered(device)] + [OTHER]


def current_label(models: Models) -> str:
    """The menu entry of the configured pair (OTHER for one typed in)."""
    config = models.config
    return next((p.label for p in offered(models.device()) if (p.model, p.head) == (config.model, config.head)), OTHER)


def _typed(value, label: str, allowed: tuple[str, ...] = ()) -> str | None:
    """A hub id typed in (or one of `allowed`). Directories on this machine are not offered to visitors: they
    are given on the command line (--model, --head)."""
    value = text(value, label).strip()
    if len(value) > MAX_ID_CHARS:
        raise InputError(f"{label} is {len(value):,} characters long; a hub id has at most {MAX_ID_CHARS}.")
    if value and value not in allowed and not HUB_ID.match(value):
        raise InputError(f"{label} {value!r} is not a hub id (owner/name); local directories are given on the "
                         "command line (python app.py --model DIR --head DIR).")
    return value or None


class ModelMenu:
    def __init__(self, ui: Ui, models: Models):
        self.ui, self.models = ui, models

    def choose(self, label: str | None, model_text: str | None, head_text: str | None) -> dict:
        """Race the chosen pair from the next Run on, once it is known to fit this device's memory."""
        ui, models = self.ui, self.models
        if models.pinned:
            return {ui["message"]: message("This Space loads its model once, at start-up: the menu is off here.")}
        pair = next((p for p in offered(models.device()) if p.label == label), None)
        try:
            if pair is None and label != OTHER:
                raise InputError(f"There is no model choice called {label!r} here.")
            model, head = (pair.model, pair.head) if pair else (_typed(model_text, "The model id"),
                                                                _typed(head_text, "The head id", ("random",)))
            if pair is None and model is None:
                raise InputError("Type a model's hub id, such as lmsys/vicuna-7b-v1.3.")
            precision = models.default_precision()
            check_fits(model, precision, models.device(), freed=models.loaded_bytes())
        except (InputError, ModelLoadError) as err:
            warn(str(err))
            return {ui["message"]: message(str(err))}
        models.choose(model, head)
        values = {ui["model_info"]: models.describe(),
                  ui["message"]: message(f"{model or 'The default model'} loads on the next Run, in {precision}.",
                                         "note")}
        if pair is not None and pair.gpu_only:  # the papers' pairs come with the papers' settings
            values[ui["preset"]] = GPU_PRESET
            values.update({ui[f]: v for f, v in widget_values(PRESETS[GPU_PRESET]).items()})
        return values
