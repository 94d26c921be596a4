"""The Python packages scripts/gpu_check.sh carries to a GPU machine that has no package index, and their
installation there. Run by that script; by hand:

    python scripts/gpu_packages.py select ALL_WHEELS_DIR CARRIED_DIR   # here: which downloaded wheels travel
    python scripts/gpu_packages.py install CARRIED_DIR SITE_DIR        # there: install what the machine lacks

`select` keeps every wheel of the downloaded closure except big ones the GPU image already holds in a version
that fits (as seen on such an image) and those nothing here uses offline. `install`
starts from requirements.txt and requirements-dev.txt (never torch: the machine's own is used, whatever its
version; nor gradio: the check races without the page) and installs a carried wheel only where a requirement
is not met by what is installed, following the requirements of what it installs. Wheels go into SITE_DIR
(put it first on PYTHONPATH): the machine's own environment is left as it is. Nothing is fetched.
"""
from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# The machine's own, whatever the version (torch), or not needed by the check (gradio: no page is built).
NOT_INSTALLED = {"torch": "the machine's own torch is used", "gradio": "the check builds no page"}
# Big wheels the GPU image holds in a version that fits (numpy 2.5.2, tokenizers 0.23.2, safetensors 0.8.0 were
# read there; pydantic, pyyaml and pygments come with its typer and rich), and wheels used only for downloads or
# optional features that the check never reaches offline (hf-xet: hub downloads; kernels: hub kernels).
LEFT_BEHIND = {"numpy", "tokenizers", "safetensors", "pydantic", "pydantic-core", "pyyaml", "pygments", "hf-xet",
               "kernels", "tomlkit"}
NOT_NEEDED_OFFLINE = {"hf-xet", "kernels"}


def wheel_name(path: Path) -> tuple[str, Version]:
    name, version = path.name.split("-")[:2]
    return canonicalize_name(name), Version(version)


def wheel_requirements(path: Path) -> list[Requirement]:
    """A wheel's own requirements, without its extras' (read from its METADATA)."""
    with zipfile.ZipFile(path) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        lines = wheel.read(meta).decode("utf-8").splitlines()
    out = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if not (requirement.marker and "extra" in str(requirement.marker)):
                out.append(requirement)
    return out


def project_requirements() -> list[Requirement]:
    out = []
    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                try:
                    out.append(Requirement(line))
                except InvalidRequirement:
                    print(f"  (skipping {line!r} in {name}: not a requirement)")
    return out


def installed_version(name: str) -> Version | None:
    try:
        return Version(importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return None


def select(all_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(all_dir.glob("*.whl")):
        name, _ = wheel_name(wheel)
        if name in LEFT_BEHIND:
            print(f"  left behind: {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")
        else:
            shutil.copy2(wheel, out_dir / wheel.name)
    total = sum(w.stat().st_size for w in out_dir.glob("*.whl"))
    print(f"  carried: {len(list(out_dir.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB")


def plan(carried_dir: Path) -> tuple[list[Path], list[str]]:
    """The carried wheels to install, and the requirements nothing here meets."""
    carried = {}
    for wheel in carried_dir.glob("*.whl"):
        name, version = wheel_name(wheel)
        carried[name] = (version, wheel)
    chosen: dict[str, Path] = {}
    problems: list[str] = []
    seen: set[str] = set()
    todo = [(r, "this project") for r in project_requirements()]
    while todo:
        requirement, wanted_by = todo.pop(0)
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        if name in NOT_INSTALLED:
            print(f"  {requirement}: not installed ({NOT_INSTALLED[name]}); here: {installed_version(name)}")
            continue
        key = f"{name} {requirement.specifier}"
        if key in seen:
            continue
        seen.add(key)
        have = carried[name][0] if name in chosen else installed_version(name)
        if have is not None and requirement.specifier.contains(have, prereleases=True):
            continue
        fits = name in carried and requirement.specifier.contains(carried[name][0], prereleases=True)
        if fits and name not in chosen:
            chosen[name] = carried[name][1]
            print(f"  {name}: installed {have or 'none'}, {wanted_by} needs {requirement.specifier or 'it'}: "
                  f"installing the carried {carried[name][0]}")
            todo += [(r, name) for r in wheel_requirements(carried[name][1])]
        elif name not in NOT_NEEDED_OFFLINE:
            problems.append(f"{requirement} (for {wanted_by}): here {have or 'none'}, carried "
                            f"{carried[name][0] if name in carried else 'none'}")
    return list(chosen.values()), problems


def install(carried_dir: Path, site: Path) -> int:
    wheels, problems = plan(carried_dir)
    site.mkdir(parents=True, exist_ok=True)
    if wheels:
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)]
        if subprocess.run(command).returncode != 0:
            print("  pip could not install them: unpacking the wheels instead")
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(site)
    else:
        print("  every requirement is met by what is installed: nothing to install")
    for problem in problems:
        print(f"  NOT MET: {problem}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("select", "install"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "select":
        select(Path(argv[1]), Path(argv[2]))
        return 0
    return install(Path(argv[1]), Path(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
