"""`python -m ddd generate` streams the answer, prints the summary, and explains every bad argument."""
import pytest

from ddd.cli import main
from ddd.checkpoint import save_head


def test_generate_streams_text_and_summary(tmp_path, tiny_llama_dir, llama_head, capsys):
    head_dir = save_head(llama_head, tmp_path / "head")
    main(["generate", "the cat sat", "--model", str(tiny_llama_dir), "--head", str(head_dir), "--method", "ddd",
          "--max-new-tokens", "12", "--set", "threshold=-0.5", "--set", "ddd.check_steps=all",
          "--save", str(tmp_path / "run.json")])
    out = capsys.readouterr().out
    for key in ("tokens_per_s", "tau", "target_forwards", "mean_draft_depth", "stop: max_new_tokens"):
        assert key in out
    assert (tmp_path / "run.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["generate", "hi", "--method", "beam"], "invalid choice: 'beam'"),
    (["generate", "hi", "--set", "threshold"], "settings look like name=value"),
    (["generate", "hi", "--max-new-tokens", "many"], "max_new_tokens must be a whole number from 1 to 1,000,000"),
    (["generate", "hi", "--top-k", "²"], "top_k must be a whole number from 0 to 1,000,000, not '²'"),
    (["generate", "hi", "--seed", "9" * 5000], "seed must be a whole number from 0 to"),
    (["generate", "hi", "--temperature", "nan"], "temperature must be a number from 0 to 10, not 'nan'"),
    (["generate", "hi", "--top-p", "0"], "top_p must be a number above 0 and at most 1, not 0"),
    (["generate", "hi", "--dtype", "float8"], "invalid choice: 'float8'"),
])
def test_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--set", "threshold=1"], "never above 0"),
    (["--set", "depth=3"], "Unknown setting"),
    (["--set", "beam_width=٣"], "beam_width must be a whole number from 1 to 1,024, not '٣'"),
    (["--set", "check_steps=5,①"], "check_steps must be 'all' or draft calls from 1 to 64"),
    (["--head", "/no/such/head"], "config.json is missing"),
    (["--max-new-tokens", "0"], "max_new_tokens must be a whole number from 1 to 1,000,000, not 0"),
])
def test_bad_values_give_their_message(tiny_llama_dir, extra, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "hi", "--model", str(tiny_llama_dir), "--head", "random", *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "hi", "--model", str(tmp_path / "none"), "--method", "plain"])
    assert "Could not load model" in capsys.readouterr().err


def test_a_stopped_run_prints_every_character_its_steps_emitted(tmp_path, tiny_llama_dir, llama_head, capsys,
                                                                 monkeypatch):
    """Ctrl-C ends the run after the current step; what was printed is the trace's steps joined."""
    import os
    import signal

    from ddd import cli

    real_generate = cli.generate

    def interrupted(*args, **kwargs):
        run = real_generate(*args, **kwargs)
        steps = iter(run)

        class Interrupted:
            trace = run.trace

            def stop(self):
                run.stop()

            def __iter__(self):
                for number, step in enumerate(steps):
                    if number == 3:
                        os.kill(os.getpid(), signal.SIGINT)
                    yield step

        return Interrupted()

    monkeypatch.setattr(cli, "generate", interrupted)
    head_dir = save_head(llama_head, tmp_path / "head")
    main(["generate", "the cat sat", "--model", str(tiny_llama_dir), "--head", str(head_dir), "--method", "eagle2",
          "--max-new-tokens", "40", "--save", str(tmp_path / "run.json")])
    out = capsys.readouterr().out
    from ddd.trace import RunTrace

    trace = RunTrace.load(tmp_path / "run.json")
    assert trace.stop_reason == "stopped" and len(trace.steps) == 4  # the step under way when Ctrl-C came is the last
    joined = "".join(step.text for step in trace.steps)
    assert out.startswith(joined + "\n") and trace.text == joined


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_a_broken_head_file_is_one_line_of_error(tmp_path, tiny_llama_dir, llama, kind, capsys):
    from tests.tiny import write_broken_head

    bad = write_broken_head(tmp_path / "head", llama, kind)
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "hi", "--model", str(tiny_llama_dir), "--head", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    message = err[err.index("error: "):]  # after the progress bar of the target's loading
    assert message.startswith("error: Head weights in") and message.count("\n") == 1 and "missing" in message
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_head_for_another_model_fails_cleanly_from_the_shell(tiny_llama_dir):
    """The shipped head belongs to the default model (hidden size 576): the process says so and exits 2."""
    import subprocess
    import sys
    from pathlib import Path

    from ddd.catalog import SHIPPED_HEAD

    done = subprocess.run([sys.executable, "-m", "ddd", "generate", "hi", "--model", str(tiny_llama_dir), "--head",
                           str(SHIPPED_HEAD)], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 2
    assert "hidden size: head 576, target 64" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def default_eagle3_dir(tmp_path_factory):
    from ddd import load_target, new_eagle3_head

    return save_head(new_eagle3_head(load_target()), tmp_path_factory.mktemp("eagle3-default"))


@pytest.mark.slow
def test_a_random_eagle3_head_for_the_default_model_decodes_losslessly(default_eagle3_dir, tmp_path, capsys):
    from ddd import RunTrace

    tokens = {}
    small_trees = {"plain": [], "eagle": ["--set", "tree=[[0],[1],[0,0]]"], "eagle2": ["--set", "total_tokens=16"],
                   "ddd": ["--set", "total_tokens=16"]}
    for method, trees in small_trees.items():
        main(["generate", "What is the capital of France?", "--method", method, "--head", str(default_eagle3_dir),
              "--max-new-tokens", "12", *trees, "--save", str(tmp_path / f"{method}.json")])
        trace = RunTrace.load(tmp_path / f"{method}.json")
        tokens[method] = [t for step in trace.steps for t in step.token_ids]
        assert trace.head_kind == (None if method == "plain" else "eagle3")
    assert "tau" in capsys.readouterr().out
    assert tokens["eagle"] == tokens["eagle2"] == tokens["ddd"] == tokens["plain"]
    assert len(tokens["plain"]) > 4
