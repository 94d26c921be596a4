"""The speed benchmark: metric arithmetic on hand-built traces, argument errors, and end-to-end runs on a tiny model."""
import json

import pytest

from ddd.bench import benchmark as bench, args as bench_args, questions
from ddd import metrics
from ddd.checkpoint import save_head
from ddd.trace import Step

QUESTIONS = [
    {"question_id": "q1", "category": "animals", "turns": ["the cat sat", "and then?"]},
    {"question_id": "q2", "category": "counting", "turns": ["one two three"]},
]


def write_questions(path, items):
    path.write_text("\n".join(json.dumps(q) for q in items) + "\n")
    return path


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, llama_head):
    return save_head(llama_head, tmp_path_factory.mktemp("head"))


@pytest.fixture
def questions_file(tmp_path):
    return write_questions(tmp_path / "questions.jsonl", QUESTIONS)


def hand_built_trace():
    return [
        Step(index=0, token_ids=[5], text="", accepted=0, verify_ms=10.0, other_ms=1.0, prefill=True),
        Step(index=1, token_ids=[6, 7, 8], text="", accepted=2, draft_ms=4.0, verify_ms=8.0, other_ms=2.0,
             draft_calls=3, verified=6, chain_end="tree_end"),
        Step(index=2, token_ids=[9], text="", accepted=0, draft_ms=6.0, verify_ms=8.0, other_ms=0.0,
             draft_calls=5, verified=4, chain_end="not_drafted"),
    ]


# -- metrics ----------------------------------------------------------------------------------------

def test_metrics_of_a_hand_built_trace():
    steps = hand_built_trace()
    counts = metrics.counts_from_steps(steps)
    assert counts["new_tokens"] == 5 and counts["decode_tokens"] == 4 and counts["decode_steps"] == 2
    assert counts["target_forwards"] == 3
    assert counts["drafted"] == 5 + 3 and counts["accepted"] == 2
    assert counts["total_ms"] == pytest.approx(11 + 14 + 14)
    figures = metrics.derived(counts)
    assert figures["tau"] == pytest.approx(4 / 2)
    assert figures["acceptance_rate"] == pytest.approx(2 / 8)
    assert figures["mean_draft_depth"] == pytest.approx((3 + 5) / 2)
    assert figures["tokens_per_s"] == pytest.approx(5 / 0.039)
    # decode time: draft 10, verify 16, other 2 (the prefill is not part of it)
    assert figures["draft_share"] == pytest.approx(10 / 28)
    assert figures["verify_share"] == pytest.approx(16 / 28)
    assert figures["other_share"] == pytest.approx(2 / 28)
    # a run's own summary reads the same figures
    summary = metrics.summarize(steps)
    for key in ("tau", "acceptance_rate", "mean_draft_depth", "tokens_per_s"):
        assert summary[key] == figures[key], key


def test_chain_ends_are_shares_of_the_speculative_steps():
    counts = metrics.counts_from_steps(hand_built_trace())
    assert counts["chain_end_tree_end"] == counts["chain_end_not_drafted"] == 1
    assert counts["chain_end_pruned"] == counts["chain_end_outside_vocab"] == 0
    shares = metrics.chain_end_shares(counts)
    assert shares == {"chain_end_tree_end_share": 0.5, "chain_end_pruned_share": 0.0,
                      "chain_end_outside_vocab_share": 0.0, "chain_end_not_drafted_share": 0.5}
    plain = metrics.counts_from_steps([hand_built_trace()[0]])
    assert set(metrics.chain_end_shares(plain).values()) == {None}  # nothing was drafted: no shares, not zeros
    peer = metrics.counts_from_wall(new_tokens=9, total_ms=300.0, forwards=4)
    assert set(metrics.chain_end_shares(peer).values()) == {None}


def test_plain_decoding_time_is_verification(llama):
    from ddd import generate

    run = generate(llama, None, "one two", "plain", max_new_tokens=6)
    counts = metrics.counts_from_steps(list(run))
    shares = metrics.time_shares(counts)
    assert shares["draft_share"] == 0.0 and shares["verify_share"] > 0.5
    assert metrics.tau(counts) == 1.0


def test_speedup_is_the_median_of_per_question_ratios():
    method = {"q1": 10.0, "q2": 30.0, "q3": 5.0, "q4": 8.0}
    reference = {"q1": 5.0, "q2": 10.0, "q3": 10.0}  # q4 has no reference: left out
    assert metrics.speedups(method, reference) == {"q1": 2.0, "q2": 3.0, "q3": 0.5}
    assert metrics.median_speedup(method, reference) == 2.0  # the ratio of medians would be 10 / 10 = 1
    rows = [{"question_id": q, "tokens_per_s": v, "counts": metrics.counts_from_wall(10, 1000 / v * 10, 10)}
            for q, v in method.items() if q in reference]
    group = metrics.summarize_group(rows, reference)
    assert group["speedup"] == 2.0 and group["tokens_per_s"] == 10.0 and group["tau"] == 1.0
    assert group["draft_share"] is None  # a peer's time split is unknown, not zero


