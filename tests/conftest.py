import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from explorer.presets import CPU_PRESET
from tests.tiny import fit_eagle3_head, fit_head, load_tiny, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "assets" / "examples"


def pytest_configure(config):
    """Under `pytest -n N` (pytest-xdist; README: tests) each worker decodes on one core: the tiny models' operations
    are too small to share out, and workers that each spin a thread per core slow one another down. The servers and
    environments a worker starts inherit it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


# The files that take a worker more than a minute in the test command (its --durations listing, AVX2, 2 workers),
# longest first. pytest-xdist hands out whole files in collection order (pytest.ini: --no-loadscope-reorder), so these
# start first and the short files even out both workers at the end, where a long file would leave one worker alone.
LONGEST_FIRST = ("test_space.py", "test_sampling.py", "test_visitors.py", "test_class.py", "test_hf_generate.py",
                 "test_static_page.py", "test_strangers.py", "test_default_model.py",
                 "test_lesson_browser.py", "test_memory.py", "test_package.py", "test_disk.py", "test_zerogpu.py",
                 "test_zerogpu_browser.py", "test_safety.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2", seed=1)


@pytest.fixture(scope="session")
def llama(tiny_llama_dir):
    return load_tiny(tiny_llama_dir)


@pytest.fixture(scope="session")
def qwen(tiny_qwen_dir):
    return load_tiny(tiny_qwen_dir)


@pytest.fixture(scope="session")
def llama_head(llama):
    return fit_head(llama)


@pytest.fixture(scope="session")
def qwen_head(qwen):
    return fit_head(qwen, seed=1)


@pytest.fixture(scope="session")
def llama_eagle3_head(llama):
    return fit_eagle3_head(llama)


def make_page(llama, llama_head):
    """The app's page over the tiny model and its fitted head, already loaded in float32."""
    from explorer.examples import ExampleShelf
    from explorer.models import ModelConfig, Models
    from explorer.page import build_page

    models = Models(ModelConfig(model="tiny", head="tiny"))
    models.install(llama, llama_head)
    return build_page(models, ExampleShelf(EXAMPLES_DIR))


@pytest.fixture
def page(llama, llama_head):
    """A page of the test's own (make_page)."""
    return make_page(llama, llama_head)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """`python app.py` on the tiny model (or, given None, the default pair), on 127.0.0.1 and a free port."""

    def __init__(self, model_dir: Path | None, head_dir: Path | None, log: Path, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = log
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py"), *(["--model", str(model_dir), "--head", str(head_dir)]
                                                     if model_dir else []), "--preset", CPU_PRESET, "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 120) -> "AppServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"the app did not start within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def app_server(tiny_llama_dir, llama_head, tmp_path_factory):
    """The app as a server on the tiny model and its fitted head, showing the shipped examples: one for the whole
    session (every visitor of it is isolated; a start costs tens of seconds on a small machine)."""
    from ddd import save_head

    work = tmp_path_factory.mktemp("app")
    server = AppServer(tiny_llama_dir, save_head(llama_head, work / "head"), work / "app.log").wait()
    yield server
    server.close()
