"""What a run streams step by step: where an end-of-turn token cuts it, and text that never splits a character."""
import pytest
import torch

from ddd import generate
from tests.tiny import PROMPTS


def tokens_and_steps(target, head, prompt, method, **settings):
    run = generate(target, head, prompt, method, max_new_tokens=40, **settings)
    steps = list(run)
    return run, steps


def first_mid_run_token(token_ids, steps):
    """(position in the answer, token) of the first accepted draft token that is neither its step's last
    accepted draft nor a token seen earlier in the answer: making it the end of turn must cut the step inside
    its accepted run."""
    position = 0
    for step in steps:
        for i, token in enumerate(step.token_ids):
            if i < step.accepted - 1 and token not in token_ids[:position + i]:
                return position + i, token
        position += len(step.token_ids)
    return None


@pytest.mark.parametrize("method", ["eagle2", "ddd"])
def test_an_end_of_turn_token_inside_an_accepted_run_ends_the_answer_as_plain_decoding_does(
        llama, llama_head, monkeypatch, method):
    for prompt in PROMPTS[:3]:
        run, steps = tokens_and_steps(llama, llama_head, prompt, method)
        found = first_mid_run_token(run.token_ids, steps)
        if found:
            break
    assert found, "the fitted head should get runs of several drafts accepted"
    position, eos = found
    monkeypatch.setattr(llama.model.generation_config, "eos_token_id", eos)

    plain, _ = tokens_and_steps(llama, None, prompt, "plain")
    cut, cut_steps = tokens_and_steps(llama, llama_head, prompt, method)
    assert plain.token_ids == run.token_ids[:position + 1] and plain.token_ids[-1] == eos
    assert cut.token_ids == plain.token_ids and cut.text == plain.text
    assert cut.trace.stop_reason == plain.trace.stop_reason == "end of turn"
    # The drafts after the end of turn, and the bonus token, are dropped; so is their share of the accepted count.
    last = cut_steps[-1]
    assert last.token_ids[-1] == eos and last.accepted == len(last.token_ids) - 1 < steps[len(cut_steps) - 1].accepted


def script_greedy_tokens(target, script, monkeypatch):
    """Make greedy plain decoding emit `script`, one token per LM head call (plain decoding makes one a step,
    the prefill included)."""
    calls = iter(range(len(script)))

    def forward(hidden):
        logits = torch.zeros(*hidden.shape[:-1], target.vocab_size)
        logits[..., script[next(calls)]] = 1.0
        return logits

    monkeypatch.setattr(target.model.lm_head, "forward", forward)


def test_a_character_split_over_steps_streams_whole_once_its_last_byte_arrives(llama, monkeypatch):
    text = "aé☃🌳"  # one, two, three and four UTF-8 bytes: one byte token each in the tiny vocabulary
    script = llama.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(script) == len(text.encode())
    script_greedy_tokens(llama, script, monkeypatch)
    run = generate(llama, None, "one two three", "plain", max_new_tokens=len(script))
    texts = [step.text for step in run]
    assert texts == ["a", "", "é", "", "", "☃", "", "", "", "🌳"]
    assert "".join(texts) == run.text == text


def test_a_run_stopped_mid_character_drops_the_half_character(llama, monkeypatch):
    script = llama.tokenizer("a☃", add_special_tokens=False)["input_ids"]
    script_greedy_tokens(llama, script, monkeypatch)
    run = generate(llama, None, "one two three", "plain", max_new_tokens=len(script))
    texts = []
    for step in run:
        texts.append(step.text)
        if len(texts) == 2:  # 'a' and the first of the snowman's three bytes
            run.stop()
    assert texts == ["a", ""] and run.text == "a" and run.trace.stop_reason == "stopped"
