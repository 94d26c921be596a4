"""EAGLE-3 heads narrower or wider than their target, as published: config.json's `hidden_size` is the head's
width and `target_hidden_size` the target's, `fc` maps 3 x the target's width to the head's, and the head
brings token embeddings of its own width. They load, draft losslessly and save back in that layout; a config
that contradicts the target, or embeddings of the wrong width, are refused with a message."""
import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from ddd import Eagle3Head, HeadLoadError, generate, load_head, load_target, new_eagle3_head, save_head
from ddd.drafting import HeadRunner
from ddd.head import for_target
from ddd.train import cli as train
from tests.heads import LAYERS, outputs
from tests.tiny import CORPUS, PROMPTS, UNSEEN, fit_eagle3_head, runs_equal_to_plain

TARGET_WIDTH = 64  # tests/tiny.py
WIDTHS = (32, 96)  # narrower and wider than the target
SETTINGS = {"eagle2": [{}, {"beam_width": 3, "draft_calls": 4, "total_tokens": 8}],
            "ddd": [{}, {"check_steps": "all", "threshold": -0.05}]}


@pytest.fixture(scope="module", params=WIDTHS, ids=[f"head{w}" for w in WIDTHS])
def wide_head(request, llama):
    """A head of another width than the tiny target's, fitted so that long paths get accepted."""
    return fit_eagle3_head(llama, hidden=request.param, steps=150)


