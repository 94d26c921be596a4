"""The Lesson panel: the lesson (components/lesson.py) of the shipped race that holds every method it reads, opened
from the first screen or by a link (?chapter=N); the link of its last chapter (?example=STEM&threshold=T) shows that
example with its prompt and DDD's threshold filled in, ready to race. The panel offers the lesson as one HTML file
to hand out. No model runs; each callback returns {component: value}."""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import gradio as gr
from plotly.offline import get_plotlyjs

from components import RaceFileError
from components.lesson import TITLES, Chapter, Lesson, LessonError, build_lesson, lesson_race
from components.lesson_page import lesson_html
from components.tokens import excerpt, markdown_literal
from ddd.bench.projection import zerogpu_costs
from ddd.settings import THRESHOLD

from .examples import ExampleShelf

MOST_CHOICES = 4  # the choices of a chapter's question, at most (components/lesson.py)
OPEN_LABEL = "New to speculative decoding? Take the lesson: seven short chapters"
HANDOUT_NAME = "ddd-explorer-lesson.html"
CHAPTER_OUTPUTS = ["lesson_text", "lesson_figure", "lesson_ask", "lesson_answer", "lesson_reply", "lesson_try",
                   "lesson_prev", "lesson_next"]
SHOW_OUTPUTS = ["lesson", "lesson_title", "lesson_chapter", "lesson_file", *CHAPTER_OUTPUTS]
LINK_OUTPUTS = [*SHOW_OUTPUTS, "example", "prompt", THRESHOLD.name]


def place(ui: dict) -> None:
    """The button that opens the lesson and its panel, closed (inside an open gr.Blocks, under the intro)."""
    # The way in for a class: a full-width button in the theme's colour, not a thin grey box.
    ui["lesson_open"] = gr.Button(OPEN_LABEL, variant="primary", size="lg", elem_id="lesson-open")
    with gr.Column(visible=False, elem_id="lesson") as ui["lesson"]:
        ui["lesson_title"] = gr.Markdown(elem_id="lesson-title")
        ui["lesson_chapter"] = gr.Radio([(f"{n}. {title}", n) for n, title in enumerate(TITLES, 1)], value=1,
                                        label="Chapter", elem_id="lesson-chapter")
        ui["lesson_text"] = gr.Markdown(elem_id="lesson-text")
        ui["lesson_figure"] = gr.Plot(show_label=False, elem_id="lesson-figure")
        ui["lesson_ask"] = gr.Markdown(elem_id="lesson-ask")
        # A chapter sets its question's choices; these, its choices' indices, are what the API page lists.
        ui["lesson_answer"] = gr.Radio([(f"choice {i + 1}", i) for i in range(MOST_CHOICES)],
                                       label="Your answer (the page then says why)", elem_id="lesson-answer")
        ui["lesson_reply"] = gr.Markdown(elem_id="lesson-reply")
        ui["lesson_try"] = gr.Markdown(visible=False, elem_id="lesson-try")
        with gr.Row():
            ui["lesson_prev"] = gr.Button("‹ Previous chapter", size="sm", elem_id="lesson-prev")
            ui["lesson_next"] = gr.Button("Next chapter ›", size="sm", elem_id="lesson-next")
            ui["lesson_file"] = gr.DownloadButton("Download the lesson (one HTML file)", size="sm",
                                                  elem_id="lesson-file")
            ui["lesson_close"] = gr.Button("Close the lesson", size="sm", elem_id="lesson-close")


def wire(ui: dict, panel: "LessonPanel") -> None:
    ui["lesson_open"].click(panel.open, ui["lesson_chapter"], ui.of(SHOW_OUTPUTS), api_name=False)
    ui["lesson_close"].click(lambda: gr.update(visible=False), None, ui["lesson"], api_name=False, queue=False)
    # Named: a class's load test opens the chapters and answers their questions as thirty students would
    # (tests/test_class.py).
    ui["lesson_chapter"].change(panel.chapter, ui["lesson_chapter"], ui.of(CHAPTER_OUTPUTS),
                                api_name="lesson_chapter")
    ui["lesson_answer"].input(panel.answer, ui.of(["lesson_chapter", "lesson_answer"]), ui["lesson_reply"],
                              api_name="lesson_answer")
    for name, move in (("lesson_prev", -1), ("lesson_next", 1)):
        ui[name].click(lambda n, m=move: panel.move(n, m), ui["lesson_chapter"], ui["lesson_chapter"], api_name=False)


def _handout_file(html: str) -> Path:
    """The hand-out in a temporary folder named by its content: every start of the app with the same lesson serves the
    same file (a folder per start, never removed, would add about 5 MB to the disk at each restart)."""
    digest = hashlib.sha256(html.encode("utf-8")).hexdigest()[:16]
    handout = Path(tempfile.gettempdir()) / f"ddd-lesson-{digest}" / HANDOUT_NAME
    if not handout.is_file():
        handout.parent.mkdir(exist_ok=True)
        part = handout.with_name(f"{HANDOUT_NAME}.{os.getpid()}.part")  # another app may be writing it too
        part.write_text(html, encoding="utf-8")
        part.replace(handout)
    return handout


