"""The int8 mode's building blocks: what makes speculative decoding lossless there."""
import pytest
import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ddd import load_target
from ddd.models import ModelLoadError
from ddd.precision import EXACT_ATTENTION, Int8Linear, exact_attention


@pytest.fixture
def linear():
    torch.manual_seed(0)
    return nn.Linear(96, 40, bias=True)


def test_int8_linear_rows_do_not_depend_on_their_neighbours(linear):
    """A row's int8 result is bit-identical alone or in any batch: a tree's tokens cannot change each other."""
    layer = Int8Linear(linear)
    x = torch.randn(9, 96) * torch.logspace(-2, 2, 9)[:, None]  # rows of very different size
    together = layer(x)
    for i in range(len(x)):
        assert torch.equal(layer(x[i:i + 1]), together[i:i + 1])
    assert torch.equal(layer(x[None, 3:7]), together[3:7][None])


def test_int8_linear_with_float_outlier_channels_keeps_rows_independent():
    """The outlier channels' float products, too, give a row the same result alone or among 40 others."""
    torch.manual_seed(1)
    wide = nn.Linear(96, 3000, bias=False)
    x = torch.randn(40, 96)
    x[:, [5, 50]] *= 100  # two channels far above the rest, as in real activations
    layer = Int8Linear(wide, x.abs().amax(0), outliers=4)
    together = layer(x)
    for i in (0, 7, 39):
        assert torch.equal(layer(x[i:i + 1]), together[i:i + 1])
    assert torch.equal(layer(x[8:24]), together[8:24])
    assert (together - wide(x)).abs().max() / wide(x).abs().max() < 0.05


def test_int8_linear_is_close_to_the_float_linear(linear):
    x = torch.randn(5, 96)
    ref = linear(x).detach()
    err = (Int8Linear(linear)(x) - ref).abs().max() / ref.abs().max()
    assert err < 0.05


def test_int8_linear_keeps_zero_rows_finite(linear):
    out = Int8Linear(linear)(torch.zeros(2, 96))
    assert torch.allclose(out, linear.bias.detach().expand(2, -1))


def test_exact_attention_matches_sdpa():
    torch.manual_seed(0)
    module = nn.Module()
    module.num_key_value_groups, module.training, module.is_causal = 2, False, True
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 12, 16), torch.randn(1, 2, 12, 16)
    mask = torch.zeros(1, 1, 5, 12).masked_fill_(torch.rand(1, 1, 5, 12) < 0.3, torch.finfo(torch.float32).min)
    mask[..., 0] = 0  # every query sees at least one key
    ours, _ = exact_attention(module, q, k, v, mask, scaling=0.25)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_exact_attention_ignores_masked_keys_bit_for_bit():
    """A tree token sees its keys among masked siblings; plain decoding sees the same keys alone."""
    torch.manual_seed(1)
    module = nn.Module()
    module.num_key_value_groups = 3
    q, k, v = torch.randn(1, 3, 1, 16), torch.randn(1, 1, 40, 16), torch.randn(1, 1, 40, 16)
    visible = torch.rand(40) < 0.6
    visible[0] = True
    mask = torch.zeros(1, 1, 1, 40).masked_fill_(~visible, torch.finfo(torch.float32).min)
    among, _ = exact_attention(module, q, k, v, mask, scaling=0.25)
    alone, _ = exact_attention(module, q, k[:, :, visible], v[:, :, visible], None, scaling=0.25)
    assert torch.equal(among, alone)


def test_int8_target_uses_int8_linears_and_exact_attention(tiny_llama_dir):
    target = load_target(str(tiny_llama_dir), dtype="int8")
    assert target.precision == "int8"
    assert isinstance(target.model.lm_head, Int8Linear)
    assert isinstance(target.model.model.layers[-1].mlp.down_proj, Int8Linear)
    assert target.model.config._attn_implementation == EXACT_ATTENTION
    assert target.lm_weight.shape == (target.vocab_size, target.hidden_size)  # the draft head still reads it


def test_int8_is_refused_off_the_cpu(tiny_llama_dir):
    with pytest.raises(ModelLoadError, match="CPU"):
        load_target(str(tiny_llama_dir), dtype="int8", device="cuda")


def test_int8_gives_a_token_the_same_hidden_state_alone_or_with_others(tiny_llama_dir):
    """The property exact verification stands on, for the whole model (its float first layer included)."""
    from transformers import DynamicCache

    model = load_target(str(tiny_llama_dir), dtype="int8").model
    ids = torch.arange(3, 23)[None]

    def first_new_hidden(chunk: int) -> torch.Tensor:
        cache = DynamicCache(config=model.config)
        with torch.inference_mode():
            model.model(input_ids=ids[:, :16], cache=cache, use_cache=True)
            return model.model(input_ids=ids[:, 16:16 + chunk], cache=cache, use_cache=True).last_hidden_state[0, 0]

    alone = first_new_hidden(1)
    for chunk in (2, 4):
        assert torch.equal(first_new_hidden(chunk), alone)


def test_exact_linear_rows_do_not_depend_on_their_neighbours(linear):
    from ddd.precision import ExactLinear

    layer = ExactLinear(linear)
    x = torch.randn(33, 96)
    together = layer(x)
    assert all(torch.equal(layer(x[i:i + 1]), together[i:i + 1]) for i in range(len(x)))
    assert torch.allclose(together, linear(x).detach(), atol=1e-5)
