"""`python app.py --export-space KIND DIR`: the app as a folder to upload as a Hugging Face Space, and nothing
else (docs/deploy.md).

- zerogpu: the Gradio app for a ZeroGPU Space (free accounts): app.py, the modules the app imports (found by
  importing it in a fresh interpreter), the shipped head and examples; PyTorch and Python at versions ZeroGPU
  runs, and `spaces`, whose presence is how the app knows it is on ZeroGPU (explorer.racing.zero_gpu); the
  pairs it offers, downloaded at build time (`preload_from_hub`), and a start-up limit that fits them.
- cpu: the same app for a CPU Space (paid CPU hardware), on the project's own requirements.
- static: no server at all: one index.html that replays the recorded races (components.static_page).

The folder is written beside DIR first and moved into place once complete, so a failed export leaves nothing.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import gradio
import yaml
from packaging.requirements import Requirement

from components.static_page import PLAYER, write_static_page
from ddd.bench.projection import zerogpu_costs
from ddd.models import DEFAULT_HUB_ID

from .models import ZERO_GPU_BYTES
from .space_pairs import ExportError, space_pairs, space_race, start_up_timeout

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("zerogpu", "cpu", "static")
PACKAGES = ("ddd", "components", "explorer")  # the project's own top-level packages
# The shipped head (ddd.catalog.SHIPPED_HEAD), the recorded races, and the player of a page the app saves.
ASSETS = ("assets/head", "assets/examples", "components/static_player")
LFS_BYTES = 10 * 10**6  # the hub takes larger files through LFS / Xet only
# ZeroGPU runs these PyTorch releases and Python 3.10.13 or 3.12.12; the whole suite passes on 2.11.0 / 3.12.
ZEROGPU_TORCHES = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")
ZEROGPU_TORCH = "2.11.0"
ZEROGPU_PYTHON = "3.12"
CPU_PYTHON = "3.11"
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
# Lists the project modules a fresh `import app` loaded, as paths relative to the checkout.
PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import app
root = Path(sys.argv[1]).resolve()
files = set()
for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None)
    if name.split(".")[0] in sys.argv[2].split(",") + ["app"] and path:
        files.add(Path(path).resolve().relative_to(root).as_posix())
print(json.dumps(sorted(files)))
"""


@dataclass(frozen=True)
class Kind:
    name: str
    hardware: str | None  # suggested_hardware of the front matter
    python: str | None
    account: str  # what the hub asks of the account that hosts it, as a sentence


SPACE_KINDS = {
    "zerogpu": Kind("zerogpu", "zero-a10g", ZEROGPU_PYTHON, "A free account can host it (ZeroGPU): one with a "
                    "verified email, older than 30 days, hosting at most 2 ZeroGPU Spaces."),
    "cpu": Kind("cpu", "cpu-basic", CPU_PYTHON, "It needs a paid plan: Gradio Spaces on CPU hardware are paid."),
    "static": Kind("static", None, None, "Any account can host it: static Spaces are free."),
}


