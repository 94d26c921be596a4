import pytest

from tests.tiny import fit_eagle3_head, fit_head, load_tiny, save_tiny_model


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
