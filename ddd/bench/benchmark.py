"""Speed benchmark: our decoders (plain, eagle, eagle2, ddd, cost) and two transformers peers on MT-bench-style questions.

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

import datetime as _dt
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import transformers
from tqdm import tqdm
from transformers.utils import logging as hf_logging

from ddd import metrics
from ddd.catalog import resolve_head
from ddd.devices import clock_after
from ddd.engine import PromptError, encode_prompt, generate
from ddd.head import HeadLoadError
from ddd.models import ModelLoadError, load_target
from ddd.settings import Sampling, SettingsError, method_settings
from .args import HEAD_METHODS, BenchError, RunSpec, build_parser, build_specs, peer_settings
from .summary import build_report
from .questions import QuestionError, load_questions, select_questions
from .report import identity_line, tables, write_outputs

WARMUP_TOKENS = 8


# -- running -----------------------------------------------------------------------------------------

def _sync(target) -> float:
    return clock_after(target.device)


def run_ours(target, head, spec: RunSpec, prompt: str, max_new_tokens: int, sampling,
             count_ops: bool = False) -> dict[str, Any]:
    run = generate(target, head if spec.method != "plain" else None, prompt, spec.method,
                   max_new_tokens=max_new_tokens, sampling=sampling, record=False, count_ops=count_ops,
                   **spec.overrides)
    for _ in run:
        pass
    priced = [s.costs for s in run.trace.steps if s.costs is not None]  # the cost rule's, as it ended
    return {"counts": metrics.counts_from_steps(run.trace.steps), "token_ids": list(run.token_ids),
            "text": run.text, "stop_reason": run.trace.stop_reason,
            **({"costs": asdict(priced[-1])} if priced else {})}


def run_peer(target, spec: RunSpec, prompt_ids: list[int], max_new_tokens: int, sampling) -> dict[str, Any]:
    """transformers' own generate on the same model and token ids; forward hooks count the target forwards
    and time the first (the prefill)."""
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


def run_one(target, head, spec: RunSpec, question: dict[str, Any], max_new_tokens: int, sampling,
            count_ops: bool = False) -> dict[str, Any]:
    if spec.ours:
        return run_ours(target, head, spec, question["prompt"], max_new_tokens, sampling, count_ops)
    return run_peer(target, spec, question["prompt_ids"], max_new_tokens, sampling)


def machine_info(target) -> dict[str, Any]:
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
                        result = run_one(target, head, spec, q, args.max_new_tokens, sampling, args.count_ops)
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


# -- entry point -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict[str, Path]:
    parser = build_parser(__doc__.split("\n\n")[0])
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


def console() -> None:
    """The `ddd-bench` command (and `python -m ddd.bench`): main(), whose return value, the files written, is
    no exit status."""
    main()
