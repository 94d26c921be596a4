"""What a benchmark runs: its command line, and the run specs (a decoder with its settings) built from it.

Every setting is checked here, before any model is loaded, so that a typo costs no loading time.
"""
from __future__ import annotations

import argparse
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ddd.settings import (MAX_NEW_TOKENS, PRECISIONS, SEED, TEMPERATURE, SettingsError, add_argument,
                          method_settings, settings_dict, settings_help)

OUR_METHODS = ("plain", "eagle", "eagle2", "ddd", "cost")
PEER_METHODS = ("hf_generate", "prompt_lookup")
ALL_METHODS = OUR_METHODS + PEER_METHODS
HEAD_METHODS = ("eagle", "eagle2", "ddd", "cost")
REFERENCE = "plain"
# Settings of the transformers peers (ours live in ddd.settings).
PEER_SETTINGS: dict[str, dict[str, int]] = {
    "hf_generate": {},
    "prompt_lookup": {"num_tokens": 10, "max_ngram": 2},
}


class BenchError(ValueError):
    """A bad argument or input file; the message says what to fix."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ddd.bench", description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Setting overrides: METHOD.SETTING=VALUE, e.g. eagle2.total_tokens=16 ddd.threshold=-0.5\n"
               "ddd.check_steps=all prompt_lookup.num_tokens=5. A sweep's values are comma-separated, or\n"
               "';'-separated when a value holds commas (ddd.check_steps='5,7,9;all'). The settings:\n"
               + settings_help(qualified=True) + "\n  " + "\n  ".join(
                   f"{method}.{name}: a whole number from 1 (default {value})"
                   for method, values in PEER_SETTINGS.items() for name, value in values.items()))
    parser.add_argument("--questions", required=True, metavar="FILE.jsonl",
                        help="MT-bench format: one JSON object a line with question_id, category, turns")
    parser.add_argument("--methods", default=None,
                        help=f"comma-separated, from {','.join(ALL_METHODS)} (default: all; with --sweep: none "
                             "besides the sweep). plain is always run: it is the speedup reference")
    parser.add_argument("--limit", type=_positive_int, default=None,
                        help="use N questions, picked round-robin over categories so all are covered")
    add_argument(parser, MAX_NEW_TOKENS)
    parser.add_argument("--repeats", type=_positive_int, default=1, help="runs per question and method (median kept)")
    parser.add_argument("--out", default=None, help="output folder (default: runs/bench-<date-time>)")
    add_argument(parser, TEMPERATURE)
    add_argument(parser, SEED)
    parser.add_argument("--model", default=None, help="target: the default SmolLM2-135M-Instruct, a local dir or hub id")
    parser.add_argument("--head", default=None,
                        help="draft head folder, or 'random' for an untrained head (default: the shipped head, for the default model)")
    parser.add_argument("--dtype", default="float32", choices=PRECISIONS,
                        help="precision of target and head (int8: CPU only)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--count-ops", action="store_true",
                        help="count the operations each step dispatches (ddd/ops.py) and add their table; counting "
                             "slows every step, so such a run's speeds are not the method's")
    parser.add_argument("--sweep", default=None, metavar="METHOD.SETTING=V1,V2,...",
                        help="run METHOD once per value (plus plain) and tabulate speed and tau against it")
    parser.add_argument("overrides", nargs="*", metavar="METHOD.SETTING=VALUE", help="method setting overrides")
    return parser


@dataclass
class RunSpec:
    """One column of the benchmark: a decoder with its settings."""

    label: str
    method: str
    overrides: dict[str, str] = field(default_factory=dict)
    swept: str | None = None  # the sweep value this run stands for

    @property
    def ours(self) -> bool:
        return self.method in OUR_METHODS

    def settings(self) -> dict[str, Any]:
        if self.ours:
            return settings_dict(method_settings(self.method, **self.overrides))
        return peer_settings(self.method, self.overrides)


def peer_settings(method: str, overrides: dict[str, str]) -> dict[str, int]:
    allowed = PEER_SETTINGS[method]
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise BenchError(f"Unknown setting(s) {', '.join(unknown)} for {method}; allowed: "
                         f"{', '.join(sorted(allowed)) or 'none'}.")
    out = dict(allowed)
    for name, text in overrides.items():
        try:
            value = int(text)
        except ValueError:
            raise BenchError(f"Setting {method}.{name}={text!r} is not a whole number.") from None
        if value < 1:
            raise BenchError(f"Setting {method}.{name} must be at least 1, not {value}.")
        out[name] = value
    return out


_ASSIGNMENT = re.compile(r"^([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)=(.*)$")


def parse_assignment(text: str, what: str = "setting") -> tuple[str, str, str]:
    match = _ASSIGNMENT.match(text.strip())
    if not match:
        raise BenchError(f"Cannot read {what} {text!r}: write METHOD.SETTING=VALUE, e.g. ddd.threshold=-0.5.")
    method, name, value = match.groups()
    if method not in ALL_METHODS:
        raise BenchError(f"Unknown method {method!r} in {what} {text!r}; choose one of {', '.join(ALL_METHODS)}.")
    if not value.strip():
        raise BenchError(f"The {what} {text!r} has no value.")
    return method, name, value.strip()


def check_settings(method: str, overrides: dict[str, str]) -> None:
    """Refuse unknown names and unreadable values before any model is loaded (ranges that depend on the
    head, such as beam_width against its vocabulary, are checked again once it is loaded)."""
    if method in OUR_METHODS:
        try:
            method_settings(method, **overrides).validate()
        except SettingsError as err:
            raise BenchError(str(err)) from None
    else:
        peer_settings(method, overrides)


def parse_methods(text: str | None) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()] if text else []
    unknown = [m for m in names if m not in ALL_METHODS]
    if unknown:
        raise BenchError(f"Unknown method(s) {', '.join(unknown)}; choose from {', '.join(ALL_METHODS)}.")
    return list(OrderedDict.fromkeys(names))


def build_specs(methods_text: str | None, overrides: list[str], sweep: str | None) -> list[RunSpec]:
    """The runs to make: plain first, then the chosen methods (with overrides), then the sweep's variants."""
    per_method: dict[str, dict[str, str]] = {m: {} for m in ALL_METHODS}
    for text in overrides:
        method, name, value = parse_assignment(text)
        per_method[method][name] = value
    for method, values in per_method.items():
        check_settings(method, values)
    methods = parse_methods(methods_text)
    if methods_text is not None and not methods:
        raise BenchError("--methods is empty; name at least one method.")
    if not methods:
        methods = [] if sweep else list(ALL_METHODS)
    specs = [RunSpec(m, m, dict(per_method[m])) for m in OrderedDict.fromkeys([REFERENCE, *methods])]
    if sweep:
        method, name, values_text = parse_assignment(sweep, "sweep")
        if method == REFERENCE or not (PEER_SETTINGS.get(method) or method in OUR_METHODS):
            raise BenchError(f"{method} has no settings to sweep.")
        values = [v.strip() for v in values_text.split(";" if ";" in values_text else ",") if v.strip()]
        if not values:
            raise BenchError(f"The sweep {sweep!r} lists no values.")
        for value in OrderedDict.fromkeys(values):
            overrides_here = {**per_method[method], name: value}
            check_settings(method, overrides_here)
            specs.append(RunSpec(f"{method} {name}={value}", method, overrides_here, swept=value))
    return specs


def parse_sweep_target(sweep: str) -> tuple[str, str]:
    method, name, _ = parse_assignment(sweep, "sweep")
    return method, name
