"""`python app.py --export-space KIND DIR`: each kind writes a whole Space and nothing else (docs/deploy.md).

Each kind is exported once per module into a temporary folder; the app's imports are checked by importing it in
a fresh interpreter inside the exported folder. The static page is also opened in a browser
(tests/test_static_page.py).
"""
from __future__ import annotations

import base64
import fnmatch
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gradio
import pytest
import yaml
from huggingface_hub import SpaceHardware
from packaging.requirements import Requirement

from app import main
from components import load_race
from components.static_page import figure_json, markdown_html, rounds
from components.views import step_view
from ddd.catalog import PAIRS
from explorer.deploy import ZEROGPU_TORCHES, ExportError, export_space, space_pairs, space_race
from explorer.gputime import XLARGE_BYTES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "assets" / "examples").glob("*.json"))
LFS_BYTES = 10 * 10**6
STATIC_BYTES = 15 * 10**6
SERVED = {"app.py", "ddd", "components", "explorer", "assets", "README.md", "requirements.txt", ".gitattributes",
          "LICENSE"}
# Lists every project module `import app` loaded and where it came from.
IMPORT_APP = """
import json, sys
import app
print(json.dumps({n: m.__file__ for n, m in sys.modules.items()
                  if n.split(".")[0] in ("app", "ddd", "components", "explorer") and getattr(m, "__file__", None)}))
"""


@pytest.fixture(scope="module")
def spaces(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("spaces")
    return {kind: export_space(kind, out / kind) for kind in ("zerogpu", "cpu", "static")}


def front_matter(folder: Path) -> dict:
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def pins(path: Path) -> dict[str, Requirement]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return {Requirement(line).name.lower(): Requirement(line) for line in lines}


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def lfs_patterns(folder: Path) -> list[str]:
    path = folder / ".gitattributes"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split()[0] for line in lines if "filter=lfs" in line.split()[1:] and not line.startswith("#")]


def routed(name: str, patterns: list[str]) -> bool:
    """Whether git would send `name` through LFS: a pattern without '/' matches the file name at any depth."""
    return any(fnmatch.fnmatch(name if "/" in p else name.rsplit("/", 1)[-1], p.lstrip("/")) for p in patterns)


# ---------------------------------------------------------------------------------------------------------
# Every kind
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["zerogpu", "cpu", "static"])
def test_every_file_over_10_mb_goes_through_lfs(spaces, kind):
    folder = spaces[kind]
    patterns = lfs_patterns(folder)
    big = [name for name in files_of(folder) if (folder / name).stat().st_size > LFS_BYTES]
    assert [name for name in big if not routed(name, patterns)] == []
    if kind != "static":
        assert "assets/head/model.safetensors" in big


@pytest.mark.parametrize("kind", ["zerogpu", "cpu", "static"])
def test_the_folder_holds_the_space_and_nothing_else(spaces, kind):
    names = files_of(spaces[kind])
    assert not [n for n in names if n.split("/")[0] in {"tests", "training", "docs", "scripts", "runs", "data", "out",
                                                         ".venv", ".git"}]
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyi")) or ".partial" in n]
    assert not [n for n in names if n.startswith("ddd/train/")]
    if kind == "static":
        assert names == [".gitattributes", "README.md", "index.html", "lesson.html", "plotly.min.js"]
        return
    assert {n for n in names if n.startswith("components/static_player/")} == {
        f"components/static_player/{name}" for name in ("player.css", "player.js")}  # "Save as a page"
    assert {n.split("/")[0] for n in names} <= SERVED
    assert {n.split("/")[1] for n in names if n.startswith("assets/")} == {"head", "examples"}
    assert [n for n in names if n.startswith("assets/examples/")] == [f"assets/examples/{p.name}" for p in EXAMPLES]
    # Of the measuring tools, the budget tool that the "measure this machine" preset runs.
    assert "ddd/bench/budget.py" in names and "ddd/bench/__main__.py" not in names


# ---------------------------------------------------------------------------------------------------------
# The Gradio kinds
# ---------------------------------------------------------------------------------------------------------

def test_zerogpu_front_matter_and_pins(spaces):
    folder = spaces["zerogpu"]
    front = front_matter(folder)
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py"
    assert front["sdk_version"] == gradio.__version__
    assert front["python_version"] in ("3.12", "3.10")  # ZeroGPU runs Python 3.12.12 or 3.10.13
    assert front["suggested_hardware"] == "zero-a10g" and front["suggested_hardware"] in {h.value for h in SpaceHardware}
    assert len(front["short_description"]) <= 60
    required = pins(folder / "requirements.txt")
    torch = str(required["torch"].specifier)
    assert torch.startswith("==") and torch[2:] in ZEROGPU_TORCHES
    assert "spaces" in required
    project = pins(ROOT / "requirements.txt")
    assert {n: str(r) for n, r in required.items() if n not in ("torch", "spaces")} == {
        n: str(r) for n, r in project.items() if n != "torch"}


