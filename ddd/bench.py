"""Speed benchmark: our decoders (plain, eagle, eagle2, ddd) and two transformers peers on MT-bench-style questions.

    python -m ddd.bench --questions data.jsonl [--methods plain,eagle2,ddd,hf_generate] [--limit 20]
        [--max-new-tokens 128] [--repeats 3] [--out DIR] [--temperature 0] [--model M] [--head DIR|random]
        [--sweep eagle2.total_tokens=8,16,32,60] [eagle2.total_tokens=16 ddd.threshold=-0.5 ...]

Every question's first turn goes through the chat template. Runs are interleaved: questions in the outer
loop, methods inside in a rotating order, so that drift of a shared machine hits every method alike. With
--repeats, the repeat with the median wall time represents a question. Peers: `hf_generate` is
transformers' `generate` (greedy or sampling, KV cache) and `prompt_lookup` the same with prompt-lookup
drafting; both run on the same model and the same prompt token ids. tokens/s always means new tokens over
the wall time of the whole answer, prefill included.

Writes results.json (settings, machine, per-question rows, summaries), results.md (tables) and
report.html (interactive plotly figures, plotly.js embedded so it opens offline).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import re
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import metrics
from .questions import QuestionError, load_questions, select_questions
from .report import identity_line, tables, write_outputs
from .settings import PRECISIONS

OUR_METHODS = ("plain", "eagle", "eagle2", "ddd")
PEER_METHODS = ("hf_generate", "prompt_lookup")
ALL_METHODS = OUR_METHODS + PEER_METHODS
HEAD_METHODS = ("eagle", "eagle2", "ddd")
REFERENCE = "plain"
# Settings of the transformers peers (ours live in ddd.settings).
PEER_SETTINGS: dict[str, dict[str, int]] = {
    "hf_generate": {},
    "prompt_lookup": {"num_tokens": 10, "max_ngram": 2},
}
WARMUP_TOKENS = 8
SCHEMA = 1


class BenchError(ValueError):
    """A bad argument or input file; the message says what to fix."""


# -- arguments ---------------------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"must be between 0 (greedy) and 10, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ddd.bench", description=__doc__.split("\n\n")[0],
        epilog="Setting overrides: METHOD.SETTING=VALUE, e.g. eagle2.total_tokens=16 ddd.threshold=-0.5 "
               "ddd.check_steps=all prompt_lookup.num_tokens=5. A sweep's values are comma-separated, or "
               "';'-separated when a value holds commas (ddd.check_steps='5,7,9;all').")
    parser.add_argument("--questions", required=True, metavar="FILE.jsonl",
                        help="MT-bench format: one JSON object a line with question_id, category, turns")
    parser.add_argument("--methods", default=None,
                        help=f"comma-separated, from {','.join(ALL_METHODS)} (default: all; with --sweep: none "
                             "besides the sweep). plain is always run: it is the speedup reference")
    parser.add_argument("--limit", type=_positive_int, default=None,
                        help="use N questions, picked round-robin over categories so all are covered")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=128)
    parser.add_argument("--repeats", type=_positive_int, default=1, help="runs per question and method (median kept)")
    parser.add_argument("--out", default=None, help="output folder (default: runs/bench-<date-time>)")
    parser.add_argument("--temperature", type=_temperature, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    parser.add_argument("--model", default=None, help="target: the default SmolLM2-135M-Instruct, a local dir or hub id")
    parser.add_argument("--head", default=None,
                        help="draft head folder, or 'random' for an untrained head (default: the shipped head, for the default model)")
    parser.add_argument("--dtype", default="float32", choices=PRECISIONS,
                        help="precision of target and head (int8: CPU only)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: torch's)")
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
            from .settings import method_settings, settings_dict

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
    head, such as top_k against its vocabulary, are checked again once it is loaded)."""
    from .settings import SettingsError, method_settings

    if method in OUR_METHODS:
        try:
            method_settings(method, **overrides).validate(1 << 40)
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