def test_pooling_repeats_and_peers():
    wall = metrics.counts_from_wall(new_tokens=9, total_ms=300.0, forwards=4, prefill_ms=20.0)
    assert metrics.tau(wall) == pytest.approx(8 / 3)
    assert metrics.tokens_per_s(wall) == pytest.approx(30.0)
    unknown = metrics.counts_from_wall(new_tokens=9, total_ms=300.0)
    assert metrics.tau(unknown) is None
    pooled = metrics.pool_counts([wall, metrics.counts_from_steps(hand_built_trace())])
    assert pooled["new_tokens"] == 14 and pooled["draft_ms"] is None
    runs = [{"total_ms": 30.0}, {"total_ms": 10.0}, {"total_ms": 20.0}, {"total_ms": 40.0}]
    assert metrics.median_run(runs)["total_ms"] == 20.0
    assert metrics.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert metrics.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert metrics.first_difference([1, 2], [1, 2, 3]) == 2


def test_limit_covers_every_category_first():
    items = ([{"question_id": f"a{i}", "category": "a", "prompt": "x"} for i in range(5)]
             + [{"question_id": f"b{i}", "category": "b", "prompt": "x"} for i in range(2)]
             + [{"question_id": "c0", "category": "c", "prompt": "x"}])
    picked = questions.select_questions(items, 4)
    assert [q["question_id"] for q in picked] == ["a0", "b0", "c0", "a1"]
    assert len(questions.select_questions(items, None)) == len(items)


# -- argument errors --------------------------------------------------------------------------------

def error_of(capsys, argv):
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code not in (0, None)
    err = capsys.readouterr().err
    return err + (info.value.code if isinstance(info.value.code, str) else "")


@pytest.mark.parametrize("lines, message", [
    (['{"question_id": 1, "category": "a", "turns": ["hi"]}', '{"question_id": 2, "turns": ['], "line 2 is not valid JSON"),
    (['[1, 2]'], "line 1 is a JSON list"),
    (['{"question_id": 1, "category": "a", "turns": []}'], "line 1 needs `turns`"),
    ([''], "holds no questions"),
])
def test_bad_question_files(tmp_path, capsys, lines, message):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert message in error_of(capsys, ["--questions", str(path)])


@pytest.mark.parametrize("extra, message", [
    (["--methods", "plain,medusa"], "Unknown method(s) medusa"),
    (["ddd.thresold=-0.5"], "Unknown setting(s) thresold for ddd"),
    (["ddd.threshold=high"], "threshold must be a number from -1,000 to 0, not 'high'"),
    (["ddd.threshold=0.5"], "not 0.5: H is the log of a probability, never above 0"),
    (["eagle2.top_k=8"], "top_k is now beam_width"),
    (["speculative.beam_width=3"], "Unknown method 'speculative'"),
    (["prompt_lookup.num_tokens=0"], "prompt_lookup.num_tokens must be at least 1"),
    (["beam_width=3"], "write METHOD.SETTING=VALUE"),
    (["--limit", "0"], "--limit: must be at least 1"),
    (["--max-new-tokens", "ten"], "--max-new-tokens: max_new_tokens must be a whole number from 1 to 1,000,000"),
    (["--temperature", "-1"], "--temperature: temperature must be a number from 0 to 10, not -1"),
    (["--sweep", "plain.x=1,2"], "plain has no settings to sweep"),
    (["--sweep", "eagle2.total_tokens=8,1"], "total_tokens must be a whole number from 2 to 4,096, not 1"),
])
def test_bad_arguments(questions_file, capsys, extra, message):
    assert message in error_of(capsys, ["--questions", str(questions_file), *extra])


def test_missing_question_file(tmp_path, capsys):
    assert "not found" in error_of(capsys, ["--questions", str(tmp_path / "nope.jsonl")])


def test_speculative_methods_without_a_head_use_a_random_one_and_say_so(tiny_llama_dir, questions_file, tmp_path,
                                                                        capsys):
    # The shipped head belongs to the default model: another model gets a random head, as in the app and CLI.
    bench.main(["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--methods", "eagle2",
                "--limit", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "out")])
    assert "using a random head" in capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["settings"]["head"] == "random (untrained)"


