"""Draft-head checkpoints: the official EAGLE layout loads, ours round-trips, misfits are refused."""
import json

import pytest
import torch
from safetensors.torch import save_file

from ddd import HeadLoadError, generate, load_head, new_eagle3_head, new_head, save_head

OFFICIAL_KEYS = {
    "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight",
}


def outputs(head, target):
    torch.manual_seed(0)
    x, f = torch.randn(1, 5, target.hidden_size), torch.randn(1, 5, target.hidden_size)
    return head(x, f, torch.arange(5)[None])


def test_saved_head_uses_the_official_key_names(tmp_path, llama, llama_head):
    from safetensors.torch import load_file

    save_head(llama_head, tmp_path)
    assert set(load_file(tmp_path / "model.safetensors")) == OFFICIAL_KEYS
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 1


def test_safetensors_round_trip(tmp_path, llama, llama_head):
    loaded = load_head(save_head(llama_head, tmp_path), llama)
    assert torch.equal(outputs(loaded, llama), outputs(llama_head, llama))


def test_official_bin_checkpoint_with_embeddings_loads(tmp_path, llama, llama_head):
    """An official EAGLE checkpoint: config.json with rope_theta, pytorch_model.bin, a copy of embed_tokens."""
    save_head(llama_head, tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    (tmp_path / "official").mkdir()
    (tmp_path / "official" / "config.json").write_text(json.dumps(config))
    state = llama_head.state_dict_official()
    state["embed_tokens.weight"] = llama.model.get_input_embeddings().weight.clone()
    torch.save(state, tmp_path / "official" / "pytorch_model.bin")
    loaded = load_head(tmp_path / "official", llama)
    assert torch.equal(outputs(loaded, llama), outputs(llama_head, llama))


def test_head_without_bias(tmp_path, llama):
    head = new_head(llama)
    state = {k: v for k, v in head.state_dict_official().items() if k != "fc.bias"}
    save_head(head, tmp_path)
    save_file(state, tmp_path / "model.safetensors")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "bias": False}))
    assert load_head(tmp_path, llama).fc.bias is None


def test_reduced_draft_vocabulary_round_trips_and_decodes_losslessly(tmp_path, llama, llama_head):
    keep = torch.arange(0, llama.vocab_size, 2)
    head = new_head(llama, draft_vocab=keep)
    head.load_state_dict(llama_head.state_dict(), strict=False)
    loaded = load_head(save_head(head, tmp_path), llama)
    assert torch.equal(loaded.draft_to_target(), keep)
    plain = generate(llama, None, "one two", "plain", max_new_tokens=20)
    run = generate(llama, loaded, "one two", "eagle2", max_new_tokens=20)
    list(plain), list(run)
    assert run.token_ids == plain.token_ids
    assert all(n.token_id % 2 == 0 for s in run.trace.steps for n in s.pool[1:])


def test_head_for_another_model_is_refused_with_the_numbers(tmp_path, llama, qwen):
    head = new_head(llama)
    head.config.vocab_size = qwen.vocab_size + 7
    save_head(head, tmp_path)
    with pytest.raises(HeadLoadError, match=rf"vocabulary: head {qwen.vocab_size + 7}, target {qwen.vocab_size}"):
        load_head(tmp_path, qwen)


def test_hidden_size_mismatch_is_refused(tmp_path, llama):
    head = new_head(llama)
    state = head.state_dict_official()
    state["fc.weight"] = torch.zeros(32, 64)
    save_head(head, tmp_path)
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    with pytest.raises(HeadLoadError, match="hidden size: head 32, target 64"):
        load_head(tmp_path, llama)


def test_missing_head_files(tmp_path, llama):
    with pytest.raises(HeadLoadError, match="config.json is missing"):
        load_head(tmp_path / "nowhere", llama)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(HeadLoadError, match="No head weights"):
        load_head(tmp_path, llama)


def test_one_rule_picks_the_head_for_every_caller(tmp_path):
    from ddd.catalog import SHIPPED_HEAD, choose_head
    from ddd.models import DEFAULT_MODEL

    assert choose_head(None, DEFAULT_MODEL).source == str(SHIPPED_HEAD)
    assert choose_head(None, DEFAULT_MODEL).label == "shipped head"
    other = choose_head(None, "some/model")
    assert other.source is None and "using a random head" in other.note
    assert choose_head("random", DEFAULT_MODEL).source is None
    given = choose_head(str(tmp_path / "my-head"), "some/model")
    assert given.source == str(tmp_path / "my-head") and given.label == "my-head" and given.note == ""


def test_a_new_head_is_built_from_its_seed_alone_and_leaves_the_callers_random_draws_alone(llama):
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    eagle = [new_head(llama, seed=5) for _ in range(2)]
    eagle3 = [new_eagle3_head(llama, layers=(0, 1, 2), seed=5) for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)
    for a, b in (eagle, eagle3):
        assert a.state_dict().keys() == b.state_dict().keys()
        assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    assert not torch.equal(new_head(llama, seed=6).fc.weight, eagle[0].fc.weight)
