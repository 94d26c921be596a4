"""EAGLE-3 heads: the architecture against a written-out reference, the published checkpoint layout in both
file formats, and lossless EAGLE / EAGLE-2 / DDD trees over them. Reshaped heads are tested in
tests/test_eagle3_resize.py, broken head files in tests/test_head_files.py."""
import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from components import load_race
from ddd import Eagle3Head, RunTrace, generate, load_head, new_eagle3_head, save_head
from ddd.drafting import HeadRunner
from ddd.eagle3 import aux_layers_of, default_aux_layers
from tests.heads import LAYERS, outputs, sample_inputs
from tests.tiny import PROMPTS, TREE_SETTINGS, UNSEEN, runs_equal_to_plain

PUBLISHED_KEYS = {
    "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight", "midlayer.post_attention_layernorm.weight", "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight",
}


def rms(x, weight, eps):
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def reference_step(head, embeds, hidden, positions):
    """One EAGLE-3 head step written out with plain tensor operations (causal attention over the sequence)."""
    layer, eps = head.midlayer, head.config.rms_norm_eps
    attn = layer.self_attn
    n, dim = hidden.shape[1], attn.head_dim
    both = torch.cat((rms(embeds, layer.input_layernorm.weight, eps), rms(hidden, layer.hidden_norm.weight, eps)), -1)
    q, k, v = ((both @ proj.weight.T).view(1, n, -1, dim).transpose(1, 2)
               for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    q, k = apply_rotary_pos_emb(q, k, *head.rotary(hidden, positions))
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    causal = torch.full((n, n), float("-inf")).triu(1)
    mixed = ((q @ k.transpose(-1, -2)) / dim ** 0.5 + causal).softmax(-1) @ v
    hidden = hidden + mixed.transpose(1, 2).reshape(1, n, -1) @ attn.o_proj.weight.T
    mlp, z = layer.mlp, rms(hidden, layer.post_attention_layernorm.weight, eps)
    return hidden + (F.silu(z @ mlp.gate_proj.weight.T) * (z @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T


def test_the_head_step_is_the_eagle3_layer(llama):
    head = new_eagle3_head(llama, layers=LAYERS, seed=3)
    with torch.no_grad():  # norms start at 1: give them values that show a norm applied in the wrong place
        for name, param in head.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    embeds, aux, positions = sample_inputs(head)
    with torch.no_grad():
        hidden = head.fuse(aux)
        assert torch.allclose(hidden, aux @ head.fc.weight.T)
        out = head(embeds, hidden, positions)
        assert torch.allclose(out, reference_step(head, embeds, hidden, positions), atol=1e-5)
        expected = rms(out, head.norm.weight, head.config.rms_norm_eps) @ head.lm_head.weight.T
        assert torch.allclose(head.logits(out), expected, atol=1e-5)
    assert head.fc.bias is None and head.fc.in_features == 3 * llama.hidden_size


def test_default_feature_layers_are_the_official_ones():
    assert default_aux_layers(30) == (2, 15, 27)
    assert aux_layers_of({}, 32, "x") == (2, 16, 29)
    ids = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}}
    assert aux_layers_of(ids, 32, "x") == (2, 16, 29)
    # The same layers counted as layer outputs (SpecForge's numbering).
    ids = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}
    assert aux_layers_of(ids, 32, "x") == (2, 16, 29)


