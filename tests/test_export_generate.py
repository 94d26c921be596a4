"""`python -m ddd export-generate DIR` writes a folder transformers runs as `custom_generate=DIR`
(trust_remote_code=True), offline, with a copy of the engine beside its generate.py."""
import pytest
import torch
from transformers import AttentionInterface

from ddd.cli import main
from ddd.export_generate import PACKAGE, REQUIREMENTS, engine_modules, export_generate
from ddd.precision import EXACT_ATTENTION, TREE_ATTENTION, exact_attention, tree_attention
from ddd.settings import METHOD_DECLARATIONS, METHODS
from tests.tiny import PROMPTS, TREE_SETTINGS

CHEAP_COSTS = TREE_SETTINGS["cost"][1]  # the cost rule cheap enough to draft deep on the tiny model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    directory = tmp_path_factory.mktemp("export") / "ddd-generate"
    assert main(["export-generate", str(directory)]) == 0
    return directory


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("method", ["eagle2", "ddd", "cost"])
def test_the_folder_decodes_through_generate_as_plain_generate(folder, offline, llama, llama_head, tmp_path, method):
    from ddd import encode_prompt, save_head

    head = save_head(llama_head, tmp_path / "head")
    ids = torch.tensor([encode_prompt(llama, PROMPTS[1])])
    settings = CHEAP_COSTS if method == "cost" else {}
    out = llama.model.generate(ids, custom_generate=str(folder), trust_remote_code=True, head=str(head),
                               method=method, max_new_tokens=32, return_dict_in_generate=True, **settings)
    assert torch.equal(out.sequences, llama.model.generate(ids, max_new_tokens=32, do_sample=False))
    assert out.trace.method == method and out.trace.summary["tau"] > 1


def test_loading_the_folder_leaves_the_packages_attention_functions_registered(folder, offline, llama, llama_head,
                                                                                tmp_path):
    """transformers' attention registry is one per process: the folder's copy of the engine registers its own."""
    from ddd import save_head

    ids = torch.tensor([[1, 2, 3]])
    llama.model.generate(ids, custom_generate=str(folder), trust_remote_code=True, head=str(save_head(
        llama_head, tmp_path / "head")), method="eagle2", max_new_tokens=4)
    registered = AttentionInterface._global_mapping
    assert registered[TREE_ATTENTION] is tree_attention and registered[EXACT_ATTENTION] is exact_attention
    copies = [name for name in registered if name.startswith("ddd_sdpa_")]
    assert copies and all(registered[name] is not tree_attention for name in copies)


def test_the_folder_is_refused_without_trust_remote_code(folder, offline, llama):
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="trust_remote_code"):
        llama.model.generate(ids, custom_generate=str(folder), trust_remote_code=False, max_new_tokens=2)


def test_the_folder_holds_the_engine_as_the_package_has_it(folder):
    code = folder / "custom_generate"
    modules = engine_modules()
    assert {"hf", "engine", "drafting", "acceptance", "settings"} <= set(modules)
    for name in modules:
        assert (code / f"{name}.py").read_bytes() == (PACKAGE / f"{name}.py").read_bytes(), name
    assert "from .hf import generate_folder as generate" in (code / "generate.py").read_text()
    assert not {"cli", "export_generate", "turns", "whatif"} & set(modules)  # only what decoding imports travels


def test_the_folder_names_its_requirements_and_the_card_every_method_and_setting(folder):
    assert (folder / "custom_generate" / "requirements.txt").read_text().split() == list(REQUIREMENTS)
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\ntags:\n  - custom_generate\n---\n")
    for method in METHODS:
        assert f"| `{method}` |" in card
        for setting in METHOD_DECLARATIONS[method]:
            assert f"`{setting.name}`" in card


def test_the_folders_requirements_are_the_projects_but_for_torchs_pin():
    """A Hub folder cannot ask for the exact torch this project pins; everything else it asks for as pinned."""
    from pathlib import Path

    pinned = Path(__file__).resolve().parents[1] / "requirements.txt"
    lines = {line.split("#")[0].strip() for line in pinned.read_text().splitlines()}
    for requirement in REQUIREMENTS:
        assert requirement in lines or requirement.startswith("torch>="), requirement
    assert "torch==2.13.0" in lines


def test_an_occupied_folder_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as caught:
        main(["export-generate", str(tmp_path)])
    assert caught.value.code == 2 and "is not empty" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_export_writes_into_a_new_folder(tmp_path):
    assert (export_generate(tmp_path / "a" / "b") / "custom_generate" / "generate.py").is_file()
