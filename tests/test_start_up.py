"""The app never fails to start: its own pair loads at start-up; a pair that cannot load gives way to the next that
does, with a line in the log and a sentence on the page; when none loads the server starts all the same and the page
says why. The same on a ZeroGPU Space (Models.pin), for `python app.py` and for `--model X`."""
from __future__ import annotations

import pytest
import torch

import app
import explorer.models
from app import EXAMPLES_DIR
from ddd.catalog import ModelPair
from ddd.models import ModelLoadError
from explorer.choosing import menu_items
from explorer.examples import ExampleShelf
from explorer.models import ModelChoice, ModelConfig, Models, model_name
from explorer.page import build_page
from explorer.sessions import Session
from tests.test_zerogpu import spaces  # noqa: F401 - the stand-in `spaces`, as a fixture
from tests.tiny import RACE_SETTINGS, message_of, race_frames

SHORT = [8, *RACE_SETTINGS[1:]]


def start_up_note(page) -> tuple[str, bool]:
    block = next(b for b in page.demo.blocks.values() if getattr(b, "elem_id", None) == "start-up")
    return block.value, block.visible


def test_the_own_pair_loads_at_start_up(tiny_llama_dir):
    models = Models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"))
    assert models.start() is not None
    assert not models.needs_load() and models.start_up_words() == "" and "loaded in float32" in models.describe()


def test_a_pair_that_cannot_load_gives_way_to_the_next_and_the_page_says_why(tiny_qwen_dir, tmp_path, capsys):
    missing = tmp_path / "<b>gone</b>"  # a name that would be markup if it reached the page unescaped
    models = Models(ModelConfig(model=str(missing), head="random", dtype="float32"))
    models.start([ModelChoice(str(tiny_qwen_dir), "random")])
    assert models.config.model == str(tiny_qwen_dir) and not models.needs_load() and not models.unavailable
    log = capsys.readouterr().out
    assert f"Could not load {missing.name} + random: Could not load model" in log
    assert f"Racing {tiny_qwen_dir.name} instead." in log
    words = models.start_up_words()
    assert words.startswith(f"{missing.name} could not be loaded (Could not load model")
    assert words.endswith(f"; racing {tiny_qwen_dir.name} instead.")
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    note, shown = start_up_note(page)
    assert shown and "&lt;b&gt;gone&lt;/b&gt;" in note and "<b>" not in note
    session = Session()
    race_frames(page, "the cat sat", session, SHORT)
    assert {t.model for t in session.race.traces.values()} == {str(tiny_qwen_dir)}


def test_when_nothing_loads_the_page_says_so_and_a_run_answers_in_words(tmp_path):
    models = Models(ModelConfig(model=str(tmp_path / "gone"), head="random", dtype="float32"))
    assert models.start([ModelChoice(str(tmp_path / "also-gone"), "random")]) is None
    assert "gone could not be loaded: Could not load model" in models.unavailable
    assert "also-gone could not be loaded: Could not load model" in models.unavailable
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    note, shown = start_up_note(page)
    assert shown and "No model could be loaded when this server started" in note and "recorded races" in note
    assert "could not be loaded at start-up" in models.describe()
    frames = race_frames(page, "the cat sat", Session(), SHORT)
    text = message_of(frames[-1])
    assert text.count("Could not load the model: ") == 1 and "gone could not be loaded" in text
    assert "Traceback" not in text


