"""The model menu: the papers' target/head pairs (ddd.catalog), or any model and head typed in by hub id, each
checked for memory before anything loads. A choice is the visitor's own: it lives in their Session and loads on
their next Run, while every other visitor keeps racing theirs. On a CPU only what races there at a usable pace
is offered; on a ZeroGPU Space only the pairs loaded at start-up (Models.pin), since nothing can load later."""
from __future__ import annotations

from dataclasses import dataclass

from components.inputs import InputError
from ddd.catalog import PAIRS, ModelPair, check_fits
from ddd.models import ModelLoadError

from .layout import Ui
from .models import ModelChoice, Models, hub_id
from .presets import GPU_PRESET, widget_values
from .sessions import Session
from .viewing import message

OTHER = "another model (type its ids below)"


def offered(device: str) -> list[ModelPair]:
    return [p for p in PAIRS if device.startswith("cuda") or not p.gpu_only]


def available(models: Models) -> list[ModelPair]:
    """The pairs a visitor may choose: those pinned at start-up where the models are pinned, else `offered`."""
    if models.pinned:
        return [p for p in PAIRS if models.pinned_choice(ModelChoice(p.model, p.head))]
    return offered(models.device())


def menu_labels(device: str) -> list[str]:
    return [p.label for p in offered(device)] + [OTHER]


def current_label(models: Models) -> str:
    """The menu entry of the app's own pair (OTHER for one given on the command line)."""
    config = models.config
    return next((p.label for p in available(models) if (p.model, p.head) == (config.model, config.head)), OTHER)


@dataclass(frozen=True)
class MenuItems:
    """What the page's model menu shows: its entries, the one selected, and whether it is shown at all."""

    labels: list[str]
    chosen: str | None  # None where nothing loaded at start-up
    shown: bool
    typed: bool  # whether typed hub ids may load (not where every model loaded at start-up)


def menu_items(models: Models) -> MenuItems:
    """The pinned pairs alone where the models are pinned (no typed ids: nothing loads later), shown when there
    is more than one; elsewhere this device's pairs and typed ids."""
    if models.pinned:
        labels = [p.label for p in available(models)]
        return MenuItems(labels, current_label(models) if labels else None, len(labels) > 1, False)
    return MenuItems(menu_labels(models.device()), current_label(models), True, True)


class ModelMenu:
    def __init__(self, ui: Ui, models: Models):
        self.ui, self.models = ui, models

    def choose(self, label: str | None, model_text: str | None, head_text: str | None,
               session: Session | None = None) -> dict:
        """The chosen pair for this visitor's next Runs, once it is known to fit this device's memory. Nothing
        loads or unloads here: other visitors' races go on with their own models."""
        ui, models = self.ui, self.models
        session = session or Session()
        pairs = available(models)
        pair = next((p for p in pairs if p.label == label), None)
        try:
            if pair is None and models.pinned and not pairs:
                raise InputError(f"This Space could not load any model at start-up. {models.unavailable}")
            if pair is None and models.pinned:
                raise InputError(f"This Space loaded its models at start-up and offers only those: "
                                 f"{'; '.join(p.label for p in pairs)}.")
            if pair is None and label != OTHER:
                raise InputError(f"There is no model choice called {label!r} here.")
            choice = ModelChoice(pair.model, pair.head) if pair else ModelChoice(
                hub_id(model_text, "The model id"), hub_id(head_text, "The head id", ("random",)))
            if pair is None and choice.model is None:
                raise InputError("Type a model's hub id, such as lmsys/vicuna-7b-v1.3.")
            precision = models.default_precision()
            if models.needs_load(choice, precision):
                check_fits(choice.model, precision, models.device(), freed=models.idle_bytes())
        except (InputError, ModelLoadError) as err:
            return {ui["message"]: message(str(err)), ui["session"]: session}
        session.choice = choice
        name = choice.model or "The default model"
        state = "is loaded" if not models.needs_load(choice, precision) else "loads on your next Run"
        values = {ui["model_info"]: models.describe(choice), ui["session"]: session,
                  ui["message"]: message(f"{name} {state}, in {precision}, for your races only: other visitors "
                                         "keep their own model.", "note")}
        if pair is not None and pair.gpu_only:  # the papers' pairs come with their papers' settings
            values[ui["preset"]] = GPU_PRESET
            values.update({ui[f]: v for f, v in widget_values(pair.tree_settings()).items()})
        return values

    def describe(self, session: Session | None) -> str:
        """The Settings panel's model line for this visitor."""
        return self.models.describe(session.choice if session else None)
