"""DDD Explorer: plain decoding, EAGLE-2 and Dynamic Depth Decoding raced side by side.

Run `python app.py` (options: --model DIR_OR_HUB_ID, --head DIR|random, --device, --dtype, --host, --port;
or the environment variables DDD_MODEL, DDD_HEAD, DDD_DEVICE, DDD_DTYPE). The page opens on a recorded
example; the model loads at start-up (on a ZeroGPU Space with the papers' pairs that fit its GPU), and a model that
cannot load gives way to the next that does, the page saying why. The app's parts live in `explorer/` (docs/app.md).
"""
from __future__ import annotations

import os

# OpenMP's idle threads busy-wait by default, and each Gradio worker thread that runs a forward starts its own team of
# them: on a small CPU they took the cores from the decoding, and the first race after a start ran several times
# slower than the next (docs/app.md). Read once, when PyTorch loads, so it is set before anything imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402 - after the OpenMP setting, as every import below
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import gradio as gr  # noqa: E402

from components.jsonfile import LIMITS
from components.views import CSS
from ddd.catalog import PAIRS
from ddd.settings import PRECISIONS
from ddd.shipped import shipped
from explorer.deploy import export_space_cli, space_race
from explorer.examples import ExampleShelf, record_examples
from explorer.machine import pick_cpu_preset
from explorer.models import CPU_PRECISION, ModelChoice, ModelConfig, Models
from explorer.page import build_page
from explorer.presets import MEASURED, PRESET_NAMES, opening_preset
from explorer.racing import time_start_up, zero_gpu

EXAMPLES_DIR = Path(os.environ.get("DDD_EXAMPLES") or shipped("examples"))
THEME = dict(primary_hue="violet", secondary_hue="blue")
# Violet 500 on white or on violet 100 is under WCAG AA's 4.5:1 for text; 700 is over 7:1 (tests/test_accessibility.py).
THEME_TEXT = dict(button_primary_background_fill="*primary_700", button_primary_background_fill_hover="*primary_800",
                  block_label_text_color="*primary_700", block_title_text_color="*primary_700",
                  block_info_text_color="*neutral_600", body_text_color_subdued="*neutral_600",
                  checkbox_label_background_fill_selected="*primary_700")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DDD Explorer: race plain decoding, EAGLE-2 and DDD.")
    parser.add_argument("--model", default=os.environ.get("DDD_MODEL"),
                        help="target model: a local directory or hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--head", default=os.environ.get("DDD_HEAD"),
                        help="EAGLE draft head directory, or 'random' (default: assets/head when present)")
    parser.add_argument("--device", default=os.environ.get("DDD_DEVICE"), help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=os.environ.get("DDD_DTYPE"), choices=PRECISIONS,
                        help=f"starting precision (default: float16 on a GPU, {CPU_PRECISION} on a CPU); "
                             "the Settings panel can switch it")
    parser.add_argument("--preset", default=os.environ.get("DDD_PRESET"), choices=PRESET_NAMES,
                        help="the tree settings the page opens on (default: on a CPU, this machine's pick, measured "
                             "once at the first start and kept in DDD_CACHE; on a GPU, the papers')")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--record-examples", nargs="*", metavar="STEM",
                        help="record the example races (or those named, e.g. maths) into assets/examples (or "
                             "DDD_EXAMPLES), each until plain decoding's forwards are steady, and exit")
    parser.add_argument("--export-space", nargs=2, metavar=("KIND", "DIR"),
                        help="write DIR (new or empty) as a Hugging Face Space of KIND: zerogpu, cpu or static, "
                             "and exit (docs/deploy.md)")
    return parser.parse_args(argv)


def zero_gpu_models(config: ModelConfig) -> tuple[Models, list[ModelChoice]]:
    """A ZeroGPU Space's models, loaded now (nothing can load later there, so the menu offers what loads now:
    explorer.choosing), and the pairs it holds beside its own. It opens on the pair the GPU projection picks
    (explorer.deploy.space_race), unless the command line names one; on the first of the others that loads when that
    one cannot (Models.pin)."""
    if config.model is None:
        first = space_race().projection.pair
        config = replace(config, model=first.model, head=first.head)
    models = Models(config)
    others = [ModelChoice(p.model, p.head) for p in PAIRS if (p.model, p.head) != (config.model, config.head)]
    models.pin(others)
    return models, [c for c in others if models.source(c) != models.source(None)]


def local_models(config: ModelConfig) -> Models:
    """The app's models on this machine, its own pair loaded now (Models.start); a model or head named on the
    command line that cannot load gives way to the default pair, and the page says why."""
    models = Models(config)
    models.start([ModelChoice()] if config.model or config.head else [])
    return models


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.export_space:
        raise SystemExit(export_space_cli(*args.export_space))
    config = ModelConfig(args.model or None, args.head or None, args.device, args.dtype)
    if args.record_examples is not None:
        record_examples(Models(config), EXAMPLES_DIR, only=args.record_examples)
        return
    models, others = zero_gpu_models(config) if zero_gpu() else (local_models(config), [])
    if models.loaded and models.device() == "cpu" and not zero_gpu() and args.preset in (None, MEASURED):
        pick_cpu_preset(models)
    page = build_page(models, ExampleShelf(EXAMPLES_DIR), preset=args.preset)
    if models.loaded:
        # On ZeroGPU: a race asks for what it will take (explorer.gputime), timed on each pair that loaded.
        if page.runner.gpu is not None:
            time_start_up(models, page.runner.race, page.runner.measure, page.runner.gpu, [None, *others])
        tree = opening_preset(models, args.preset).values
        for choice in [None, *(c for c in others if models.pinned_choice(c))]:  # the queue's first estimates
            page.runner.time_a_race(tree, choice)
    page.lesson.prepare()
    page.demo.launch(server_name=args.host, server_port=args.port, css=CSS, allowed_paths=[str(EXAMPLES_DIR)],
                     max_file_size=LIMITS.file_bytes, theme=gr.themes.Soft(**THEME).set(**THEME_TEXT))


if __name__ == "__main__":
    main()