def check_target(directory: str | Path) -> Path:
    """DIR as given, if the export may write it: a new folder, or an empty one."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ExportError(f"{path} is a file; give a new or empty folder for the Space.")
    if path.is_dir() and any(path.iterdir()):
        raise ExportError(f"{path} is not empty; give a new or empty folder (the export writes a whole Space "
                          "and nothing else, so it never mixes with other files).")
    return path


def check_kind(kind: str) -> Kind:
    if kind not in SPACE_KINDS:
        raise ExportError(f"Unknown Space kind {kind!r}: choose {', '.join(KINDS[:-1])} or {KINDS[-1]}.")
    return SPACE_KINDS[kind]


@lru_cache(maxsize=4)
def app_files(root: Path = ROOT) -> tuple[str, ...]:
    """app.py and every project module a fresh `import app` loads (package __init__ files included), checked
    against the imports written inside functions, which an import does not run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    out = subprocess.run([sys.executable, "-c", PROBE, str(root), ",".join(PACKAGES)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise ExportError(f"Importing the app to find its modules failed:\n{out.stderr[-3000:]}")
    files = json.loads(out.stdout.strip().splitlines()[-1])
    for name in files:  # every package a module sits in comes along
        parent = Path(name).parent
        while parent != Path("."):
            if (parent / "__init__.py").as_posix() not in files:
                raise ExportError(f"{name} sits in {parent}, whose __init__.py the app did not import.")
            parent = parent.parent
    missing = sorted(_later_imports(root, files) - {_module(f) for f in files})
    if missing:
        raise ExportError(f"The app imports {', '.join(missing)} inside functions, which `import app` does not "
                          "load: this export would leave them out.")
    return tuple(files)


def _module(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _later_imports(root: Path, files: list[str]) -> set[str]:
    """Project modules named by the import statements of `files` (those inside functions too)."""
    found: set[str] = set()
    modules = {_module(f) for f in files}
    for name in files:
        package = _module(name) if name.endswith("__init__.py") else _module(name).rpartition(".")[0]
        for node in ast.walk(ast.parse((root / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import name` names a submodule or an attribute: a submodule only if it exists
                targets = [base] + [f"{base}.{a.name}" for a in node.names
                                    if f"{base}.{a.name}" in modules or _exists(root, f"{base}.{a.name}")]
            else:
                continue
            found.update(t for t in targets if t.split(".")[0] in PACKAGES)
    return found


def _exists(root: Path, module: str) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def front_matter(kind: Kind) -> dict:
    front = dict(title="DDD Explorer", emoji="🌳", colorFrom="indigo", colorTo="green")
    if kind.name == "static":
        front.update(sdk="static", app_file="index.html")
    else:
        # The model every start loads: beside it a ZeroGPU Space loads only the papers' pairs that fit its GPU and
        # that the hub gives it (explorer.models.Models.pin), and a CPU Space offers the default model only.
        front.update(sdk="gradio", sdk_version=gradio.__version__, app_file="app.py", python_version=kind.python,
                     suggested_hardware=kind.hardware, models=[DEFAULT_HUB_ID])
        if kind.name == "zerogpu":  # downloaded at build time, so a start reads them from disk
            pairs = space_pairs()
            front.update(models=[p.target for p in pairs], startup_duration_timeout=start_up_timeout(pairs),
                         preload_from_hub=[entry for p in pairs for entry in p.preload()])
    front.update(pinned=False, license="mit",
                 short_description="Race plain decoding, EAGLE-2 and DDD speculative decoding"
                 if kind.name != "static" else "Recorded races of plain decoding, EAGLE-2 and DDD")
    return front


def requirements(kind: Kind, root: Path = ROOT) -> str:
    """The project's pins; for ZeroGPU with a PyTorch it runs, and `spaces`."""
    lines = [line.strip() for line in (root / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    if kind.name == "cpu":
        return "# The project's requirements (its requirements.txt).\n" + "\n".join(lines) + "\n"
    others = [line for line in lines if not _names(line, "torch")]
    return ("# ZeroGPU runs PyTorch " + ", ".join(ZEROGPU_TORCHES) + "; the project's tests pass on "
            f"{ZEROGPU_TORCH}.\n# `spaces` is ZeroGPU's package: the app races in its GPU processes.\n"
            + "\n".join([f"torch=={ZEROGPU_TORCH}", "spaces", *others]) + "\n")


def _names(line: str, name: str) -> bool:
    return Requirement(line).name.lower() == name


def readme(kind: Kind) -> str:
    front = yaml.safe_dump(front_matter(kind), sort_keys=False, allow_unicode=True)
    body = [
        "# DDD Explorer",
        "",
        "See and measure speculative decoding: one model answers a prompt three ways, plain autoregressive "
        "decoding, EAGLE-2 (a dynamic draft tree) and **Dynamic Depth Decoding** (DDD, "
        "[arXiv 2409.00142](https://arxiv.org/abs/2409.00142): EAGLE-2 whose draft depth is chosen per step "
        "from the draft's own confidence). Every step is recorded: the drafted tree, the depth chosen and why, "
        "the path the target accepted, and where the time went.",
        "",
    ]
    if kind.name == "static":
        body += [
            "This Space is a static page: it replays the races recorded with the app (the same figures and texts "
            "the app shows, computed when the page was exported), step by step, and any race file saved by the "
            "app that you load from your disk. Nothing runs a model here; the page needs no server and no "
            "network and also works opened from disk.",
        ]
    elif kind.name == "zerogpu":
        pairs, race = space_pairs(), space_race()
        body += [
            f"The page opens on a recorded race; **Run the race** races your prompt. {race.words()}",
            "",
            "On ZeroGPU the models load once, at start-up, in float16, and the model menu offers exactly those: "
            "that pair, then each of the others (SmolLM2-135M-Instruct with the draft head in `assets/head`, the quick "
            "one; the papers' 7-8B targets with their EAGLE heads) that fits the "
            f"GPU's {ZERO_GPU_BYTES // 10**9} GB beside the pairs before it. The build downloads them "
            "(`preload_from_hub`), so a start reads them from the Space's disk:",
            "",
            "| pair | disk | start-up (assumed) |",
            "|---|---|---|",
            *(f"| {p.label} | {p.nbytes / 1e9:.1f} GB | {p.start_up_s() / 60:.0f} min |" for p in pairs),
            "",
            f"{sum(p.nbytes for p in pairs) / 1e9:.0f} GB in all, of the Space's 50 GB disk; the start-up limit "
            f"(`startup_duration_timeout`) is {start_up_timeout(pairs)}. The Llama models are gated on the hub: "
            "their pairs need a token that may read them (an `HF_TOKEN` secret), or are left out, and the Space's "
            "log says which pair was left out and why. At start-up the Space also times each pair's races and "
            "measures it for the \"measure this machine\" preset, charged to no visitor; each visitor's race then "
            "asks ZeroGPU for the GPU time this Space's races of that pair took (the projection's, until one was "
            "timed), with a margin.",
        ]
    else:
        body += [
            "The page opens on a recorded race; **Run the race** races your prompt on SmolLM2-135M-Instruct "
            f"(`{front_matter(kind)['models'][0]}`, downloaded once) with the draft head in `assets/head`.",
            "",
            "This Space runs on CPU hardware, which needs a paid plan: choose the CPU hardware in the Space's "
            "settings. It races in int8, the precision in which speculative decoding pays on a small CPU.",
        ]
    body += ["", kind.account]
    return f"---\n{front}---\n\n" + "\n".join(body) + "\n"


def gitattributes(folder: Path) -> str:
    """Every file over LFS_BYTES by path, and the usual weight files by pattern, through LFS."""
    big = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                 if p.is_file() and p.stat().st_size > LFS_BYTES)
    lines = [f"{pattern} filter=lfs diff=lfs merge=lfs -text" for pattern in (*LFS_PATTERNS, *big)]
    return "# Files over 10 MB reach the hub through LFS / Xet only.\n" + "\n".join(lines) + "\n"


def _copy(root: Path, relative: str, folder: Path) -> None:
    source, target = root / relative, folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _write_app(kind: Kind, folder: Path, root: Path) -> None:
    for name in app_files(root.resolve()):
        _copy(root, name, folder)
    for directory in ASSETS:
        for path in sorted((root / directory).iterdir()):
            if path.is_file() and not path.name.startswith("."):
                _copy(root, path.relative_to(root).as_posix(), folder)
    if (root / "LICENSE").is_file():
        _copy(root, "LICENSE", folder)
    (folder / "requirements.txt").write_text(requirements(kind, root))


def export_space(kind: str, directory: str | Path, root: Path = ROOT) -> Path:
    """Write `directory` as a Space of `kind`; returns it."""
    space = check_kind(kind)
    target = check_target(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    work.chmod(0o777 & ~umask)  # a folder as mkdir makes it, not mkdtemp's private one
    try:
        if space.name == "static":
            if not PLAYER.is_dir():
                raise ExportError(f"This copy lacks {PLAYER} (a Space carries only what the app imports): export "
                                  "from the project's checkout.")
            write_static_page(work, sorted((root / "assets" / "examples").glob("*.json")), zerogpu_costs)
        else:
            _write_app(space, work, root)
        (work / "README.md").write_text(readme(space), encoding="utf-8")
        (work / ".gitattributes").write_text(gitattributes(work))
        check_target(target)  # still new or empty
        if target.exists():
            target.rmdir()
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return target


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def export_space_cli(kind: str, directory: str) -> int:
    """The command line's side: prints what was written and how to upload it, or why nothing was."""
    try:
        folder = export_space(kind, directory)
    except ExportError as err:
        print(f"--export-space: {err}", file=sys.stderr)
        return 2
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    print(f"Wrote a {kind} Space to {folder}: {len(files)} files, {folder_bytes(folder) / 1e6:.1f} MB. "
          f"{SPACE_KINDS[kind].account}")
    print(f"Upload it with: hf upload USER/SPACE {folder} . --repo-type space")
    return 0