def test_zerogpu_downloads_the_pairs_it_offers_at_build_time_and_may_start_them(spaces):
    """The pairs Models.pin would keep within the GPU's 48 GB, the one the Space races first first: preloaded (the
    Llama repositories without their second copy of the weights), within the Space's 50 GB disk, with a start-up limit
    that fits them."""
    front = front_matter(spaces["zerogpu"])
    pairs = space_pairs()
    assert front["models"][0] == space_race().projection.pair.model and front["models"] == [p.target for p in pairs]
    assert [p.label for p in pairs] == [p.label for p in (PAIRS[1], PAIRS[0], PAIRS[2])]  # Llama-3.1 does not fit
    preloaded = {entry.split()[0]: entry.split()[1:] for entry in front["preload_from_hub"]}
    assert set(preloaded) == {p.target for p in pairs} | {p.head for p in pairs if p.head}
    assert all("original/" not in " ".join(files) for files in preloaded.values())
    assert sum(p.nbytes for p in pairs) < min(50e9, XLARGE_BYTES)  # the disk, and ZeroGPU's 'large' size
    minutes = int(front["startup_duration_timeout"].removesuffix("m"))
    assert minutes >= 30 and minutes * 60 >= sum(p.start_up_s() for p in pairs)
    body = (spaces["zerogpu"] / "README.md").read_text()
    assert all(f"| {p.label} | {p.nbytes / 1e9:.1f} GB |" in body for p in pairs) and "older than 30 days" in body
    assert space_race().words() in body  # why that pair, and its race's time as ZeroGPU counts it


def test_cpu_front_matter_and_pins(spaces):
    folder = spaces["cpu"]
    front = front_matter(folder)
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py" and front["sdk_version"] == gradio.__version__
    assert front["python_version"] == "3.11"
    assert front["suggested_hardware"] in {h.value for h in SpaceHardware}
    assert {n: str(r) for n, r in pins(folder / "requirements.txt").items()} == {
        n: str(r) for n, r in pins(ROOT / "requirements.txt").items()}
    assert "paid plan" in (folder / "README.md").read_text()


@pytest.mark.slow
def test_every_module_the_app_imports_is_in_the_folder_and_nothing_more(spaces, tmp_path):
    """`import app` in each exported folder, with the project's venv and no PYTHONPATH: it loads every module
    from the folder itself, and every module the folder carries is one the app loads. (In a copy: Gradio writes
    a .pyi beside the custom components as they load.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    copies = {kind: Path(shutil.copytree(spaces[kind], tmp_path / kind)) for kind in ("zerogpu", "cpu")}
    runs = {kind: subprocess.Popen([sys.executable, "-c", IMPORT_APP], cwd=folder, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) for kind, folder in copies.items()}
    for kind, run in runs.items():
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
        loaded = json.loads(stdout.strip().splitlines()[-1])
        folder = copies[kind].resolve()
        outside = {n: f for n, f in loaded.items() if not Path(f).resolve().is_relative_to(folder)}
        assert outside == {}
        carried = {n for n in files_of(folder) if n.endswith(".py")}
        assert carried == {Path(f).resolve().relative_to(folder).as_posix() for f in loaded.values()}


# ---------------------------------------------------------------------------------------------------------
# The static page
# ---------------------------------------------------------------------------------------------------------

def embedded(folder: Path) -> dict:
    html = (folder / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="races">(.*?)</script>', html, re.S)
    data = json.loads(found.group(1))
    for race in data["races"]:
        race["bundle"] = json.loads(gzip.decompress(base64.b64decode(race["data"])))
    return data


def test_static_front_matter_size_and_scripts(spaces):
    folder = spaces["static"]
    front = front_matter(folder)
    assert front["sdk"] == "static" and front["app_file"] == "index.html"
    assert "python_version" not in front and "sdk_version" not in front
    assert sum((folder / n).stat().st_size for n in files_of(folder)) < STATIC_BYTES
    html = (folder / "index.html").read_text(encoding="utf-8")
    sources = re.findall(r"<script\b[^>]*\bsrc\s*=\s*[\"']?([^\"'\s>]+)", html, re.I)
    assert sources == ["plotly.min.js"]
    assert not re.search(r"<(?:script|link|img|iframe)\b[^>]*(?:src|href)\s*=\s*[\"']?(?:https?:)?//", html, re.I)
    assert (folder / "plotly.min.js").stat().st_size > 1_000_000


def test_the_static_page_holds_every_example_with_the_apps_own_views(spaces):
    data = embedded(spaces["static"])
    races = {path.stem: load_race(path) for path in EXAMPLES}
    assert [r["key"] for r in data["races"]] == list(races)
    for entry in data["races"]:
        race, bundle = races[entry["key"]], entry["bundle"]
        assert entry["title"] == race.title and bundle["rounds"] == rounds(race)
        assert all(len(column) == rounds(race) for column in bundle["steps"].values())
    # One step, view by view: the same figures and HTML the app's callbacks hand to its components.
    entry = data["races"][0]
    race, bundle = races[entry["key"]], entry["bundle"]
    view = step_view(race, 3)
    shown = {key: bundle["pool"][bundle["steps"][key][3]] for key in bundle["steps"]}
    assert shown["tree_ddd"] == figure_json(view.trees["ddd"]) and shown["tree_eagle2"] == figure_json(view.trees["eagle2"])
    assert shown["depth"] == figure_json(view.depth)
    assert shown["txt_ddd"] == view.texts["ddd"] and shown["narration"] == markdown_html(view.narration)


# ---------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------

def test_a_non_empty_folder_is_refused_and_left_as_it_was(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not empty"):
        export_space("cpu", folder)
    assert files_of(folder) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no half-written folder beside it


def test_an_empty_folder_is_filled(spaces, tmp_path):
    export_space("cpu", tmp_path)
    assert files_of(tmp_path) == files_of(spaces["cpu"])


def test_the_command_line_refuses_with_a_message(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for args, words in ((["docker", str(tmp_path / "new")], "Unknown Space kind 'docker': choose zerogpu, cpu or static"),
                        (["static", str(tmp_path / "full")], "is not empty"),
                        (["cpu", str(tmp_path / "full" / "x")], "is a file")):
        with pytest.raises(SystemExit) as stopped:
            main(["--export-space", *args])
        assert stopped.value.code == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