def saved(head, directory, state_edit=None, config_edit=None):
    """`head` written by save_head, then its tensors and config.json changed (a key set to None is removed)."""
    save_head(head, directory)
    state = load_file(directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    for edits, target in ((state_edit, state), (config_edit, config)):
        for key, value in (edits or {}).items():
            if value is None:
                target.pop(key)
            else:
                target[key] = value
    save_file(state, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_the_runner_embeds_tokens_with_the_heads_own_table(llama):
    head = new_eagle3_head(llama, layers=LAYERS, hidden=32, seed=1).eval()
    runner = HeadRunner(head, llama)
    tokens = torch.arange(3, 9)
    aux = torch.randn(6, head.feature_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        root = runner.extend(tokens, aux)
        whole = head(head.embed_tokens(tokens)[None], head.fuse(aux[None]), torch.arange(6)[None])
    assert runner.embed is head.embed_tokens and torch.allclose(root, whole[0, -1], atol=1e-5)


@pytest.mark.slow
def test_it_saves_in_the_published_layout_and_loads_back_the_same(tmp_path, llama, wide_head):
    width = wide_head.config.hidden_size
    save_head(wide_head, tmp_path / "a")
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["hidden_size"] == width and config["target_hidden_size"] == TARGET_WIDTH
    tensors = load_file(tmp_path / "a" / "model.safetensors")
    assert tensors["embed_tokens.weight"].shape == (llama.vocab_size, width)
    assert tensors["fc.weight"].shape == (width, 3 * TARGET_WIDTH)
    assert tensors["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * width
    assert tensors["lm_head.weight"].shape == (wide_head.draft_vocab_size, width)
    loaded = load_head(tmp_path / "a", llama)
    assert isinstance(loaded, Eagle3Head) and loaded.target_hidden == TARGET_WIDTH
    assert loaded.embedding(llama) is loaded.embed_tokens
    assert loaded.embedding(llama) is not llama.model.get_input_embeddings()
    assert torch.equal(outputs(loaded), outputs(wide_head))
    save_head(loaded, tmp_path / "b")  # the round trip writes the same files
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == config
    again = load_file(tmp_path / "b" / "model.safetensors")
    assert set(again) == set(tensors) and all(torch.equal(again[k], tensors[k]) for k in tensors)


def test_an_official_style_file_loads_too(tmp_path, llama, wide_head):
    """rope_theta instead of rope_parameters, a pytorch_model.bin: as the official release writes them."""
    save_head(wide_head, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch.save(load_file(tmp_path / "model.safetensors"), tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    assert torch.equal(outputs(load_head(tmp_path, llama)), outputs(wide_head))


@pytest.mark.parametrize("method", ["eagle2", "ddd"])
def test_greedy_equals_plain_greedy(tmp_path, llama, wide_head, method):
    head = load_head(save_head(wide_head, tmp_path), llama)
    runs = runs_equal_to_plain(llama, head, PROMPTS[:2] + UNSEEN[:1], [(method, s) for s in SETTINGS[method]], 24)
    accepted = sum(s.accepted for run in runs for s in run.trace.steps)
    assert accepted > 24, accepted  # long accepted paths were exercised


def test_greedy_equals_plain_greedy_in_int8(tiny_llama_dir, tmp_path, wide_head):
    target = load_target(str(tiny_llama_dir), dtype="int8")
    head = load_head(save_head(wide_head, tmp_path), target)
    plain = generate(target, None, PROMPTS[1], "plain", max_new_tokens=24)
    run = generate(target, head, PROMPTS[1], "ddd", max_new_tokens=24)
    list(plain), list(run)
    assert run.token_ids == plain.token_ids and sum(s.accepted for s in run.trace.steps) > 4


# Each case: shapes to write ({key: shape given the vocabulary size V, or None to leave the key out}), config
# changes, and what the message says ("V" standing for the vocabulary size).
REFUSED = [
    ({}, {"target_hidden_size": 128}, "target hidden size: head 128, target 64"),
    ({}, {"target_hidden_size": "64"}, "target hidden size: head '64', target 64"),
    ({}, {"target_hidden_size": None}, "hidden size: head 32, target 64, and config.json names no target_hidden_size"),
    ({"embed_tokens.weight": None}, {}, r"is 32 wide and its target \(.*\) 64: such a head needs token embeddings"),
    ({"embed_tokens.weight": lambda v: (v, 64)}, {}, r"embed_tokens.weight \[V, 64\] \(expected \[V, 32\]\)"),
    ({"embed_tokens.weight": lambda v: (v - 1, 32)}, {}, r"embed_tokens.weight \[W, 32\] \(expected \[V, 32\]\)"),
    ({"fc.weight": lambda v: (32, 96)}, {}, r"fc.weight \[32, 96\] \(expected \[32, 192\]\)"),
    ({}, {"hidden_size": 48}, r"wrong shapes: .*\(expected \[48, 192\]\)"),
]


@pytest.mark.parametrize("state_edit, config_edit, message", REFUSED, ids=range(len(REFUSED)))
def test_a_narrow_head_that_does_not_fit_says_why(tmp_path, llama, state_edit, config_edit, message):
    head = new_eagle3_head(llama, layers=LAYERS, hidden=32)
    vocab = llama.vocab_size
    state_edit = {k: None if v is None else torch.zeros(v(vocab)) for k, v in state_edit.items()}
    message = message.replace("W", str(vocab - 1)).replace("V", str(vocab))
    with pytest.raises(HeadLoadError, match=message) as info:
        load_head(saved(head, tmp_path, state_edit, config_edit), llama)
    assert "\n" not in str(info.value)


def test_a_head_of_the_targets_width_reads_the_targets_embeddings_and_checks_a_copy(tmp_path, llama):
    head = new_eagle3_head(llama, layers=LAYERS)
    assert head.embed_tokens is None and head.embedding(llama) is llama.model.get_input_embeddings()
    save_head(head, tmp_path)
    assert "target_hidden_size" not in json.loads((tmp_path / "config.json").read_text())
    assert "embed_tokens.weight" not in load_file(tmp_path / "model.safetensors")
    explicit = {"target_hidden_size": TARGET_WIDTH}  # naming the target's width is the same head
    assert torch.equal(outputs(load_head(saved(head, tmp_path / "named", config_edit=explicit), llama)), outputs(head))
    copy = {"embed_tokens.weight": llama.model.get_input_embeddings().weight.clone()}
    assert torch.equal(outputs(load_head(saved(head, tmp_path / "copy", copy), llama)), outputs(head))
    wrong = {"embed_tokens.weight": torch.zeros(llama.vocab_size, 32)}
    with pytest.raises(HeadLoadError, match=rf"embed_tokens.weight \[{llama.vocab_size}, 32\] \(expected "
                                            rf"\[{llama.vocab_size}, 64\], the target's embedding table"):
        load_head(saved(head, tmp_path / "wrong", wrong), llama)


def test_a_new_head_width_must_split_into_the_attention_heads(llama):
    with pytest.raises(ValueError, match="cannot split into"):
        new_eagle3_head(llama, layers=LAYERS, hidden=30)


def test_distillation_refuses_a_head_of_another_width(tiny_llama_dir, llama, tmp_path, capsys):
    save_head(new_eagle3_head(llama, layers=LAYERS, hidden=32), tmp_path / "narrow")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"prompt": f"say {i}", "response": t}) + "\n" for i, t in enumerate(CORPUS)))
    assert train.main(["distill", "--model", str(tiny_llama_dir), "--prompts", "", "--corpus", str(corpus),
                       "--out", str(tmp_path / "head"), "--ckpt-dir", str(tmp_path / "ckpt"), "--init",
                       str(tmp_path / "narrow"), "--steps", "1", "--no-bf16", "--threads", "1"]) == 2
    assert "distillation trains heads of their target's width" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_greedy_equals_plain_greedy_on_cuda(tiny_llama_dir, wide_head, precision):
    target = load_target(str(tiny_llama_dir), dtype=precision, device="cuda")
    head = for_target(copy.deepcopy(wide_head), target)
    assert head.embed_tokens.weight.device.type == "cuda" and head.embed_tokens.weight.dtype == target.model.dtype
    runs_equal_to_plain(target, head, PROMPTS[:2] + UNSEEN[:1], [("eagle2", {}), ("ddd", {})], 24)
