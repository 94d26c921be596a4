"""The app as a public Space sees it: several visitors at once, each with their own model choice, and every
refused, stopped or failed Run ending in one clear message and no red "Error" over the page.

One app server serves the whole module (the tiny model, with a hub cache holding a tiny model and a broken one
by hub id, offline); the browser tests drive headless Chromium with tests/test_browser.py's client, the API
tests go through gradio_client and raw HTTP.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from explorer.choosing import OTHER
from explorer.layout import RACE_OUTPUTS
from tests.conftest import AppServer
from tests.test_browser import CHROMIUM, Browser, text_of, type_into, upload
from tests.test_file_checks import freezing_files
from tests.tiny import RACE_SETTINGS, TREE_MODE, hub_snapshot, save_tiny_model

pytestmark = pytest.mark.slow
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")

# Gradio's red status pill: an element of class "error" that reads "Error" (the message box is "error-box").
ERROR_PILLS = ("[...document.querySelectorAll('.error')].filter(e => !e.classList.contains('toast-body') && "
               "e.innerText.trim() === 'Error').length")
SETTINGS_BUTTON = ("[...document.querySelectorAll('button')].find(b => b.innerText.trim().startsWith('Settings'))"
                   "?.click()")
# Gradio's progress overlays: an eta bar, or the "processing |" / "queue: 1/2 |" text of a pending event.
BUSY = "!!document.querySelector('.eta-bar') || /processing \\||queue: \\d/.test(document.body.innerText)"
INFO = "(document.querySelector('.race-info')?.innerText || '')"
MESSAGE = text_of("message")
# What the page says of each file that froze a tab (tests/test_file_checks.py builds them).
FREEZING_MESSAGES = {
    "4096-draft-calls": "more than the run's settings allow",
    "4096-deep-chain": "more than the run's settings allow",
    "40000-nodes": "holds 40,000 nodes",
}


@pytest.fixture(scope="module")
def server(tiny_llama_dir, llama_head, tmp_path_factory):
    """The app on the tiny model, with `tiny-org/tiny-llama` and `tiny-org/broken` (a config without weights)
    in an offline hub cache, so that a visitor can choose either by hub id."""
    from ddd import save_head

    work = tmp_path_factory.mktemp("visitors")
    hf_home = work / "hf"
    save_tiny_model(hub_snapshot(hf_home, "tiny-org/tiny-llama"))
    broken = hub_snapshot(hf_home, "tiny-org/broken")
    broken.mkdir(parents=True)
    shutil.copy(tiny_llama_dir / "config.json", broken / "config.json")
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    app = AppServer(tiny_llama_dir, save_head(llama_head, work / "head"), work / "app.log", env=env).wait()
    yield app
    app.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    b = Browser(tmp_path_factory.mktemp("visitors-profile"))
    yield b
    b.close()


def new_tab(browser: Browser, url: str) -> tuple[str, str]:
    """Another visitor: a new tab (its own Gradio session), made current; returns its target and DevTools session."""
    if browser.session is None:
        browser.open(url)
        target = next(t for t in browser.send("Target.getTargets", session=False)["targetInfos"]
                      if t["type"] == "page")["targetId"]
    else:
        target = browser.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        browser.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                       session=False)["sessionId"]
        browser.send("Page.enable")
        browser.send("Page.navigate", {"url": url})
    browser.wait_for(f"{text_of('ans-ddd')}.trim().length > 0 && !{text_of('ans-ddd')}.includes('no run yet')",
                     90, "the example race")
    return target, browser.session


def focus(browser: Browser, tab: tuple[str, str]) -> None:
    """Back to a visitor's tab, brought to the front (a background tab's timers run slowly)."""
    browser.send("Target.activateTarget", {"targetId": tab[0]}, session=False)
    browser.session = tab[1]


def wait_for(browser: Browser, condition: str, timeout: float, what: str) -> None:
    """browser.wait_for, saying what the message line read when it timed out."""
    try:
        browser.wait_for(condition, timeout, what)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; the message reads {browser.js(MESSAGE)!r}, the info "
                             f"{browser.js(INFO)!r}") from None


def open_settings(browser: Browser) -> None:
    browser.js(SETTINGS_BUTTON)
    browser.wait_for("!!document.querySelector('#model-id textarea, #model-id input')", 20, "the model menu")


def choose(browser: Browser, model: str, head: str, expected: str) -> None:
    """Types a model and head id, presses "Use this model" and waits for the message to say `expected`."""
    type_into(browser, "document.querySelector('#model-id textarea, #model-id input')", model, "the model id")
    type_into(browser, "document.querySelector('#head-id textarea, #head-id input')", head, "the head id")
    browser.js("document.querySelector('#choose').click()")
    try:
        browser.wait_for(f"{MESSAGE}.includes({json.dumps(model)}) && {MESSAGE}.includes({json.dumps(expected)})", 60,
                         f"the answer to choosing {model}")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; the message reads {browser.js(MESSAGE)!r}") from None


def run(browser: Browser, prompt: str) -> None:
    type_into(browser, "document.querySelector('#prompt textarea')", prompt, "the prompt")
    browser.js("document.querySelector('#run').click()")


def settle(browser: Browser, seconds: float = 3.0) -> None:
    """Lets the events that follow a Run (the replay, the model line) finish, so their pills would show."""
    deadline = time.monotonic() + 60
    time.sleep(seconds)
    while time.monotonic() < deadline and browser.js(BUSY):
        time.sleep(0.5)


@needs_chromium
def test_a_visitors_model_choice_is_theirs_alone(server, browser):
    a = new_tab(browser, server.url)
    open_settings(browser)
    for path in ("assets/head", "assets/..", "/etc"):
        choose(browser, path, "", "command line")
    choose(browser, "tiny-org/tiny-llama", "random", "for your races only")
    assert "tiny-org/tiny-llama" in browser.js(text_of("model-info"))
    # Visitor B, meanwhile, races on the app's own model.
    new_tab(browser, server.url)
    run(browser, "the cat sat")
    wait_for(browser, f"{INFO}.includes('the cat sat')", 240, "B's race")
    info = browser.js(INFO)
    assert "tiny-org" not in info and "Could not load" not in browser.js(MESSAGE), info
    # And A's own race runs on A's choice.
    focus(browser, a)
    run(browser, "the cat sat")
    wait_for(browser, f"{INFO}.includes('the cat sat')", 240, "A's race")
    assert "tiny-org/tiny-llama" in browser.js(INFO)
    settle(browser)
    assert browser.js(ERROR_PILLS) == 0


@needs_chromium
def test_refused_stopped_and_failed_runs_leave_no_error_pill(server, browser):
    new_tab(browser, server.url)
    # An empty prompt.
    run(browser, "")
    browser.wait_for(f"{MESSAGE}.includes('empty')", 60, "the empty-prompt message")
    settle(browser)
    assert browser.js(ERROR_PILLS) == 0, browser.js(MESSAGE)
    # Stop mid-race.
    run(browser, "one two three four five six seven")
    browser.wait_for(f"{text_of('cnt-ddd')}.includes('running')", 120, "the race to stream")
    browser.js("document.querySelector('#stop').click()")
    browser.wait_for(f"{MESSAGE}.includes('Stopped')", 60, "the race to stop")
    settle(browser)
    assert browser.js(ERROR_PILLS) == 0, browser.js(MESSAGE)
    # A model that cannot load: one message, and the race shown before comes back (no "Racing…" left over).
    open_settings(browser)
    choose(browser, "tiny-org/broken", "random", "for your races only")
    run(browser, "the cat sat")
    wait_for(browser, f"{MESSAGE}.includes('Could not load')", 120, "the failed load")
    settle(browser)
    assert browser.js(ERROR_PILLS) == 0, browser.js(MESSAGE)
    assert "Racing" not in browser.js(text_of("headline"))
    assert "waiting for its turn" not in browser.js(text_of("ans-plain"))


@needs_chromium
def test_files_that_froze_a_tab_are_refused_with_a_message_in_the_page(server, browser, tmp_path):
    """The run files that once blocked a visitor's tab for minutes: the page says why each is refused, at once,
    with no "Error" pill, and keeps the race it showed."""
    new_tab(browser, server.url)
    settle(browser)  # the first page load's events finish, so their progress text is not taken for the race shown
    shown = browser.js(INFO)
    for name, words in FREEZING_MESSAGES.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(freezing_files()[name]))
        started = time.monotonic()
        upload(browser, path)
        wait_for(browser, f"{MESSAGE}.includes({json.dumps(words)})", 60, f"the refusal of {name}")
        assert time.monotonic() - started < 30, name  # an upload and a server round trip, not a drawing
        settle(browser)
        assert browser.js(ERROR_PILLS) == 0, browser.js(MESSAGE)
        assert browser.js(INFO) == shown


def test_stop_while_queued_over_the_api_says_so_at_once(server):
    """One visitor's long race holds the model; another's waits in the queue, and its Stop ends it at once."""
    from gradio_client import Client

    first, second = Client(server.url, verbose=False), Client(server.url, verbose=False)
    long_race = first.submit("one two three", 200, *RACE_SETTINGS[1:], True, TREE_MODE, api_name="/run")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(long_race.outputs()) < 2:  # until it streams: it holds the turn
        time.sleep(0.2)
    waiting = second.submit("the cat sat", *RACE_SETTINGS, True, TREE_MODE, api_name="/run")
    time.sleep(1.0)  # it waits in the app's line now
    started = time.monotonic()
    answer = second.predict(api_name="/stop")
    assert "will not run" in json.dumps(answer), answer
    final = dict(zip(RACE_OUTPUTS, waiting.result(timeout=30)))
    assert "nothing ran" in json.dumps(final["message"]) and time.monotonic() - started < 10
    first.predict(api_name="/stop")
    long_race.result(timeout=120)


def raw_call(server: AppServer, api: str, data: list) -> tuple[str, str]:
    """One call through Gradio's plain HTTP API (no client): the event it ended with, and its data."""
    import httpx

    base = f"{server.url}gradio_api/call/{api}"
    # JSON escapes every character beyond ASCII, so text no UTF-8 can carry (a lone surrogate) travels too.
    posted = httpx.post(base, content=json.dumps({"data": data}).encode("ascii"),
                        headers={"content-type": "application/json"}, timeout=30)
    assert posted.status_code == 200, (api, posted.status_code, posted.text[:300])
    with httpx.stream("GET", f"{base}/{posted.json()['event_id']}", timeout=60) as reply:
        lines = [line for line in "".join(reply.iter_text()).splitlines() if line.startswith(("event:", "data:"))]
    return lines[-2].removeprefix("event:").strip(), lines[-1].removeprefix("data:").strip()