def test_the_runner_fuses_context_features_and_feeds_its_own_output_deeper(llama):
    head = new_eagle3_head(llama, layers=LAYERS, seed=1).eval()
    embed = llama.model.get_input_embeddings()
    runner = HeadRunner(head, llama)
    tokens, aux = torch.arange(3, 9), torch.randn(6, head.feature_size)
    with torch.inference_mode():
        root = runner.extend(tokens, aux)
        whole = head(embed(tokens)[None], head.fuse(aux[None]), torch.arange(6)[None])
        assert torch.allclose(root, whole[0, -1], atol=1e-5)
        runner.begin_tree(1)
        child, _ = runner.expand(torch.tensor([11]), root[None], 1, torch.tensor([0]))
        # Level two by hand: the child's hidden input is the root's pre-norm output, not fc of anything.
        hidden = torch.cat((head.fuse(aux[None]), root[None, None]), dim=1)
        by_hand = head(embed(torch.cat((tokens, torch.tensor([11])))[None]), hidden, torch.arange(7)[None])[0, -1]
        assert torch.allclose(child[0], by_hand, atol=1e-5)
        assert torch.allclose(runner.logprobs(child), torch.log_softmax(head.logits(by_hand[None]), -1), atol=1e-5)
        runner.end_tree()
    assert runner.context_length == 6


def test_features_come_from_the_same_target_forward(llama, llama_eagle3_head, monkeypatch):
    """The prefill forward both gives the first token and, through output_hidden_states, the head's features."""
    calls, seen = [], []
    forward, extend = llama.model.model.forward, HeadRunner.extend

    def count(*args, **kwargs):
        calls.append(kwargs.get("output_hidden_states"))
        return forward(*args, **kwargs)

    def spy(self, next_tokens, features):
        seen.append(features.clone())
        return extend(self, next_tokens, features)

    monkeypatch.setattr(llama.model.model, "forward", count)
    monkeypatch.setattr(HeadRunner, "extend", spy)
    run = generate(llama, llama_eagle3_head, PROMPTS[0], "eagle2", max_new_tokens=12)
    steps = list(run)
    assert len(calls) == len(steps) and all(c == list(LAYERS) for c in calls)  # one target forward a step
    ids = torch.tensor([run.prompt_ids])
    with torch.inference_mode():
        states = llama.model.model(input_ids=ids, output_hidden_states=True).hidden_states
    assert torch.allclose(seen[0], torch.cat([states[i][0] for i in LAYERS], -1), atol=1e-5)


