"""EAGLE-3 heads reshaped between training stages (ddd/train/resize.py): deepened, cut, widened, given a
larger draft vocabulary or more features, rewired, or seeded from the target's top layers; each drafts as the
change promises, reloads as saved, and stays lossless."""
import json

import pytest
import torch
from safetensors.torch import load_file

from ddd import generate, load_head, new_eagle3_head, save_head
from ddd.eagle3 import MAX_LAYERS
from ddd.drafting import HeadRunner
from ddd.train.resize import deepen, seeded_from_target, shallower, widen, with_draft_hidden, with_vocab
from tests.heads import LAYERS, outputs, sample_inputs
from tests.tiny import PROMPTS, fit_eagle3_head


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
        runner.begin_tree(1)
        child, _ = runner.expand(torch.tensor([11]), root[None], 1, torch.tensor([0]))
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