def test_a_zero_gpu_space_opens_on_the_next_pair_when_its_own_cannot_load(spaces, tiny_llama_dir, tiny_qwen_dir,
                                                                          tmp_path, monkeypatch, capsys):
    """As the Space does with its catalog: its first pair's files are missing, so it races the next that loads, offers
    that and the one after it, and says why on its page."""
    monkeypatch.setattr(ModelChoice, "check", lambda choice: None)  # paths stand in for hub ids
    monkeypatch.setattr(app, "space_race", lambda: pytest.fail("the command line names the first pair"))
    gone = str(tmp_path / "vicuna-gone")
    monkeypatch.setattr(app, "PAIRS", [ModelPair("tiny llama", str(tiny_llama_dir), "random"),
                                       ModelPair("tiny qwen", str(tiny_qwen_dir), "random")])
    models, others = app.zero_gpu_models(ModelConfig(model=gone, head="random", dtype="float32"))
    assert models.config.model == str(tiny_llama_dir) and others == [ModelChoice(str(tiny_qwen_dir), "random")]
    assert models.pinned_choice(ModelChoice(str(tiny_llama_dir), "random")) and models.pinned_choice(others[0])
    log = capsys.readouterr().out
    assert "Could not load vicuna-gone + random: " in log and f"Racing {tiny_llama_dir.name} instead." in log
    assert "Not offering" not in log
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    note, shown = start_up_note(page)
    assert shown and f"vicuna-gone could not be loaded (Could not load model" in note
    assert f"racing {model_name(str(tiny_llama_dir))} instead." in note
    session = Session()
    race_frames(page, "the cat sat", session, SHORT)
    assert {t.model for t in session.race.traces.values()} == {str(tiny_llama_dir)}
    assert [c.outcome for c in spaces.calls] == ["done"]


def test_a_zero_gpu_space_where_nothing_loads_starts_and_asks_no_gpu_time(spaces, tmp_path, monkeypatch):
    monkeypatch.setattr(app, "PAIRS", [])
    models, others = app.zero_gpu_models(ModelConfig(model=str(tmp_path / "gone"), head="random", dtype="float32"))
    assert others == [] and not models.loaded and models.unavailable
    items = menu_items(models)
    assert items.labels == [] and items.chosen is None and not items.shown
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    assert "No model could be loaded" in start_up_note(page)[0]
    frames = race_frames(page, "the cat sat", Session(), SHORT)
    assert "Could not load the model: gone could not be loaded" in message_of(frames[-1]) and not spaces.calls
    out = page.ui.named(page.menu.choose("anything", "", "", Session()))
    assert "could not load any model at start-up" in message_of(out)


def test_a_model_named_on_the_command_line_that_cannot_load_gives_way_to_the_default(tmp_path, capsys):
    models = app.local_models(ModelConfig(model=str(tmp_path / "no-such-model"), dtype="float32"))
    assert models.config.model is None and models.config.head is None and not models.needs_load()
    assert models.start_up_words().startswith("no-such-model could not be loaded (")
    assert models.start_up_words().endswith("; racing SmolLM2-135M-Instruct instead.")


def test_after_start_up_the_first_race_loads_nothing(tiny_llama_dir):
    """`python app.py` loads and warms its pair before it serves: a first visitor's race waits for no load."""
    models = app.local_models(ModelConfig(model=str(tiny_llama_dir), head="random", dtype="float32"))
    page = build_page(models, ExampleShelf(EXAMPLES_DIR))
    frames = race_frames(page, "the cat sat", Session(), SHORT)
    assert frames and not any("Loading the model" in message_of(f) for f in frames)


@pytest.mark.parametrize("error", [
    ModelLoadError("Could not load model 'meta-llama/Meta-Llama-3-8B-Instruct': You are trying to access a gated "
                   "repo."),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 500.00 MiB"),
    ImportError("LlamaTokenizer requires the SentencePiece library but it was not found in your environment.\nMore."),
], ids=["gated", "memory", "library"])
def test_whatever_a_load_raises_the_next_pair_races_and_the_page_says_why(error, tiny_qwen_dir, monkeypatch):
    real = explorer.models.load_target

    def failing(name, **options):
        if name == "gated-or-big":
            raise error
        return real(name, **options)

    monkeypatch.setattr(explorer.models, "load_target", failing)
    models = Models(ModelConfig(model="gated-or-big", head="random", dtype="float32"))
    models.start([ModelChoice(str(tiny_qwen_dir), "random")])
    first_line = str(error).splitlines()[0]
    assert models.config.model == str(tiny_qwen_dir) and not models.needs_load()
    kind = "" if isinstance(error, ModelLoadError) else f"{type(error).__name__}: "
    assert models.start_up_words() == (f"gated-or-big could not be loaded ({kind}{first_line}); racing "
                                       f"{tiny_qwen_dir.name} instead.")