def test_malformed_raw_http_calls_get_a_message(server):
    file = {"meta": {"_type": "gradio.FileData"}}
    view = [True, TREE_MODE]
    cases = [
        ("run", [], f"/run takes {len(RACE_SETTINGS) + 4} values"), ("run", ["the cat"], "this call sent 1"),
        ("run", ["the cat", *RACE_SETTINGS[:-1], *view], f"this call sent {len(RACE_SETTINGS) + 2}"),
        ("load_file", [], "/load_file takes 4 values"),
        ("load_file", [{"path": "/etc/passwd", **file}, *view], "never reads a path on the server"),
        ("load_file", [{"path": str(server.log), **file}, *view], "never reads a path on the server"),
        ("load_file", [{"path": "https://example.com/race.json", **file}, *view], "or fetches a URL"),
        ("load_file", [{"path": "race.json", "url": "http://127.0.0.1:1/race.json", **file}, *view], "uploaded"),
        ("load_file", ["/etc/passwd", *view], "uploaded to this app"),
        ("load_file", [{"path": "\ud800.json", **file}, *view], "lone surrogate"),
        ("show_step", [], "/show_step takes 4 values"), ("replay", [], "/replay takes 3 values"),
        ("open_example", [], "/open_example takes 4 values"), ("choose_model", ["x"], "this call sent 1"),
    ]
    for api, data, words in cases:
        event, text = raw_call(server, api, data)
        assert event == "error" and words in json.loads(text)["error"], (api, data, text)


