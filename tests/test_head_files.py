"""A HeadLoadError (never a traceback) for every kind of broken or foreign head file, EAGLE and EAGLE-3
alike: the checks of ddd/checkpoint.py and of each head kind's config."""
import json

import pytest
import torch
from safetensors.torch import save_file

from ddd import HeadLoadError, load_head, new_eagle3_head, new_head, save_head
from ddd.eagle3 import MAX_LAYERS
from tests.heads import LAYERS


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
        (edit_state(**{"fc.weight": torch.zeros(32, 96)}), r"fc.weight \[32, 96\] \(expected \[64, 192\]\)"),
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
