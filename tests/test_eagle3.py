"""EAGLE-3 heads: the architecture against a written-out reference, the published checkpoint layout in both
file formats, lossless EAGLE / EAGLE-2 / DDD trees over them, and a HeadLoadError (never a traceback) for
every kind of broken or foreign head file, EAGLE and EAGLE-3 alike."""
import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from components import load_race
from ddd import Eagle3Head, HeadLoadError, RunTrace, generate, load_head, new_eagle3_head, new_head, save_head
from ddd.drafting import HeadRunner
from ddd.eagle3 import (MAX_LAYERS, aux_layers_of, deepen, default_aux_layers, seeded_from_target, shallower, widen,
                        with_draft_hidden, with_vocab)
from tests.tiny import PROMPTS, TREE_SETTINGS, UNSEEN, fit_eagle3_head

LAYERS = (0, 1, 2)  # the tiny models have two layers: too few for the official choice
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


def sample_inputs(head, n=5):
    torch.manual_seed(0)
    hidden = head.config.hidden_size
    return torch.randn(1, n, hidden), torch.randn(1, n, head.feature_size), torch.arange(n)[None]


def outputs(head):
    embeds, aux, positions = sample_inputs(head)
    return head.logits(head(embeds, head.fuse(aux), positions))


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
        runner.begin_tree()
        child, _ = runner.expand(torch.tensor([11]), root[None], torch.tensor([1]), torch.tensor([-1]))
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


@pytest.mark.parametrize("method", ["eagle", "eagle2", "ddd"])
def test_greedy_equals_plain_greedy(tmp_path, llama, llama_eagle3_head, method):
    head = load_head(save_head(llama_eagle3_head, tmp_path), llama)
    accepted = 0
    for prompt in PROMPTS[:3] + UNSEEN:
        plain = generate(llama, None, prompt, "plain", max_new_tokens=40)
        list(plain)
        for settings in TREE_SETTINGS[method]:
            run = generate(llama, head, prompt, method, max_new_tokens=40, **settings)
            accepted += sum(s.accepted for s in run)
            assert run.token_ids == plain.token_ids, (prompt, settings)
            assert run.trace.head_kind == "eagle3"
    assert accepted > 50  # long accepted paths were exercised


def test_a_deepened_head_drafts_as_before_and_saves_its_stacked_layers(tmp_path, llama, llama_eagle3_head):
    deeper = deepen(llama_eagle3_head, 3)
    assert deeper.config.num_hidden_layers == 3 and len(deeper.layers) == 2
    assert torch.equal(outputs(deeper), outputs(llama_eagle3_head))  # the new layers add exactly zero
    save_head(deeper, tmp_path)
    assert {k for k in load_file(tmp_path / "model.safetensors") if k.startswith("layers.")} >= {
        "layers.0.self_attn.o_proj.weight", "layers.1.mlp.down_proj.weight"}
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 3
    loaded = load_head(tmp_path, llama)
    assert loaded.config.num_hidden_layers == 3 and torch.equal(outputs(loaded), outputs(deeper))