class LessonPanel:
    """The lesson of the shelf's lesson race, built once (it reads recorded races only): at start-up (`prepare`),
    or on first use."""

    def __init__(self, ui: dict, shelf: ExampleShelf):
        self.ui = ui
        self.shelf = shelf
        self._lock = threading.Lock()
        self._built: tuple[Lesson | None, str, str | None] | None = None  # lesson, why not, hand-out path

    def prepare(self) -> None:
        """Build the lesson now: its GPU costs come from counting a tiny pair's operations (ddd.bench.projection),
        seconds of CPU that should neither keep the first reader waiting nor slow the races going at that time."""
        self._lesson()

    def _lesson(self) -> tuple[Lesson | None, str, str | None]:
        with self._lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    def _build(self) -> tuple[Lesson | None, str, str | None]:
        races = []
        for path in self.shelf.files().values():
            try:
                races.append((path.stem, self.shelf.read(path)))
            except (OSError, RaceFileError):
                continue
        found = lesson_race(races)
        if found is None:
            return None, ("No shipped race holds every decoder the lesson reads (`python app.py "
                          "--record-examples`)."), None
        try:
            lesson = build_lesson(found[1], found[0], zerogpu_costs(found[1].traces["cost"]))
        except LessonError as err:
            return None, str(err), None
        return lesson, "", str(_handout_file(lesson_html(lesson, plotly_js=get_plotlyjs())))

    def open(self, number: Any) -> dict:
        return self._show(number)

    def _show(self, number: Any, note: str = "") -> dict:
        """The panel shown at chapter `number`, with the hand-out file (`note`: a line above the lesson's intro)."""
        ui = self.ui
        lesson, why, handout = self._lesson()
        if lesson is None:
            return {ui["lesson"]: gr.update(visible=True), ui["lesson_title"]: why, ui["lesson_chapter"]: gr.skip(),
                    ui["lesson_file"]: gr.update(visible=False), **{ui[n]: gr.skip() for n in CHAPTER_OUTPUTS}}
        chapter = _chapter(lesson, number)
        note = f"*{note}*\n\n" if note else ""
        return {ui["lesson"]: gr.update(visible=True), ui["lesson_title"]: f"{note}## {lesson.title}\n{lesson.intro}",
                ui["lesson_chapter"]: chapter.number, ui["lesson_file"]: handout, **self._views(chapter)}

    def chapter(self, number: Any) -> dict:
        lesson, _, _ = self._lesson()
        if lesson is None:
            return {self.ui[n]: gr.skip() for n in CHAPTER_OUTPUTS}
        return self._views(_chapter(lesson, number))

    def _views(self, chapter: Chapter) -> dict:
        ui, count = self.ui, len(TITLES)
        question = chapter.question
        link = f"\n\n*Link to this chapter:* [?chapter={chapter.number}](?chapter={chapter.number})"
        try_it = (f"{chapter.try_it.text}\n\n[Open it in the race ›]({chapter.try_it.query()})"
                  if chapter.try_it else "")
        return {
            ui["lesson_text"]: f"### {chapter.number}. {chapter.title}\n\n{chapter.text}{link}",
            ui["lesson_figure"]: chapter.figure,
            ui["lesson_ask"]: f"**Question.** {question.ask}",
            ui["lesson_answer"]: gr.update(choices=[(text, i) for i, text in enumerate(question.choices)], value=None),
            ui["lesson_reply"]: "",
            ui["lesson_try"]: gr.update(value=try_it, visible=bool(try_it)),
            ui["lesson_prev"]: gr.update(interactive=chapter.number > 1),
            ui["lesson_next"]: gr.update(interactive=chapter.number < count),
        }

    def answer(self, number: Any, choice: Any) -> Any:
        """The reply to `choice` (a choice's index) in chapter `number`: right or not, and why."""
        lesson, _, _ = self._lesson()
        if lesson is None or not isinstance(choice, int) or isinstance(choice, bool):
            return gr.skip()
        question = _chapter(lesson, number).question
        return question.reply(choice) if 0 <= choice < len(question.choices) else gr.skip()

    def move(self, number: Any, step: int) -> Any:
        return min(max((_number(number) or 1) + step, 1), len(TITLES))

    def from_link(self, request: gr.Request) -> dict:
        """The page opened by a link: ?chapter=N opens the lesson there; ?example=STEM shows that example with its
        prompt, and &threshold=T sets DDD's threshold."""
        ui = self.ui
        query = dict(request.query_params) if request is not None else {}
        out: dict = {ui[n]: gr.skip() for n in LINK_OUTPUTS}
        if "chapter" in query:
            asked = query["chapter"]
            known = _number(asked) is not None
            out.update(self._show(asked, "" if known else
                                  f"This lesson has no chapter {markdown_literal(excerpt(str(asked), 40))}: its chapters "
                                  f"are 1 to {len(TITLES)}, and here is chapter 1."))
        titles = {path.stem: title for title, path in self.shelf.files().items()}
        stem = query.get("example")
        if stem in titles:
            try:
                out[ui["example"]] = titles[stem]
                out[ui["prompt"]] = self.shelf.read(self.shelf.files()[titles[stem]]).prompt
            except (OSError, RaceFileError):
                pass
        threshold = _float(query.get("threshold"))
        low, high = THRESHOLD.bounds(ui=True)
        if threshold is not None and low <= threshold <= high:
            out[ui[THRESHOLD.name]] = threshold
        return out


def _number(value: Any) -> int | None:
    """A chapter's number from a link, a widget or an API call, 3, 3.0 and "3" alike; None for anything else."""
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return int(number) if number.is_integer() and 1 <= number <= len(TITLES) else None


def _chapter(lesson: Lesson, value: Any) -> Chapter:
    """Chapter `value`, or the first where there is no such chapter (a link says so: from_link)."""
    return lesson.chapters[(_number(value) or 1) - 1]


def _float(value: Any) -> float | None:
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None
