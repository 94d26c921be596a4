"""One race through the app's ZeroGPU code path, without the page: the models load at start-up (`Models.pin`,
as app.py does on a ZeroGPU Space), and the race runs through `explorer.racing.device_race`, which wraps it in
`spaces.GPU`. The `spaces` package here is a stand-in whose `GPU(duration=...)` passes the call through but,
like ZeroGPU's, pickles the arguments on the way in and every yielded event on the way out, and sizes the
reservation first. Prints each method's figures and writes them as JSON (--out).

    python -m scripts.zerogpu_race --device cuda --dtype float16 --max-new-tokens 64 --out race.json  # repo root
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
import types
from pathlib import Path

from ddd.settings import Sampling
from explorer.models import ModelConfig, Models
from explorer.presets import CPU_PRESET, GPU_PRESET, PRESETS, race_entries
from explorer.racing import GPU_MAX_S, GPU_MIN_S, RaceRequest, collect, device_race

PROMPT = "Explain in a few sentences why the sky is blue."


class StandInSpaces(types.ModuleType):
    """`spaces` as ZeroGPU runs a decorated generator: arguments and yielded values cross by pickling, and the
    duration (a number, or a function of the arguments) is asked for before the call."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.reserved: list[float] = []
        self.sent_bytes = 0
        self.events = 0

    def GPU(self, fn=None, duration=60):  # noqa: N802 - the real decorator's name; also usable bare
        def decorate(inner):
            def call(*args):
                args = pickle.loads(pickle.dumps(args))
                self.reserved.append(duration(*args) if callable(duration) else duration)
                return self._stream(inner(*args))

            return call

        return decorate(fn) if callable(fn) else decorate

    def _stream(self, values):
        try:
            for value in values:
                data = pickle.dumps(value)
                self.sent_bytes += len(data)
                self.events += 1
                yield pickle.loads(data)
        finally:
            values.close()


def _rounded(value):
    return round(value, 3) if isinstance(value, float) else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default=None, help="default: float16 on a GPU, float32 on a CPU")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--out", default=None, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    gpu = args.device.startswith("cuda")
    dtype = args.dtype or ("float16" if gpu else "float32")

    spaces = StandInSpaces()
    sys.modules["spaces"] = spaces  # before the race function is made: device_race looks for it then
    began = time.perf_counter()
    models = Models(ModelConfig(device=args.device, dtype=dtype))
    models.pin()  # a ZeroGPU Space loads its models once, at start-up
    loaded_s = time.perf_counter() - began
    race = device_race(models)
    request = RaceRequest(args.prompt, race_entries(PRESETS[GPU_PRESET if gpu else CPU_PRESET]), args.max_new_tokens,
                          Sampling(), models.pinned)
    began = time.perf_counter()
    live = collect(race(request))
    race_s = time.perf_counter() - began
    traces = live.finished()

    figures = ("new_tokens", "tokens_per_s", "tau", "target_forwards", "mean_draft_depth")
    rows = {name: {k: _rounded(trace.summary.get(k)) for k in figures} for name, trace in traces.items()}
    texts = {trace.text for trace in traces.values()}
    described = models.describe().splitlines()[0].replace("*", "")
    result = {"device": args.device, "dtype": models.pinned, "models": described,
              "load_s": round(loaded_s, 2), "race_s": round(race_s, 2),
              "reserved_s": spaces.reserved, "events": spaces.events, "event_bytes": spaces.sent_bytes,
              "same_text": len(texts) == 1, "methods": rows}
    print(f"race on {args.device} in {models.pinned} ({result['models']}), loaded in "
          f"{loaded_s:.1f} s, raced in {race_s:.1f} s; {spaces.events} events ({spaces.sent_bytes:,} bytes) pickled "
          f"across; reserved {spaces.reserved} s")
    print("| method | " + " | ".join(figures) + " |")
    print("|---" * (len(figures) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(str(row[k]) for k in figures) + " |")
    print("the three texts agree" if result["same_text"] else
          "the texts differ (greedy in 16 bits on a GPU can part at near-ties: docs/usage.md, 'Precision modes')")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    problems = []
    if list(traces) != ["plain", "eagle2", "ddd"]:
        problems.append(f"the race gave runs {list(traces)}, not plain, eagle2 and ddd")
    if len(spaces.reserved) != 1 or not GPU_MIN_S <= spaces.reserved[0] <= GPU_MAX_S:
        problems.append(f"the reservation {spaces.reserved} is not one call within [{GPU_MIN_S}, {GPU_MAX_S}] s")
    if gpu and not all(str(t.device).startswith("cuda") for t in traces.values()):
        problems.append("a run did not decode on the GPU")
    if not gpu and not result["same_text"]:
        problems.append("greedy runs disagree on the CPU, where they are exact")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
