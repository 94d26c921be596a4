"""Every bad input gets a message that says what is wrong; nothing crashes with an index error."""
import pytest

from ddd import (ModelLoadError, PromptError, RunTrace, SettingsError, TraceFileError, generate, load_target,
                 method_settings)
from tests.tiny import load_tiny, save_tiny_model


def test_empty_prompt(llama):
    with pytest.raises(PromptError, match="empty"):
        generate(llama, None, "   ", "plain")


def test_prompt_longer_than_the_context(llama):
    with pytest.raises(PromptError, match="reads at most 256 tokens"):
        generate(llama, None, "one two three " * 200, "plain")


@pytest.mark.parametrize("method, settings, message", [
    ("beam", {}, "Unknown method 'beam'"),
    ("ddd", {"depth": 3}, "Unknown setting"),
    ("ddd", {"threshold": 0.5}, "never above 0"),
    ("ddd", {"check_steps": "3,20"}, "check_steps lists draft call 20, after the last one DDD may make"),
    ("ddd", {"check_steps": "x"}, "check_steps must be 'all' or draft calls from 1 to 64"),
    ("eagle2", {"beam_width": 0}, "beam_width must be a whole number from 1 to 1,024"),
    ("eagle2", {"beam_width": 1000}, "draft vocabulary size"),
    ("eagle2", {"top_k": 8}, "top_k is now beam_width"),
    ("eagle2", {"total_tokens": 1}, "total_tokens must be a whole number from 2 to 4,096"),
    ("eagle", {"tree": [[0], [0, 0, 0]]}, "has no parent path"),
])
def test_impossible_settings(llama, llama_head, method, settings, message):
    with pytest.raises(SettingsError, match=message):
        generate(llama, llama_head, "hi", method, **settings)


def test_speculative_method_without_a_head(llama):
    with pytest.raises(SettingsError, match="needs a draft head"):
        generate(llama, None, "hi", "ddd")


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p must be a number above 0 and at most 1, not 0"),
    ({"seed": -1}, "seed"),
])
def test_bad_sampling_and_lengths(llama, kwargs, message):
    with pytest.raises(SettingsError, match=message):
        generate(llama, None, "hi", "plain", **kwargs)


def test_settings_from_command_line_strings():
    s = method_settings("ddd", threshold="-0.5", check_steps="all", max_draft_calls="8")
    assert (s.threshold, s.checks(), s.max_draft_calls) == (-0.5, set(range(1, 9)), 8)


def test_model_loading_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="Could not load model"):
        load_target(str(tmp_path / "no-such-model"))
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_target(str(tmp_path), dtype="float8")
    with pytest.raises(ModelLoadError, match="tree verification needs"):
        load_target(str(tmp_path), attn="flash_attention_2")


@pytest.mark.parametrize("method", ["plain", "eagle2", "ddd"])
def test_context_limit_ends_the_run_with_a_message(tmp_path, method):
    from tests.tiny import fit_head

    target = load_tiny(save_tiny_model(tmp_path, max_positions=40))
    head = fit_head(target, steps=1) if method != "plain" else None
    prompt_len = len(target.tokenizer.apply_chat_template([{"role": "user", "content": "one"}], tokenize=False,
                                                          add_generation_prompt=True))
    run = generate(target, head, "one", method, max_new_tokens=500)
    list(run)
    assert "context limit" in run.trace.stop_reason
    assert prompt_len and len(run.trace.steps) > 1
    assert run.trace.prompt_tokens + len(run.token_ids) <= 41


def test_stop_ends_after_the_current_step(llama, llama_head):
    run = generate(llama, llama_head, "the cat sat", "ddd", max_new_tokens=40)
    for i, _ in enumerate(run):
        if i == 2:
            run.stop()
    assert len(run.trace.steps) == 3 and run.trace.stop_reason == "stopped"


def test_trace_round_trips(tmp_path, llama, llama_head):
    run = generate(llama, llama_head, "the cat sat", "ddd", max_new_tokens=20)
    list(run)
    path = run.trace.save(tmp_path / "run.json")
    loaded = RunTrace.load(path)
    assert loaded == run.trace
    assert loaded.summary["tau"] == run.trace.summary["tau"]


def test_trace_of_another_version_or_broken(tmp_path):
    (tmp_path / "old.json").write_text('{"schema_version": 0, "steps": []}')
    with pytest.raises(TraceFileError, match="schema version 0"):
        RunTrace.load(tmp_path / "old.json")
    (tmp_path / "broken.json").write_text('{"schema_version": 1, "ste')
    with pytest.raises(TraceFileError, match="not a readable JSON trace"):
        RunTrace.load(tmp_path / "broken.json")
    with pytest.raises(TraceFileError, match="No trace file"):
        RunTrace.load(tmp_path / "missing.json")