# -- running -----------------------------------------------------------------------------------------

def _sync(target) -> float:
    import torch

    if target.device.type == "cuda":
        torch.cuda.synchronize(target.device)
    return time.perf_counter()


def run_ours(target, head, spec: RunSpec, prompt: str, max_new_tokens: int, sampling) -> dict[str, Any]:
    from .engine import generate

    run = generate(target, head if spec.method != "plain" else None, prompt, spec.method,
                   max_new_tokens=max_new_tokens, sampling=sampling, record=False, **spec.overrides)
    for _ in run:
        pass
    return {"counts": metrics.counts_from_steps(run.trace.steps), "token_ids": list(run.token_ids),
            "text": run.text, "stop_reason": run.trace.stop_reason}


def run_peer(target, spec: RunSpec, prompt_ids: list[int], max_new_tokens: int, sampling) -> dict[str, Any]:
    """transformers' own generate on the same model and token ids; forward hooks count the target forwards
    and time the first (the prefill)."""
    import torch

    model = target.model
    eos = sorted(target.eos_ids())
    pad = target.tokenizer.pad_token_id
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "use_cache": True, "eos_token_id": eos,
                              "pad_token_id": pad if pad is not None else (eos[0] if eos else 0)}
    if sampling.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    if spec.method == "prompt_lookup":
        settings = peer_settings(spec.method, spec.overrides)
        kwargs.update(prompt_lookup_num_tokens=settings["num_tokens"], max_matching_ngram_size=settings["max_ngram"])
    calls: list[float] = []

    def before(module, args):
        calls.append(_sync(target))

    def after(module, args, output):
        if len(calls) == 1:
            calls.append(_sync(target))

    hooks = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        ids = torch.tensor([prompt_ids], device=target.device)
        torch.manual_seed(sampling.seed)
        start = _sync(target)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        end = _sync(target)
    finally:
        for hook in hooks:
            hook.remove()
    new = out[0, len(prompt_ids):].tolist()
    forwards = len(calls) - 1 if len(calls) >= 2 else None  # the list holds one extra stamp: the prefill's end
    prefill_ms = (calls[1] - calls[0]) * 1e3 if len(calls) >= 2 else None
    stop = "end of turn" if new and new[-1] in eos else "max_new_tokens"
    return {"counts": metrics.counts_from_wall(len(new), (end - start) * 1e3, forwards, prefill_ms),
            "token_ids": new, "text": target.tokenizer.decode(new, skip_special_tokens=True), "stop_reason": stop}


def run_one(target, head, spec: RunSpec, question: dict[str, Any], max_new_tokens: int, sampling) -> dict[str, Any]:
    if spec.ours:
        return run_ours(target, head, spec, question["prompt"], max_new_tokens, sampling)
    return run_peer(target, spec, question["prompt_ids"], max_new_tokens, sampling)


