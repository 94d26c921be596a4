"""The named endpoints take what the API page documents, and a route or endpoint that does not exist answers 404 with
a sentence."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from explorer.page import _as_choice


def chapter_shown(page, number) -> str:
    return page.ui.named(page.lesson.chapter(number))["lesson_text"]


@pytest.mark.parametrize("number", [3, 3.0, "3", " 3 "], ids=["int", "float", "text", "spaced"])
def test_chapter_three_however_it_is_written(page, number):
    assert chapter_shown(page, number).startswith("### 3. ")


def test_a_chapter_sent_as_text_is_read_as_the_number_the_api_page_lists(page):
    assert _as_choice(page.ui["lesson_chapter"], "3") == 3
    assert _as_choice(page.ui["lesson_chapter"], "x") == "x"  # left for the radio to refuse, naming its choices


def test_the_answer_lists_its_choices_for_the_api_page(page):
    assert [value for _, value in page.ui["lesson_answer"].choices] == [0, 1, 2, 3]


def test_a_bad_chapter_link_says_so_without_escaped_quotes(page):
    request = SimpleNamespace(query_params={"chapter": "nine'"})
    title = page.ui.named(page.lesson.from_link(request))["lesson_title"]
    assert "This lesson has no chapter" in title and "&#x27;" not in title and "&amp;" not in title


def answer(url: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=b'{"data": []}' if method == "POST" else None,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.mark.slow
@pytest.mark.parametrize("method, path", [("POST", "gradio_api/call/nowhere"), ("POST", "gradio_api/run/nowhere"),
                                          ("POST", "nowhere"), ("GET", "gradio_api/nowhere")],
                         ids=["call", "run", "post", "get"])
def test_an_unknown_route_answers_404_with_a_sentence(app_server, method, path):
    status, body = answer(f"{app_server.url}{path}", method)
    assert status == 404 and body["detail"].startswith("This app has no") and body["detail"].endswith("/?view=api.")


@pytest.mark.slow
def test_lesson_chapter_takes_a_number_or_its_text_over_the_api(app_server):
    from gradio_client import Client

    client = Client(app_server.url, verbose=False)
    for number in (3, 3.0, "3"):
        assert client.predict(number, api_name="/lesson_chapter")[0].startswith("### 3. ")
