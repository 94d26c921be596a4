"""DDD Explorer: plain decoding, EAGLE-2 and Dynamic Depth Decoding raced side by side.

Run `python app.py` (options: --model DIR_OR_HUB_ID, --head DIR|random, --device, --dtype, --host, --port;
or the environment variables DDD_MODEL, DDD_HEAD, DDD_DEVICE, DDD_DTYPE). The page opens on a recorded
example; the model loads on the first Run (at start-up on a ZeroGPU Space, with the papers' pairs that fit its
GPU). The app's parts live in `explorer/` (docs/app.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import gradio as gr

from components.runfile import LIMITS
from components.views import CSS
from ddd.catalog import PAIRS
from ddd.settings import PRECISIONS
from explorer.deploy import export_space_cli
from explorer.examples import ExampleShelf, record_examples
from explorer.models import CPU_PRECISION, ModelChoice, ModelConfig, Models
from explorer.page import build_page

ROOT = Path(__file__).resolve().parent
EXAMPLES_DIR = Path(os.environ.get("DDD_EXAMPLES") or ROOT / "assets" / "examples")
THEME = dict(primary_hue="violet", secondary_hue="blue")


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
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--record-examples", action="store_true",
                        help="record the example races into assets/examples (or DDD_EXAMPLES) and exit")
    parser.add_argument("--export-space", nargs=2, metavar=("KIND", "DIR"),
                        help="write DIR (new or empty) as a Hugging Face Space of KIND: zerogpu, cpu or static, "
                             "and exit (README: Deploy)")
    return parser.parse_args(argv)


def zero_gpu() -> bool:
    """Whether this is a ZeroGPU Space: its `spaces` package is installed there and rarely anywhere else."""
    return importlib.util.find_spec("spaces") is not None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.export_space:
        raise SystemExit(export_space_cli(*args.export_space))
    models = Models(ModelConfig(args.model or None, args.head or None, args.device, args.dtype))
    if args.record_examples:
        record_examples(models, EXAMPLES_DIR)
        return
    if zero_gpu():  # nothing can load later there, so the menu offers what loads now (explorer.choosing)
        models.pin([ModelChoice(p.model, p.head) for p in PAIRS if p.gpu_only])
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    page.demo.launch(server_name=args.host, server_port=args.port, css=CSS, allowed_paths=[str(EXAMPLES_DIR)],
                     max_file_size=LIMITS.file_bytes, theme=gr.themes.Soft(**THEME))


if __name__ == "__main__":
    main()