def machine_info(target) -> dict[str, Any]:
    import torch
    import transformers

    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(target.device),
        "gpu": torch.cuda.get_device_name(target.device) if target.device.type == "cuda" else None,
        "precision": target.precision,
    }
    try:
        info["load_average_at_start"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    return info


def load_models(args, specs: list[RunSpec]):
    from .head import HeadLoadError, resolve_head
    from .models import ModelLoadError, load_target
    from .settings import SettingsError, method_settings

    try:
        target = load_target(args.model, dtype=args.dtype, device=args.device)
    except ModelLoadError as err:
        raise BenchError(str(err)) from None
    head = None
    if any(s.method in HEAD_METHODS for s in specs):
        try:
            head, note = resolve_head(args.head, target)
        except (HeadLoadError, OSError, ValueError) as err:
            raise BenchError(str(err) if isinstance(err, HeadLoadError) else
                             f"Cannot load the draft head {args.head}: {err}") from None
        if note:
            print(f"note: {note}", file=sys.stderr)
    for spec in specs:
        if spec.ours:
            try:
                method_settings(spec.method, **spec.overrides).validate(
                    head.draft_vocab_size if head is not None else target.vocab_size)
            except SettingsError as err:
                raise BenchError(f"{spec.label}: {err}") from None
    return target, head


def rotated(specs: list[RunSpec], k: int) -> list[RunSpec]:
    k %= len(specs)
    return specs[k:] + specs[:k]


def benchmark(args, specs: list[RunSpec], questions: list[dict[str, Any]]) -> dict[str, Any]:
    """Load, warm up, run everything (interleaved), and return the whole report as plain data."""
    import torch
    from tqdm import tqdm
    from transformers.utils import logging as hf_logging

    from .engine import PromptError, encode_prompt
    from .settings import Sampling

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    target, head = load_models(args, specs)
    sampling = Sampling(temperature=args.temperature, seed=args.seed)

    runnable, skipped = [], []
    for q in questions:
        try:
            runnable.append({**q, "prompt_ids": encode_prompt(target, q["prompt"])})
        except PromptError as err:
            skipped.append({"question_id": q["question_id"], "category": q["category"], "reason": str(err)})
    if not runnable:
        raise BenchError("No question fits the model: " + "; ".join(s["reason"] for s in skipped[:3]))

    started = _dt.datetime.now().astimezone()
    machine = machine_info(target)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    interrupted = False
    total = len(specs) * (1 + len(runnable) * args.repeats)
    with tqdm(total=total, desc="bench", unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
        for spec in specs:  # warm-up: first calls pay for lazy initialisation and allocator growth
            bar.set_postfix_str(f"warm-up {spec.label}", refresh=False)
            run_one(target, head, spec, runnable[0], min(WARMUP_TOKENS, args.max_new_tokens), sampling)
            bar.update()
        k = 0
        try:
            for q in runnable:
                for _ in range(args.repeats):
                    for spec in rotated(specs, k):
                        bar.set_postfix_str(f"{q['question_id']} {spec.label}", refresh=False)
                        result = run_one(target, head, spec, q, args.max_new_tokens, sampling)
                        runs.setdefault((q["question_id"], spec.label), []).append(result)
                        bar.update()
                    k += 1
        except KeyboardInterrupt:
            interrupted = True
            print("\nInterrupted: reporting the questions that finished.", file=sys.stderr)
    done = [q for q in runnable
            if all(len(runs.get((q["question_id"], s.label), [])) == args.repeats for s in specs)]
    report = build_report(args, specs, done, runs, sampling)
    report["machine"] = machine
    report["settings"].update(model=target.name, head=getattr(head, "name", None) if head is not None else None,
                              started=started.isoformat(timespec="seconds"),
                              finished=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
    report["skipped"] = skipped
    report["interrupted"] = interrupted
    return report



def build_report(args, specs: list[RunSpec], questions: list[dict[str, Any]],
                 runs: dict[tuple[str, str], list[dict[str, Any]]], sampling) -> dict[str, Any]:
    rows = []
    outputs: dict[tuple[str, str], list[int]] = {}
    for q in questions:
        for spec in specs:
            repeats = runs[(q["question_id"], spec.label)]
            chosen = metrics.median_run([r["counts"] for r in repeats])
            pick = next(r for r in repeats if r["counts"] is chosen)
            outputs[(q["question_id"], spec.label)] = pick["token_ids"]
            rows.append({
                "question_id": q["question_id"], "category": q["category"], "method": spec.label,
                "base_method": spec.method, "prompt_tokens": len(q["prompt_ids"]),
                **metrics.derived(pick["counts"]),
                "target_forwards": pick["counts"]["target_forwards"], "new_tokens": pick["counts"]["new_tokens"],
                "prefill_ms": pick["counts"]["prefill_ms"], "total_ms": pick["counts"]["total_ms"],
                "repeats_tokens_per_s": [metrics.tokens_per_s(r["counts"]) for r in repeats],
                "stop_reason": pick["stop_reason"], "counts": pick["counts"], "text": pick["text"],
            })
    reference = {r["question_id"]: r["tokens_per_s"] for r in rows if r["method"] == REFERENCE}
    for row in rows:
        ref = reference.get(row["question_id"])
        row["speedup"] = row["tokens_per_s"] / ref if ref and row["tokens_per_s"] is not None else None
    labels = [s.label for s in specs]
    categories = list(OrderedDict.fromkeys(q["category"] for q in questions))
    overall = {label: metrics.summarize_group([r for r in rows if r["method"] == label], reference)
               for label in labels}
    by_category = {cat: {label: metrics.summarize_group(
        [r for r in rows if r["method"] == label and r["category"] == cat], reference) for label in labels}
        for cat in categories}
    return {
        "schema": SCHEMA,
        "command": None,
        "settings": {
            "questions_file": str(args.questions), "limit": args.limit, "questions": len(questions),
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                         "seed": sampling.seed},
            "dtype": args.dtype, "device": args.device, "reference": REFERENCE,
            "runs": [{"label": s.label, "method": s.method, "settings": s.settings(), "swept": s.swept} for s in specs],
            "sweep": args.sweep,
        },
        "categories": categories,
        "methods": labels,
        "overall": overall,
        "by_category": by_category,
        "identity": identity_check(specs, questions, outputs, sampling.greedy),
        "sweep": sweep_table(args.sweep, specs, overall),
        "rows": rows,
    }


def identity_check(specs: list[RunSpec], questions: list[dict[str, Any]], outputs: dict[tuple[str, str], list[int]],
                   greedy: bool) -> dict[str, Any]:
    """Greedy decoding is deterministic: every method must reproduce plain's tokens exactly."""
    if not greedy:
        return {"checked": False, "reason": "sampling (temperature > 0): outputs are random, not compared",
                "compared": [], "mismatches": []}
    compared = [s.label for s in specs if s.label != REFERENCE]
    mismatches = []
    for q in questions:
        ref = outputs[(q["question_id"], REFERENCE)]
        for label in compared:
            got = outputs[(q["question_id"], label)]
            at = metrics.first_difference(ref, got)
            if at is not None:
                mismatches.append({"question_id": q["question_id"], "category": q["category"], "method": label,
                                   "first_difference": at, "reference_tokens": len(ref), "tokens": len(got)})
    return {"checked": True, "reference": REFERENCE, "compared": compared, "mismatches": mismatches}


def sweep_table(sweep: str | None, specs: list[RunSpec], overall: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    if not sweep:
        return None
    method, name = parse_sweep_target(sweep)
    points = []
    for spec in specs:
        if spec.swept is None:
            continue
        s = overall[spec.label]
        points.append({"value": spec.swept, "label": spec.label, **{k: s.get(k) for k in (
            "tokens_per_s", "speedup", "tau", "acceptance_rate", "mean_draft_depth", "target_forwards",
            "draft_share", "verify_share", "other_share")}})
    return {"method": method, "setting": name, "reference_tokens_per_s": overall[REFERENCE]["tokens_per_s"],
            "points": points}


# -- writing -----------------------------------------------------------------------------------------



# -- entry point -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict[str, Path]:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        specs = build_specs(args.methods, args.overrides, args.sweep)
        questions = select_questions(load_questions(args.questions), args.limit)
    except (BenchError, QuestionError) as err:
        parser.error(str(err))
    out = Path(args.out) if args.out else Path("runs") / f"bench-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    try:
        report = benchmark(args, specs, questions)
    except BenchError as err:
        raise SystemExit(f"{parser.prog}: error: {err}") from None
    if not report["rows"]:
        raise SystemExit(f"{parser.prog}: error: no question finished; nothing to report.")
    report["command"] = " ".join(["python -m ddd.bench", *(sys.argv[1:] if argv is None else argv)])
    paths = write_outputs(report, out)
    title, header, body = tables(report)[0]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in body:
        print("| " + " | ".join(row) + " |")
    print(identity_line(report))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return paths


if __name__ == "__main__":
    main()