# -- memory over a long session ----------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SOAK_VISITORS = 3
SOAK_ROUNDS = int(os.environ.get("DDD_SOAK_ROUNDS", "6"))  # per visitor; the note's full run set 30
SOAK_GROWTH = 40e6  # bytes the last third of the rounds may add to the middle third's peak: allocator noise
SOAK_BOUND = 600e6  # above the server's memory before the first round: a second pair's weights, caches, files


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def soak_round(url: str, clients: list, visitor: int, round_: int, example: str) -> None:
    """One visitor's turn: a race (visitor 0 alternates precisions; visitor 1 alternates pairs, the hub's tiny model
    with a random head and, as a new visitor, the app's own), a recorded file loaded, an example opened, and every
    other round the race saved as a page."""
    from gradio_client import Client, handle_file

    if visitor == 1:
        if round_ % 2:
            clients[1].predict(OTHER, "tiny-org/tiny-llama", "random", api_name="/choose_model")
        else:
            clients[1] = Client(url, verbose=False)
    client = clients[visitor]
    settings = list(RACE_SETTINGS)
    settings[0], settings[4] = 12, ("bfloat16" if visitor == 0 and round_ % 2 else "float32")
    out = dict(zip(RACE_OUTPUTS, client.predict("the cat sat", *settings, True, TREE_MODE, api_name="/run")))
    assert not str(out["message"]).count("error-box"), out["message"]
    loaded = dict(zip(RACE_OUTPUTS, client.predict(handle_file(example), True, TREE_MODE, api_name="/load_file")))
    assert "error-box" not in str(loaded["message"]), loaded["message"]
    client.predict("Maths: step by step, five decoders", True, TREE_MODE, api_name="/open_example")
    if round_ % 2:
        client.predict(api_name="/save_page")


