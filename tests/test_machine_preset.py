"""A CPU page opens on this machine's own tree settings: measured once per machine, pair and precision at start-up,
kept on disk, and read back on the next start (explorer/machine.py)."""
import json

import pytest

import explorer.machine as machine
from explorer.examples import ExampleShelf
from explorer.models import ModelConfig, Models
from explorer.page import build_page
from explorer.presets import CPU_PRESET, MEASURED, PRESET_FIELDS, PRESETS, widget_values


def cpu_models(target, head, model_dir) -> Models:
    models = Models(ModelConfig(str(model_dir), "tiny-fitted", "cpu", "float32"))
    models.install(target, head)
    return models


@pytest.fixture(scope="module")
def measured(llama, llama_head, tiny_llama_dir, tmp_path_factory):
    """The app's models after a first start on this machine measured its pick (once for the module: seconds)."""
    cache = tmp_path_factory.mktemp("ddd-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DDD_CACHE", str(cache))
        models = cpu_models(llama, llama_head, tiny_llama_dir)
        preset = machine.pick_cpu_preset(models)
        yield models, preset, cache


def test_the_first_start_measures_this_machine_and_keeps_its_pick(measured):
    models, preset, cache = measured
    kept = json.loads(next((cache / "presets").glob("*.json")).read_text())
    assert kept == {"machine": machine.machine(), "preset": preset}
    assert models.measured[models.key(None)] == preset
    assert "measured at start-up" in preset["summary"]


def test_the_next_start_reads_the_pick_without_measuring(measured, llama, llama_head, tiny_llama_dir, monkeypatch):
    monkeypatch.setattr(machine, "auto_budget", lambda *a, **k: pytest.fail("measured again"))
    assert machine.pick_cpu_preset(cpu_models(llama, llama_head, tiny_llama_dir)) == measured[1]


def test_another_cpu_measures_its_own(measured, monkeypatch):
    models = measured[0]
    here, this_cpu = machine.preset_file(models, "float32"), machine.machine()
    monkeypatch.setattr(machine, "machine", lambda: {**this_cpu, "flags": ["avx2", "avx512f", "avx512_vnni"]})
    assert machine.preset_file(models, "float32") != here


def test_the_page_opens_on_the_pick_and_says_why(measured):
    models, preset, _ = measured
    page = build_page(models, ExampleShelf("assets/examples"))
    assert page.ui["preset"].value == MEASURED
    assert "This machine's pick: predicted" in page.ui["preset"].info
    values = widget_values(preset)
    assert {name: page.ui[name].value for name in PRESET_FIELDS} == {name: values[name] for name in PRESET_FIELDS}


def test_a_preset_named_at_start_or_an_unmeasured_machine_opens_on_the_fixed_one(measured, llama, llama_head,
                                                                                   tiny_llama_dir):
    unmeasured = cpu_models(llama, llama_head, tiny_llama_dir)
    assert build_page(unmeasured, ExampleShelf("assets/examples")).ui["preset"].value == CPU_PRESET
    page = build_page(measured[0], ExampleShelf("assets/examples"), preset=CPU_PRESET)
    assert page.ui["preset"].value == CPU_PRESET
    assert page.ui["beam_width"].value == PRESETS[CPU_PRESET]["beam_width"]
