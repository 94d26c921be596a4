"""The server's disk stays bounded however a visitor saves: race files and pages lie once, inside Gradio's cache (it
serves them without a copy), a tab keeps one page, a tab that saves faster than PAGES_PER_MINUTE is told when it may
save again, and a closed tab's page goes as soon as its connection ends, or at the cache's age."""
from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from components.exports import ExportStore
from explorer.examples import ExampleShelf
from explorer.sessions import PAGES_PER_MINUTE, Session, Sessions
from tests.conftest import EXAMPLES_DIR, AppServer
from tests.races import hand_race
from tests.tiny import TREE_MODE

SAVES = 60
DISK_BOUND = 60 * 2**20  # what 60 saves by one visitor may add to the store and Gradio's cache together
CACHE_AGE_S = 20  # the server's DDD_CACHE_AGE_S: a page of a tab gone without a word lasts this long


EXAMPLE = "A short story"


@pytest.fixture
def sessions(tmp_path, monkeypatch):
    """Sessions over a store in tmp_path, whose pages are a few bytes (a real one takes seconds to write)."""
    monkeypatch.setattr("components.exports.saved_page", lambda race, stem: f"<p>{stem}</p>")
    return Sessions(ExportStore(folder=tmp_path))


def test_the_store_lies_inside_gradios_cache_so_gradio_serves_it_without_a_copy():
    from gradio.utils import get_upload_folder, is_in_or_equal

    store = Sessions().exports
    assert is_in_or_equal(str(store._dir()), get_upload_folder())


def test_the_same_race_saved_again_is_the_same_page(sessions, tmp_path):
    session = Session(hand_race())
    first = sessions.export_page(session)
    again = sessions.export_page(session)
    assert again.path == first.path and not again.note
    assert len(list(tmp_path.iterdir())) == 1


def test_a_tab_keeps_only_its_latest_page(sessions, tmp_path):
    session = Session(hand_race())
    sessions.export_page(session)
    session.race = hand_race()
    latest = sessions.export_page(session)
    assert [p.name for p in tmp_path.iterdir()] == [Path(latest.path).name]


def test_a_tab_saving_faster_than_the_bound_gets_a_sentence_not_a_page(sessions, tmp_path):
    session = Session()
    for _ in range(PAGES_PER_MINUTE):
        session.race = hand_race()
        assert sessions.export_page(session).path
    session.race = hand_race()
    refused = sessions.export_page(session)
    assert refused.path is None
    assert refused.note.startswith(f"This tab saved {PAGES_PER_MINUTE} pages in the last minute")
    assert len(list(tmp_path.iterdir())) == 1


def test_a_closed_tabs_page_goes_when_its_connection_ends(sessions, tmp_path):
    session = Session(hand_race())
    sessions.export_page(session, tab="tab-1")
    sessions.closed_tab("tab-2")  # another tab: nothing of this one's goes
    assert len(list(tmp_path.iterdir())) == 1
    sessions.closed_tab("tab-1")
    assert not list(tmp_path.iterdir()) and session.page is None


def test_the_store_keeps_its_bytes_under_its_bound(tmp_path):
    store = ExportStore(max_bytes=3000, folder=tmp_path)
    for i in range(5):
        (tmp_path / f"ddd-race-old-{i}.html").write_bytes(b"x" * 1000)
        time.sleep(0.01)  # distinct modification times: the oldest go first
    store.save(hand_race(), "new")
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 3000
    assert not (tmp_path / "ddd-race-old-0.html").exists()


# -- through the server ---------------------------------------------------------------------------------------------


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def server(tiny_llama_dir, llama_head, tmp_path_factory):
    """The app on the tiny model with its Gradio cache in a folder of its own, a short cache age and two pages a
    minute for a tab."""
    from ddd import save_head

    work = tmp_path_factory.mktemp("disk")
    cache = work / "gradio"
    env = {"GRADIO_TEMP_DIR": str(cache), "DDD_CACHE_AGE_S": str(CACHE_AGE_S), "DDD_PAGES_PER_MINUTE": "2"}
    app = AppServer(tiny_llama_dir, save_head(llama_head, work / "head"), work / "app.log", env=env).wait(300)
    app.cache = cache
    yield app
    app.close()


@pytest.mark.slow
def test_sixty_page_saves_by_one_visitor_add_at_most_60_mb(server):
    """One visitor saves 60 times, opening another example before every fifth save: the same race again is the same
    page, a new race a new page in place of the last, and past two new pages a minute a sentence instead."""
    from gradio_client import Client

    client = Client(server.url, verbose=False, download_files=False)
    names = list(ExampleShelf(EXAMPLES_DIR).files())
    before, started = disk_bytes(server.cache), time.monotonic()
    pages, notes, peak = set(), [], 0
    for i in range(SAVES):
        if i % 5 == 0:
            client.predict(names[i // 5 % len(names)], True, TREE_MODE, api_name="/open_example")
        page, note = client.predict(api_name="/save_page")
        if page["value"]:
            pages.add(page["value"]["path"])
        else:
            notes.append(note["value"])
        peak = max(peak, disk_bytes(server.cache) - before)
    minutes = (time.monotonic() - started) / 60
    print(f"disk: {SAVES} saves in {minutes:.1f} min, {len(pages)} pages written, {len(notes)} told to wait, store and "
          f"Gradio's cache grew by at most {peak / 2**20:.1f} MB")
    assert notes and all("pages in the last minute" in n for n in notes)
    assert len(pages) <= 2 * (minutes + 1)
    assert peak <= DISK_BOUND, f"{peak / 2**20:.1f} MB"


@pytest.mark.slow
def test_a_closed_tabs_page_is_gone_at_once(server):
    """The tab's connection (Gradio's heartbeat) ends: its unload event removes the page."""
    from gradio_client import Client

    client = Client(server.url, verbose=False, download_files=False)
    heartbeat = urllib.request.urlopen(f"{server.url}gradio_api/heartbeat/{client.session_hash}", timeout=10)
    heartbeat.readline()
    client.predict(EXAMPLE, True, TREE_MODE, api_name="/open_example")
    page, _ = client.predict(api_name="/save_page")
    path = Path(page["value"]["path"])
    assert path.exists()
    heartbeat.close()
    deadline = time.monotonic() + 30
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not path.exists()


@pytest.mark.slow
def test_a_page_whose_tab_went_without_a_word_is_gone_at_the_cache_age(server):
    from gradio_client import Client

    client = Client(server.url, verbose=False, download_files=False)
    client.predict(EXAMPLE, True, TREE_MODE, api_name="/open_example")
    page, _ = client.predict(api_name="/save_page")
    path = Path(page["value"]["path"])
    deadline = time.monotonic() + CACHE_AGE_S + 15
    while path.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not path.exists()