# -- end to end -------------------------------------------------------------------------------------

def test_bench_end_to_end(tiny_llama_dir, head_dir, questions_file, tmp_path, capsys):
    out = tmp_path / "out"
    paths = bench.main(["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--head", str(head_dir),
                        "--max-new-tokens", "12", "--repeats", "2", "--out", str(out), "eagle2.total_tokens=8",
                        "ddd.check_steps=all"])
    assert {p.name for p in paths.values()} == {"results.json", "results.md", "report.html"}
    report = json.loads((out / "results.json").read_text())
    labels = list(bench_args.ALL_METHODS)
    assert report["methods"] == labels
    assert len(report["rows"]) == 2 * len(labels)
    assert report["categories"] == ["animals", "counting"]
    assert report["machine"]["torch"] and report["machine"]["cpu_count"]
    runs = {r["label"]: r["settings"] for r in report["settings"]["runs"]}
    assert runs["eagle2"]["total_tokens"] == 8 and runs["ddd"]["check_steps"] == "all"
    assert report["identity"]["checked"] and report["identity"]["mismatches"] == []
    overall = report["overall"]
    assert overall["plain"]["speedup"] == pytest.approx(1.0) and overall["plain"]["tau"] == 1.0
    assert overall["hf_generate"]["tau"] == 1.0 and overall["hf_generate"]["draft_share"] is None
    for method in ("eagle", "eagle2", "ddd"):
        assert overall[method]["tau"] > 1  # the fitted head's drafts get accepted
        assert overall[method]["mean_draft_depth"] >= 1
        assert sum(overall[method][f"{p}_share"] for p in ("draft", "verify", "other")) == pytest.approx(1)
    texts = {r["method"]: r["text"] for r in report["rows"] if r["question_id"] == "q1"}
    assert len(set(texts.values())) == 1
    assert all(len(r["repeats_tokens_per_s"]) == 2 for r in report["rows"])
    markdown = (out / "results.md").read_text()
    assert "| method | tokens/s | speedup | tau |" in markdown and "Speedup vs plain by category" in markdown
    page = (out / "report.html").read_text()
    assert "Plotly.newPlot" in page and "Where decode time goes" in page
    assert "plotly.js v" in page and "<script src=" not in page  # the library is embedded: works offline
    assert "results.json" in capsys.readouterr().out


def test_bench_sweep(tiny_llama_dir, head_dir, questions_file, tmp_path):
    out = tmp_path / "sweep"
    bench.main(["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--head", str(head_dir),
                "--max-new-tokens", "8", "--limit", "1", "--out", str(out), "--sweep", "ddd.threshold=-0.1,-1"])
    report = json.loads((out / "results.json").read_text())
    assert report["methods"] == ["plain", "ddd threshold=-0.1", "ddd threshold=-1"]
    sweep = report["sweep"]
    assert (sweep["method"], sweep["setting"]) == ("ddd", "threshold")
    assert [p["value"] for p in sweep["points"]] == ["-0.1", "-1"]
    assert all(p["speedup"] is not None and p["tau"] >= 1 for p in sweep["points"])
    assert "Sweep of ddd.threshold" in (out / "results.md").read_text()
    assert "Sweep of ddd.threshold" in (out / "report.html").read_text()


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_broken_head_file_is_reported(tiny_llama_dir, llama, questions_file, tmp_path, capsys, kind):
    from tests.tiny import write_broken_head

    bad = write_broken_head(tmp_path / "head", llama, kind)
    err = error_of(capsys, ["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--head", str(bad),
                            "--methods", "plain,eagle2", "--out", str(tmp_path / "out")])
    assert "do not match the" in err and "missing" in err and "Traceback" not in err


def test_bench_counts_operations_when_asked(tiny_llama_dir, head_dir, questions_file, tmp_path):
    out = tmp_path / "ops"
    bench.main(["--questions", str(questions_file), "--model", str(tiny_llama_dir), "--head", str(head_dir),
                "--max-new-tokens", "8", "--limit", "1", "--methods", "eagle2", "--count-ops", "--out", str(out)])
    report = json.loads((out / "results.json").read_text())
    plain, eagle2 = report["overall"]["plain"], report["overall"]["eagle2"]
    assert plain["ops_per_token"] == plain["ops_per_step"] == plain["ops_rest_per_step"]
    assert plain["ops_per_draft_call"] is None and eagle2["ops_per_draft_call"] > 0
    assert eagle2["ops_per_step"] > eagle2["ops_rest_per_step"] > 0
    assert "Operations dispatched" in (out / "results.md").read_text()