def test_memory_plateaus_over_many_races_from_several_visitors(server):
    """Visitors race, switch precisions and pairs, load files, open examples and save pages, taking turns: after a
    warm-up third of the rounds the server's memory stops growing (SOAK_GROWTH), and stays within SOAK_BOUND of
    where it started."""
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client

    examples = sorted(str(p) for p in (ROOT / "assets" / "examples").glob("*.json"))
    clients = [Client(server.url, verbose=False) for _ in range(SOAK_VISITORS)]
    start = resident_bytes(server.proc.pid)
    readings = []
    with ThreadPoolExecutor(SOAK_VISITORS) as pool:
        for round_ in range(SOAK_ROUNDS):
            list(pool.map(lambda v: soak_round(server.url, clients, v, round_, examples[(round_ + v) % len(examples)]),
                          range(SOAK_VISITORS)))
            readings.append(resident_bytes(server.proc.pid))
    third = max(SOAK_ROUNDS // 3, 1)
    middle, last = max(readings[third:2 * third]), max(readings[2 * third:])
    mb = [round(r / 1e6) for r in (start, *readings)]
    print(f"soak: {SOAK_VISITORS} visitors x {SOAK_ROUNDS} rounds, RSS MB start and per round: {mb}")
    assert last <= middle + SOAK_GROWTH, mb
    assert max(readings) <= start + SOAK_BOUND, mb
