"""What the page and the docs say of a ZeroGPU Space's GPU time is what explorer/gputime.py computes: the default
race's projected time, ask and count, the band of a projected pace, and the quota each "fits" sentence fits."""
from __future__ import annotations

import re
from pathlib import Path

from ddd.bench.projection import BAND
from explorer.deploy import space_race
from explorer.gputime import (ACCOUNT_DAY, ACCOUNT_QUOTA_S, VISITOR_DAY, VISITOR_QUOTA_S, GpuAnswer, GpuTime, Pace,
                              counted, refusal_words, too_long_words)

DOCS = Path(__file__).resolve().parents[1] / "docs"
KEY = ("model", "head", "float16")
METHODS = ("plain", "eagle2", "ddd")
# A 7B target's pace on a shared GPU: seconds a token per method, a prefill, a call's start.
PACE = Pace({"plain": 0.04, "eagle2": 0.02, "ddd": 0.02}, {m: 0.1 for m in METHODS}, 2.0, False)


def fits(text: str, quota: str) -> int:
    found = re.search(rf"a race of at most (\d+) new tokens fits {re.escape(quota)}", text)
    assert found, text
    return int(found[1])


def test_the_docs_state_the_default_races_gpu_time_as_the_code_computes_it():
    figures = space_race().figures()
    for doc in ("results.md", "app.md"):  # the docs wrap their lines anywhere
        assert figures in " ".join((DOCS / doc).read_text().split()), doc


def test_a_race_longer_than_a_whole_day_names_what_fits_each_quota():
    gpu = GpuTime({KEY: PACE})
    text = too_long_words(400, ACCOUNT_QUOTA_S, gpu, KEY, METHODS, known=False)
    for quota, seconds in ((VISITOR_DAY, VISITOR_QUOTA_S), (ACCOUNT_DAY, ACCOUNT_QUOTA_S)):
        tokens = fits(text, quota)
        assert counted(gpu.ask(KEY, METHODS, tokens)) <= seconds < counted(gpu.ask(KEY, METHODS, tokens + 1))
    assert fits(text, VISITOR_DAY) < fits(text, ACCOUNT_DAY)


def test_a_refusal_names_the_seconds_left_it_fits_and_a_projected_pace_its_band():
    answer = GpuAnswer.read(RuntimeError("You have exceeded your GPU quota (60s requested vs. 40s left). "
                                         "Try again in 13:44:10."))
    text = refusal_words(answer, GpuTime({KEY: PACE}), KEY, METHODS)
    assert fits(text, "the 40 s left") > 0 and f"±{BAND:.0%}" in text


def test_a_pace_this_space_measured_carries_no_band():
    gpu = GpuTime({KEY: Pace(PACE.per_token, PACE.prefill, PACE.start_s, True)})
    assert "±" not in too_long_words(400, 100, gpu, KEY, METHODS, known=True)
