"""The lesson (components/lesson.py) as one HTML page: the static page's lesson.html, beside its plotly.min.js, and
the app's hand-out, with plotly inside, a single file that opens anywhere without a network.

Figures are kept as Gradio sends them (embed.figure_json) and drawn by Plotly.react when their chapter shows; the
texts are the lesson's Markdown rendered with raw HTML left as text, the choices set as text, and each choice's
reply rendered here, so the page's script composes no text. A chapter is reached by its link, #chapter-N.
"""
from __future__ import annotations

from pathlib import Path

from .embed import figure_json, markdown_html, script_json
from .lesson import Lesson
from .tokens import escape

LESSON_FILE = "lesson.html"
PAGE = Path(__file__).with_name("static_player") / "lesson.html"
CSP = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'none'; base-uri 'none'; form-action 'none'")


def lesson_data(lesson: Lesson, live: str | None = None) -> dict:
    """What the page's script reads: per chapter its HTML, figure and question, with every choice's reply;
    `live`: the app's address, where the last chapter's link goes (None: no link)."""
    chapters = []
    for chapter in lesson.chapters:
        question = chapter.question
        chapters.append({
            "number": chapter.number, "anchor": chapter.anchor, "title": chapter.title,
            "html": markdown_html(chapter.text), "figure": figure_json(chapter.figure),
            "ask": markdown_html(question.ask), "choices": list(question.choices),
            "replies": [markdown_html(question.reply(i)) for i in range(len(question.choices))],
            "tryIt": markdown_html(chapter.try_it.text) if chapter.try_it else "",
            "link": live + chapter.try_it.query() if chapter.try_it and live else "",
        })
    return {"chapters": chapters}


def lesson_html(lesson: Lesson, *, plotly_src: str | None = None, plotly_js: str | None = None,
                live: str | None = None, back: str | None = None) -> str:
    """The page: plotly from the file `plotly_src` beside it, or `plotly_js` inside it (the hand-out);
    `back`: a link to the races (the static page's index.html)."""
    if (plotly_src is None) == (plotly_js is None):
        raise ValueError("give plotly_src or plotly_js")
    plotly = (f'<script src="{escape(plotly_src)}"></script>' if plotly_src is not None
              else "<script>" + plotly_js.replace("</script", "<\\/script") + "</script>")
    parts = {
        "@CSP@": CSP, "@TITLE@": escape(lesson.title.replace("\\", "")), "<!--@INTRO@-->": markdown_html(lesson.intro),
        "<!--@BACK@-->": f'<a class="back" href="{escape(back)}">‹ the recorded races</a>' if back else "",
        "<!--@PLOTLY@-->": plotly, "/*@DATA@*/": script_json(lesson_data(lesson, live)),
    }
    page = PAGE.read_text(encoding="utf-8")
    for mark, value in parts.items():
        assert page.count(mark) == 1, mark
        page = page.replace(mark, value)
    return page
