"""Command line: `python -m ddd generate --method ddd "prompt"` streams the answer, then the summary;
`python -m ddd export-generate DIR` writes a custom_generate folder for transformers' generate().
(`python -m ddd.bench.budget` measures this machine and prints the fastest EAGLE-2 and DDD settings.)"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from .engine import PromptError, generate
from .catalog import resolve_head
from .export_generate import ExportError, export_generate
from .head import HeadLoadError
from .models import DTYPES, ModelLoadError, load_target
from .settings import MAX_NEW_TOKENS, METHODS, SAMPLING_SETTINGS, Sampling, SettingsError, add_argument, settings_help
from .trace import TraceFileError

SUMMARY_KEYS = ("new_tokens", "tokens_per_s", "prefill_ms", "target_forwards", "tau", "acceptance_rate",
                "mean_draft_depth", "draft_ms", "verify_ms", "other_ms")


def parse_setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"settings look like name=value (e.g. threshold=-0.5), not {text!r}")
    return name.strip().split(".")[-1], value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt and print the summary metrics",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="method settings (--set NAME=VALUE):\n" + settings_help(qualified=False))
    gen.add_argument("prompt")
    gen.add_argument("--method", choices=METHODS, default="ddd")
    model_arguments(gen)
    gen.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    for setting in (MAX_NEW_TOKENS, *SAMPLING_SETTINGS):
        add_argument(gen, setting)
    gen.add_argument("--no-chat", action="store_true", help="feed the prompt as raw text, without the chat template")
    gen.add_argument("--set", dest="settings", type=parse_setting, action="append", default=[], metavar="NAME=VALUE",
                     help="a setting of the method, e.g. --set threshold=-0.5 --set check_steps=all (repeatable; "
                          "listed below)")
    gen.add_argument("--save", default=None, help="write the run's trace to this JSON file")
    export = sub.add_parser("export-generate", help="write DIR (new or empty) as a folder transformers' generate() "
                            "runs with custom_generate=DIR, trust_remote_code=True")
    export.add_argument("directory", metavar="DIR")

    return parser


def model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="local directory or hub id (default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--head", default=None, help="draft head directory, or 'random' (default: the shipped head)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--device", default="cpu")


def _stream(run) -> None:
    """Print the answer as it comes. The first Ctrl-C ends the run after the current step (its text and
    summary still print); a second one interrupts at once."""
    def stop(signum, frame) -> None:
        run.stop()
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        for step in run:
            print(step.text, end="", flush=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    print()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "export-generate":
        try:
            folder = export_generate(args.directory)
            print(f"wrote {folder}: model.generate(..., custom_generate={str(folder)!r}, trust_remote_code=True, "
                  "head=..., method='ddd') runs it (its README.md says more)")
        except (ExportError, OSError) as err:
            parser.exit(2, f"error: {err}\n")
        return 0
    try:
        target = load_target(args.model, dtype=args.dtype, device=args.device, attn=args.attn)
        head = None
        if args.method != "plain":
            head, note = resolve_head(args.head, target)
            if note:
                print(f"note: {note}", file=sys.stderr)
        sampling = Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
        run = generate(target, head, args.prompt, args.method, max_new_tokens=args.max_new_tokens,
                       sampling=sampling, chat=not args.no_chat, **dict(args.settings))
        _stream(run)
        summary = run.trace.summary
        print(f"\n[{args.method}] stop: {run.trace.stop_reason}")
        for key in SUMMARY_KEYS:
            value = summary[key]
            print(f"  {key:18s} {value:.3f}" if isinstance(value, float) else f"  {key:18s} {value}")
        if args.save:
            print(f"trace saved to {run.trace.save(args.save)}")
    except (ModelLoadError, HeadLoadError, SettingsError, PromptError, TraceFileError) as err:
        parser.exit(2, f"error: {err}\n")
    return 0