def test_a_head_seeded_from_the_target_starts_as_the_targets_own_top(llama):
    head = seeded_from_target(new_eagle3_head(llama, draft_vocab=torch.arange(0, llama.vocab_size, 2), layers=LAYERS,
                                              depth=2, seed=3), llama)
    ids = torch.randint(0, llama.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        output = llama.model.model(ids, output_hidden_states=list(head.hidden_state_ids))
        drafted = head.logits(head(llama.model.get_input_embeddings()(ids), head.fuse(head.target_features(output)),
                                   torch.arange(9)[None]))
        # The context position's own next-token logits: one token behind the head's label until it trains.
        expected = llama.model.lm_head(output.last_hidden_state)[..., head.draft_to_target()]
    assert torch.allclose(drafted, expected, atol=1e-4)


def test_seeding_from_the_target_needs_its_top_layers_input_among_the_features(llama):
    with pytest.raises(ValueError, match="at least two decoder layers"):
        seeded_from_target(new_eagle3_head(llama, layers=LAYERS), llama)
    with pytest.raises(ValueError, match="must include it"):
        seeded_from_target(new_eagle3_head(llama, layers=(0, 2), depth=2), llama)


def _stacked(llama_eagle3_head):
    """The head with a second decoder layer that counts, as training would make it."""
    deeper = deepen(llama_eagle3_head, 2)
    with torch.no_grad():
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            deeper.layers[0].get_submodule(name).weight.normal_(0, 0.02)
    return deeper


def _assert_lossless(llama, head):
    for method in ("eagle2", "ddd"):
        plain = generate(llama, None, PROMPTS[0], "plain", max_new_tokens=30)
        run = generate(llama, head, PROMPTS[0], method, max_new_tokens=30)
        list(plain), list(run)
        assert run.token_ids == plain.token_ids, method


def test_a_head_with_stacked_layers_stays_lossless(tmp_path, llama, llama_eagle3_head):
    deeper = _stacked(llama_eagle3_head)
    assert not torch.equal(outputs(deeper), outputs(llama_eagle3_head))
    _assert_lossless(llama, load_head(save_head(deeper, tmp_path), llama))


def _rewired(llama_eagle3_head):
    """A stacked head as it is and handing deeper levels its first layer's output."""
    deeper = _stacked(llama_eagle3_head)
    return deeper, with_draft_hidden(deeper, "first_layer")


def test_a_head_handing_deeper_levels_its_first_layer_output_drafts_level_one_as_before(llama_eagle3_head):
    deeper, rewired = _rewired(llama_eagle3_head)
    assert torch.equal(outputs(rewired), outputs(deeper))
    embeds, aux, positions = sample_inputs(rewired)
    with torch.no_grad():
        out = rewired(embeds, rewired.fuse(aux), positions)
        first = rewired.midlayer(embeds, rewired.fuse(aux), rewired.rotary(embeds, positions), None, None)
        plain = deeper(embeds, deeper.fuse(aux), positions)
    assert torch.equal(out, torch.cat((plain, first), dim=-1))  # the final output, then the first layer's
    assert torch.equal(rewired.next_hidden(out), first) and torch.equal(deeper.next_hidden(plain), plain)


def test_the_runner_feeds_deeper_levels_the_first_layers_output_when_the_head_says_so(llama, llama_eagle3_head):
    _, head = _rewired(llama_eagle3_head)
    embed = llama.model.get_input_embeddings()
    runner = HeadRunner(head.eval(), llama)
    tokens, aux = torch.arange(3, 9), torch.randn(6, head.feature_size)
    with torch.inference_mode():
        root = runner.extend(tokens, aux)
        runner.begin_tree()
        child, _ = runner.expand(torch.tensor([11]), root[None], torch.tensor([1]), torch.tensor([-1]))
        hidden = torch.cat((head.fuse(aux[None]), head.next_hidden(root)[None, None]), dim=1)
        by_hand = head(embed(torch.cat((tokens, torch.tensor([11])))[None]), hidden, torch.arange(7)[None])[0, -1]
        runner.end_tree()
    assert torch.allclose(child[0], by_hand, atol=1e-5)


def test_a_head_handing_deeper_levels_its_first_layer_output_reloads_so_and_stays_lossless(tmp_path, llama,
                                                                                         llama_eagle3_head):
    _, rewired = _rewired(llama_eagle3_head)
    head = load_head(save_head(rewired, tmp_path), llama)
    assert json.loads((tmp_path / "config.json").read_text())["eagle_config"]["draft_hidden"] == "first_layer"
    assert head.draft_hidden == "first_layer" and torch.equal(outputs(head), outputs(rewired))
    _assert_lossless(llama, head)


def test_only_a_head_with_stacked_layers_can_hand_on_its_first_layers_output(llama_eagle3_head):
    with pytest.raises(ValueError, match="needs two decoder layers"):
        with_draft_hidden(llama_eagle3_head, "first_layer")
    with pytest.raises(ValueError, match="draft_hidden is one of"):
        with_draft_hidden(deepen(llama_eagle3_head, 2), "middle")


def test_a_head_grows_but_never_shrinks_or_passes_the_limit(llama_eagle3_head):
    with pytest.raises(ValueError, match="can grow to 3"):
        deepen(deepen(llama_eagle3_head, 3), 2)
    with pytest.raises(ValueError, match=f"to {MAX_LAYERS}, not {MAX_LAYERS + 1}"):
        deepen(llama_eagle3_head, MAX_LAYERS + 1)


def test_a_cut_head_keeps_its_first_and_top_stacked_layers_and_stays_lossless(tmp_path, llama, llama_eagle3_head):
    deep = deepen(llama_eagle3_head, 3)
    with torch.no_grad():
        for layer in deep.layers:
            for name in ("self_attn.o_proj", "mlp.down_proj"):
                layer.get_submodule(name).weight.normal_(0, 0.02)
    cut = shallower(deep, 2)
    assert cut.config.num_hidden_layers == 2 and len(cut.layers) == 1
    for name, value in deep.layers[1].state_dict().items():
        assert torch.equal(cut.layers[0].state_dict()[name], value), name
    assert all(torch.equal(v, deep.midlayer.state_dict()[k]) for k, v in cut.midlayer.state_dict().items())
    assert not torch.equal(outputs(cut), outputs(deep))  # the dropped layer's update is gone
    loaded = load_head(save_head(cut, tmp_path), llama)
    assert loaded.config.num_hidden_layers == 2 and torch.equal(outputs(loaded), outputs(cut))
    _assert_lossless(llama, loaded)


def test_a_head_is_cut_to_fewer_layers_only_and_keeps_a_wiring_its_depth_allows(llama_eagle3_head):
    with pytest.raises(ValueError, match="can be cut to 1 to 2, not 3"):
        shallower(deepen(llama_eagle3_head, 3), 3)
    with pytest.raises(ValueError, match="needs two decoder layers"):
        shallower(with_draft_hidden(deepen(llama_eagle3_head, 2), "first_layer"), 1)


def test_a_widened_head_drafts_as_before_and_loads_at_its_new_width(tmp_path, llama, llama_eagle3_head):
    have = llama_eagle3_head.config.intermediate_size
    wider = widen(llama_eagle3_head, 3 * have)
    assert wider.midlayer.mlp.gate_proj.weight.shape[0] == 3 * have
    assert torch.equal(outputs(wider), outputs(llama_eagle3_head))  # the new channels add exactly zero
    assert wider.midlayer.mlp.gate_proj.weight[have:].abs().sum() > 0  # ... but can learn at once
    loaded = load_head(save_head(wider, tmp_path), llama)
    assert loaded.config.intermediate_size == 3 * have and torch.equal(outputs(loaded), outputs(wider))
    with pytest.raises(ValueError, match="can grow, not shrink"):
        widen(wider, have)


def test_a_head_grown_to_a_larger_draft_vocabulary_keeps_its_rows_and_stays_lossless(tmp_path, llama):
    keep = torch.arange(0, llama.vocab_size, 2)
    head = fit_eagle3_head(llama, steps=60, draft_vocab=keep)
    grown = with_vocab(head, torch.cat((keep, torch.tensor([1, 7, 11]))), llama.lm_weight)
    assert torch.equal(grown.draft_to_target(), torch.cat((keep, torch.tensor([1, 7, 11]))).sort().values)
    rows = torch.searchsorted(grown.draft_to_target(), keep)
    # its own rows draft as before (a wider product may round differently in the last place)
    torch.testing.assert_close(outputs(grown)[..., rows], outputs(head), rtol=1e-5, atol=1e-5)
    loaded = load_head(save_head(grown, tmp_path), llama)
    assert loaded.draft_vocab_size == keep.numel() + 3 and torch.equal(outputs(loaded), outputs(grown))
    _assert_lossless(llama, loaded)


def test_a_grown_draft_vocabulary_keeps_every_token_of_the_old(llama):
    head = new_eagle3_head(llama, draft_vocab=torch.arange(0, llama.vocab_size, 2), layers=LAYERS)
    with pytest.raises(ValueError, match="must keep every one"):
        with_vocab(head, torch.arange(1, llama.vocab_size, 2), llama.lm_weight)


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


# -- broken and foreign head files ------------------------------------------------------------------------

def _eagle3(llama):
    return new_eagle3_head(llama, draft_vocab=torch.arange(0, llama.vocab_size, 2), layers=LAYERS)


def _eagle(llama):
    return new_head(llama, draft_vocab=torch.arange(0, llama.vocab_size, 2))


def edit_state(**changes):
    def apply(state, config):
        for key, value in changes.items():
            if value is None:
                state.pop(key)
            else:
                state[key] = value(state[key]) if callable(value) else value
    return apply


def edit_config(**changes):
    def apply(state, config):
        config.update(changes)
    return apply


def shifted_d2t(d2t):
    d2t = d2t.clone()
    d2t[-1] += 2
    return d2t


def repeated_d2t(d2t):
    d2t = d2t.clone()
    d2t[1] = d2t[0] - 1  # draft id 1 maps to target id 0, like draft id 0
    return d2t


def nan_at_start(weight):
    weight = weight.clone()
    weight.view(-1)[0] = float("nan")
    return weight


BROKEN = {
    "eagle3": [
        (edit_state(**{"midlayer.mlp.down_proj.weight": torch.zeros(64, 100)}),
         r"wrong shapes: midlayer.mlp.down_proj.weight \[64, 100\] \(expected \[64, 128\]\)"),
        (edit_state(**{"norm.weight": None}), "missing norm.weight"),
        (edit_state(**{"input_norm.weight": torch.ones(192)}), "unexpected input_norm.weight"),
        (edit_state(**{"fc.weight": torch.zeros(32, 96)}), "hidden size: head 32, target 64"),
        (edit_config(target_hidden_size=4096), "target hidden size: head 4096, target 64"),
        (edit_config(vocab_size=999), "vocabulary: head 999"),
        (edit_state(d2t=shifted_d2t), "points outside the target's"),
        (edit_state(d2t=repeated_d2t), "maps two draft ids to the same target token"),
        (edit_state(d2t=lambda d: d.float()), "must be a 1-D integer tensor"),
        (edit_state(d2t=None), "has no `d2t`"),
        (edit_config(draft_vocab_size=7), "draft_vocab_size is 7 but d2t maps"),
        (edit_state(t2d=torch.zeros(10, dtype=torch.bool)), r"t2d covers \[10\] tokens"),
        (edit_state(**{"norm.weight": lambda w: w.long()}), "not floating point: norm.weight"),
        (edit_state(**{"lm_head.weight": nan_at_start}), "NaN or infinite values: lm_head.weight"),
        (edit_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 5]}),
         r"feature layers \[0, 1, 5\]: the target has hidden states 0 to 2"),
        (edit_config(eagle_config={"eagle_aux_hidden_state_layer_ids": "last"}), "must be a list of layer numbers"),
        (edit_config(eagle_config={}), r"feature layers \[2, 1, -1\]"),  # the official choice needs 5+ layers
        (edit_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "draft_hidden": "first_layer"}),
         "'first_layer' needs two decoder layers or more"),
        (edit_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "draft_hidden": 3}),
         "draft_hidden is one of"),
        (edit_config(num_key_value_heads=3), "4 attention heads cannot share 3 key/value heads"),
        (edit_config(rms_norm_eps="small"), "is not a Llama config a head can be built from"),
        (edit_state(**{"layers.1.input_layernorm.weight": torch.ones(64)}),
         rf"stacked layers: \['1'\] are not 0 to {MAX_LAYERS - 2} in order"),
    ],
    "eagle": [
        (edit_state(**{"layers.0.mlp.down_proj.weight": torch.zeros(64, 100)}),
         r"wrong shapes: layers.0.mlp.down_proj.weight \[64, 100\] \(expected \[64, 128\]\)"),
        (edit_state(**{"layers.0.self_attn.q_proj.weight": None}), "missing layers.0.self_attn.q_proj.weight"),
        (edit_state(**{"fc.weight": torch.zeros(32, 64)}), "hidden size: head 32, target 64"),
        (edit_config(vocab_size=999), "vocabulary: head 999"),
        (edit_state(d2t=shifted_d2t), "points outside the target's"),
        (edit_state(d2t=repeated_d2t), "maps two draft ids to the same target token"),
        (edit_state(**{"fc.bias": nan_at_start}), "NaN or infinite values: fc.bias"),
        (edit_config(hidden_size=128), "hidden size: head 128, target 64"),
        (edit_config(rms_norm_eps="small"), "is not a Llama config a head can be built from"),
    ],
    "any": [
        (edit_state(**{"fc.weight": None}), "is not an EAGLE head: it has no `fc.weight`"),
        (edit_state(**{"fc.weight": torch.zeros(64)}), r"`fc.weight` .* is not a matrix"),
    ],
}
CASES = [(kind, edit, message) for kind in ("eagle3", "eagle") for edit, message in BROKEN[kind] + BROKEN["any"]]