def test_published_layout_keys_and_config(tmp_path, llama):
    head = new_eagle3_head(llama, draft_vocab=torch.arange(10, 90), layers=LAYERS)
    save_head(head, tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    assert set(tensors) == PUBLISHED_KEYS
    assert tensors["d2t"].dtype == torch.int64 and torch.equal(tensors["d2t"], torch.full((80,), 10))
    assert tensors["t2d"].dtype == torch.bool and tensors["t2d"].sum() == 80 and tensors["t2d"][10:90].all()
    assert tensors["fc.weight"].shape == (64, 192) and tensors["lm_head.weight"].shape == (80, 64)
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (64, 128)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["draft_vocab_size"] == 80 and config["vocab_size"] == llama.vocab_size
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == list(LAYERS)


def write_official(directory, head, fmt, extra_keys=None, config_edit=None):
    """A checkpoint as the official release ships one: rope_theta, a float16 .bin or a .safetensors file."""
    save_head(head, directory)
    config = json.loads((directory / "config.json").read_text())
    config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    config.update(config_edit or {})
    (directory / "config.json").write_text(json.dumps(config))
    state = {k: v.clone() for k, v in head.state_dict_official().items()}
    state.update(extra_keys or {})
    (directory / "model.safetensors").unlink()
    if fmt == "bin":
        torch.save(state, directory / "pytorch_model.bin")
    else:
        save_file(state, directory / "model.safetensors")
    return directory


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_official_checkpoint_loads_in_both_formats(tmp_path, llama, llama_eagle3_head, fmt):
    embeddings = {"embed_tokens.weight": llama.model.get_input_embeddings().weight.clone()}
    loaded = load_head(write_official(tmp_path, llama_eagle3_head, fmt, embeddings), llama)
    assert isinstance(loaded, Eagle3Head) and loaded.aux_layers == LAYERS
    assert torch.equal(outputs(loaded), outputs(llama_eagle3_head))
    plain = generate(llama, None, PROMPTS[1], "plain", max_new_tokens=30)
    run = generate(llama, loaded, PROMPTS[1], "ddd", max_new_tokens=30)
    list(plain), list(run)
    assert run.token_ids == plain.token_ids and run.trace.summary["tau"] > 1.3


# The inner loop (pytest -m "not slow") runs DDD; the test command every method.
@pytest.mark.parametrize("method", [pytest.param(m, marks=() if m == "ddd" else pytest.mark.slow)
                                    for m in ("eagle", "eagle2", "ddd", "cost")])
def test_greedy_equals_plain_greedy(tmp_path, llama, llama_eagle3_head, method):
    head = load_head(save_head(llama_eagle3_head, tmp_path), llama)
    runs = runs_equal_to_plain(llama, head, PROMPTS[:3] + UNSEEN, [(method, s) for s in TREE_SETTINGS[method]], 40)
    assert {run.trace.head_kind for run in runs} == {"eagle3"}
    accepted = sum(s.accepted for run in runs for s in run.trace.steps)
    assert accepted > 50  # long accepted paths were exercised


def test_reduced_draft_vocabulary_maps_to_target_ids(tmp_path, llama):
    keep = torch.arange(1, llama.vocab_size, 3)
    head = load_head(save_head(new_eagle3_head(llama, draft_vocab=keep, layers=LAYERS), tmp_path), llama)
    assert head.draft_vocab_size == keep.numel() and torch.equal(head.draft_to_target(), keep)
    plain = generate(llama, None, PROMPTS[2], "plain", max_new_tokens=20)
    run = generate(llama, head, PROMPTS[2], "eagle2", max_new_tokens=20)
    list(plain), list(run)
    assert run.token_ids == plain.token_ids
    assert all(n.token_id % 3 == 1 for s in run.trace.steps for n in s.pool[1:])


def test_qwen_targets_give_features_too(qwen):
    head = new_eagle3_head(qwen, layers=(2, 0, 1))
    plain = generate(qwen, None, PROMPTS[0], "plain", max_new_tokens=16)
    run = generate(qwen, head, PROMPTS[0], "eagle", max_new_tokens=16)
    list(plain), list(run)
    assert run.token_ids == plain.token_ids


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_greedy_equals_plain_greedy_in_float32_and_int8(tiny_llama_dir, tmp_path, llama_eagle3_head, precision):
    from ddd import load_target

    target = load_target(str(tiny_llama_dir), dtype=precision)
    head = load_head(save_head(llama_eagle3_head, tmp_path), target)
    accepted = 0
    for prompt in PROMPTS[:2]:
        plain = generate(target, None, prompt, "plain", max_new_tokens=24)
        list(plain)
        for method in ("eagle", "eagle2", "ddd"):
            run = generate(target, head, prompt, method, max_new_tokens=24)
            accepted += sum(s.accepted for s in run)
            assert run.token_ids == plain.token_ids, (precision, method, prompt)
    assert accepted > 20


def test_old_traces_without_a_head_kind_load_as_eagle_runs():
    base = dict(method="ddd", settings={}, sampling={}, model="m", head="h", prompt="p", prompt_tokens=1,
                schema_version=1)
    assert RunTrace.from_dict(base).head_kind == "eagle"
    assert RunTrace.from_dict({**base, "method": "plain", "head": None}).head_kind is None
    assert RunTrace.from_dict({**base, "head_kind": "eagle3"}).head_kind == "eagle3"


def test_the_views_render_an_eagle3_race(llama, llama_eagle3_head, tmp_path):
    from tests.tiny import record_tiny_race, render_everything

    race = record_tiny_race(llama, llama_eagle3_head, "one two three")
    assert {race.traces[m].head_kind for m in ("eagle2", "ddd")} == {"eagle3"}
    back = load_race(race.save(tmp_path / "race.json", compact=True))
    assert back.traces["ddd"].head_kind == "eagle3"
    assert render_everything(back) == back.decode_steps() > 1
