"""The model menu: the papers' pairs on a GPU, only what races at a usable pace on a CPU, any model and head
typed in (a directory or a hub id), and a memory check from the model's config before anything loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ddd.catalog
from ddd.catalog import PAIRS, check_fits, parameter_count
from ddd.models import ModelLoadError
from explorer.choosing import OTHER, MenuItems, menu_items, menu_labels
from explorer.models import ModelChoice
from explorer.sessions import Session
from tests.conftest import make_page
from tests.tiny import hub_snapshot, message_of, race_frames, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]


def test_the_parameter_count_read_from_a_config_matches_the_model(llama):
    model = llama.model
    weights = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n)
    assert parameter_count(model.config) == weights


def test_a_model_too_big_for_the_free_memory_is_refused_before_it_loads(tiny_llama_dir, monkeypatch):
    check_fits(str(tiny_llama_dir), "float32", "cpu")
    monkeypatch.setattr(ddd.catalog, "free_memory", lambda device: 1000)
    with pytest.raises(ModelLoadError, match="needs about .* GiB in float32 on cpu"):
        check_fits(str(tiny_llama_dir), "float32", "cpu")
    check_fits(str(tiny_llama_dir), "float32", "cpu", freed=10**9)  # the loaded model's memory comes back


def test_a_cpu_is_offered_the_default_and_a_gpu_the_papers_pairs_too():
    assert menu_labels("cpu") == [PAIRS[0].label, OTHER]
    assert menu_labels("cuda") == [p.label for p in PAIRS] + [OTHER]
    assert {p.head for p in PAIRS[1:]} == {"yuhuili/EAGLE-Vicuna-7B-v1.3", "yuhuili/EAGLE-LLaMA3-Instruct-8B",
                                           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


def test_off_zero_gpu_the_menu_shows_this_devices_pairs_and_typed_ids(page):
    assert menu_items(page.runner.models) == MenuItems(menu_labels("cpu"), OTHER, True, True)  # "tiny" is typed


def test_the_typed_choice_is_kept_for_this_visitor_only(page):
    models, session = page.runner.models, Session()
    out = page.ui.named(page.menu.choose(OTHER, "tiny-org/not-downloaded", "random", session))
    if "next Run" in message_of(out):  # a hub is reachable here and the config came
        assert session.choice == ModelChoice("tiny-org/not-downloaded", "random")
    else:  # offline: the config could not be fetched, and nothing changes
        assert "Could not" in message_of(out) and session.choice is None
    assert models.loaded and models.config.model == "tiny"  # nothing loaded or unloaded for anyone


def test_a_choice_changes_nothing_for_other_visitors(page):
    """Visitor A picks the default pair: B's race still runs on the app's own model, which stays loaded."""
    models, a, b = page.runner.models, Session(), Session()
    target = models.target
    out = page.ui.named(page.menu.choose(PAIRS[0].label, "", "", a))
    assert "your races only" in message_of(out) and a.choice == ModelChoice(None, None) and b.choice is None
    assert models.target is target and not models.needs_load(None, "float32")
    race_frames(page, "the cat sat", b)
    assert {t.model for t in b.race.traces.values()} == {target.name}
    assert "loads on your first Run" in page.menu.describe(a) and "loaded in float32" in page.menu.describe(b)


@pytest.fixture(scope="module")
def refusing_page(llama, llama_head):
    """One page for the choices refused before anything loads: a refusal changes nothing on it (each test checks)."""
    return make_page(llama, llama_head)


PATH_LIKE = ["assets/head", "assets/..", "assets/.", "./assets", "../main", "/etc/passwd", "~/x", "~root/x",
             "tests/tiny.py", "a/../b", "a/b/c", "a\\b", "owner/.hidden", "owner/name.", "owner/-x", "a--b/c",
             "https://huggingface.co/x", "owner/na me"]


@pytest.mark.parametrize("label, model, words", [
    (OTHER, "", "Type a model"),
    (OTHER, "no such thing at all", "not a hub id"),
    (OTHER, str(ROOT), "not a hub id"),
    (OTHER, "x" * 400, "at most 300"),
    ("a pair that is not offered", "", "no model choice called"),
    (PAIRS[1].label, "", "no model choice called"),  # a GPU pair, on this CPU
    *[(OTHER, path, "command line") for path in PATH_LIKE],
])
def test_a_bad_choice_says_why_and_keeps_the_model(refusing_page, label, model, words):
    page = refusing_page
    before, session = page.runner.models.config, Session()
    out = page.ui.named(page.menu.choose(label, model, "", session))
    assert words in message_of(out) and page.runner.models.config is before and session.choice is None


@pytest.mark.parametrize("head", ["assets/head", "../x", "/tmp", "assets/.."])
def test_a_path_like_head_id_is_refused(refusing_page, head):
    page, session = refusing_page, Session()
    out = page.ui.named(page.menu.choose(OTHER, "tiny-org/tiny-llama", head, session))
    assert "command line" in message_of(out) and session.choice is None


def test_a_typed_id_that_became_a_path_is_refused_at_run_time(page, tmp_path, monkeypatch):
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    session = Session()
    session.choice = ModelChoice("owner/model", None)
    frames = race_frames(page, "the cat sat", session)
    assert "names a path on this server" in message_of(frames[-1]) and session.race is None


def test_the_cache_keeps_pairs_in_use_and_unloads_idle_ones(page):
    models = page.runner.models
    first = models.acquire(None, "float32")
    models.max_loaded = 1
    with pytest.raises(ModelLoadError, match="Other visitors' races are using"):
        models.acquire(ModelChoice(None, None), "float32")  # the one pair is held by a race: never unloaded
    models.release(first)
    assert not models.needs_load(None, "float32")


# A race through hub ids alone, in a fresh interpreter (huggingface_hub reads HF_HOME and HF_HUB_OFFLINE
# once, at import).
RACE_FROM_HUB = """
import json
from explorer.examples import ExampleShelf
from explorer.models import ModelConfig, Models
from explorer.page import build_page
from explorer.sessions import Session
from tests.tiny import race_frames
page = build_page(Models(ModelConfig(dtype="float32")), ExampleShelf("assets/examples"))
session = Session()
page.menu.choose("another model (type its ids below)", "tiny-org/tiny-llama", "tiny-org/tiny-head", session)
race_frames(page, "the cat sat", session)
traces = session.race.traces
print(json.dumps({"methods": list(traces), "texts": len({t.text for t in traces.values()}),
                  "model": traces["ddd"].model, "head": traces["ddd"].head}))
"""


@pytest.mark.slow
def test_a_model_and_head_given_by_hub_id_race_from_the_hub_cache(llama_head, tmp_path):
    from ddd import save_head

    hf_home = tmp_path / "hf"
    save_tiny_model(hub_snapshot(hf_home, "tiny-org/tiny-llama"))
    save_head(llama_head, hub_snapshot(hf_home, "tiny-org/tiny-head"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DDD_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", GRADIO_ANALYTICS_ENABLED="False")
    out = subprocess.run([sys.executable, "-c", RACE_FROM_HUB], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"methods": ["plain", "eagle2", "ddd"], "texts": 1, "model": "tiny-org/tiny-llama",
                      "head": "tiny-org/tiny-head"}
