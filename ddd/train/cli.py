"""The draft-head recipe, one resumable command per stage (docs/training.md):

    python -m ddd.train distill --out runs/head-distill                      # EAGLE-3 head, teacher-forced text
    python -m ddd.train data --out runs/answers                              # the target's own answers
    python -m ddd.train reading --out runs/reading.jsonl                     # summarising / passage prompts
    python -m ddd.train distill --out runs/head-2 --init runs/head-distill --corpus --prompts '' --answers runs/answers
    python -m ddd.train fit --data runs/answers --out runs/head-eagle2       # EAGLE-1/2 head, stored answers
    python -m ddd.train calibrate --head runs/head-2                         # acceptance by draft probability

`distill` (ddd/train/distill.py) trains an EAGLE-3 head on texts the target reads in one forward each (stage
one: the corpus; stage two: the target's own answers); `data` (ddd/train/answers.py) decodes the target's own
answers and stores its features, to the training prompts or to `reading`'s (ddd/train/reading.py); `fit`
(ddd/train/fit.py) trains an EAGLE-1/2 head on them; `calibrate` (ddd/train/calibrate.py) measures how often
the target accepts drafts, for the cost rule.
"""
from __future__ import annotations

import argparse
import sys

from . import answers, calibrate, distill, fit, reading
from .common import TrainError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TrainError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddd.train", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    distill.add_parser(sub)
    answers.add_parser(sub)
    fit.add_parser(sub)
    reading.add_parser(sub)
    calibrate.add_parser(sub)
    return parser