def write_broken(directory, head, edit):
    save_head(head, directory)
    state = {k: v.clone() for k, v in head.state_dict_official().items()}
    config = json.loads((directory / "config.json").read_text())
    edit(state, config)
    (directory / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
    return directory


@pytest.mark.parametrize("kind, edit, message", CASES,
                         ids=[f"{kind}-{i}" for i, (kind, _, _) in enumerate(CASES)])
def test_broken_head_files_say_what_is_wrong(tmp_path, llama, kind, edit, message):
    head = _eagle3(llama) if kind == "eagle3" else _eagle(llama)
    with pytest.raises(HeadLoadError, match=message) as info:
        load_head(write_broken(tmp_path / "head", head, edit), llama)
    assert "\n" not in str(info.value)


def test_a_corrupt_bin_file_says_so(tmp_path, llama):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02 not a pickle of tensors")
    with pytest.raises(HeadLoadError, match="Cannot read .*pytorch_model.bin"):
        load_head(tmp_path, llama)
    torch.save([torch.zeros(2)], tmp_path / "pytorch_model.bin")
    with pytest.raises(HeadLoadError, match="does not hold a dictionary of named tensors"):
        load_head(tmp_path, llama)


GARBAGE = [("config.json", "{not json", "config.json is not readable JSON"),
           ("config.json", "[1, 2]", "holds a JSON list, not a config object"),
           ("model.safetensors", "garbage, not tensors", "Cannot read .*model.safetensors")]


@pytest.mark.parametrize("kind", ["eagle3", "eagle"])
@pytest.mark.parametrize("name, content, message", GARBAGE)
def test_unreadable_head_files_say_so(tmp_path, llama, kind, name, content, message):
    save_head(_eagle3(llama) if kind == "eagle3" else _eagle(llama), tmp_path)
    (tmp_path / name).write_text(content)
    with pytest.raises(HeadLoadError, match=message):
        load_head(tmp_path, llama)
