"""Values as a page embeds them: Markdown as the app shows it, figures as Gradio sends them, JSON inside <script>.
Shared by the static page (components/static_page.py) and the lesson page (components/lesson_page.py)."""
from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go
from markdown_it import MarkdownIt


def markdown_html(text: str) -> str:
    """Markdown as the app's gr.Markdown shows it; raw HTML stays text (the views escape what they quote)."""
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def figure_json(fig: go.Figure) -> str:
    """The figure as Gradio sends it to the browser (gr.Plot: `fig.to_json()`), compact."""
    return json.dumps(json.loads(fig.to_json()), separators=(",", ":"), allow_nan=False)


def script_json(value: Any) -> str:
    """JSON to sit inside a <script> element: '<', '>' and '&' as \\u escapes, so nothing in it can close the
    element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# Every page's head: a Content-Security-Policy that lets nothing leave the page, and its title (@CSP@, @TITLE@).
PAGE_HEAD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<!-- Nothing leaves the page: scripts and styles come from this folder or this file, nothing is fetched. -->
<meta http-equiv="Content-Security-Policy" content="@CSP@">
<title>@TITLE@</title>
"""
