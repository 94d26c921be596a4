"""The lesson (components/lesson.py) as one HTML page: the static page's lesson.html, beside its plotly.min.js, and
the app's hand-out, with plotly inside, a single file that opens anywhere without a network.

Figures are kept as Gradio sends them (embed.figure_json) and drawn by Plotly.react when their chapter shows; the
texts are the lesson's Markdown rendered with raw HTML left as text, the choices set as text, and each choice's
reply rendered here, so the page's script composes no text. A chapter is reached by its link, #chapter-N.
"""
from __future__ import annotations

from .embed import PAGE_HEAD, figure_json, markdown_html, script_json
from .lesson import GpuCosts, Lesson, build_lesson, lesson_race
from .race import Race
from .tokens import escape

LESSON_FILE = "lesson.html"
# The static page's way in, under its intro.
LESSON_LINK = (f'<p class="lesson-link"><a href="{LESSON_FILE}" id="lesson-link">New to speculative decoding? The '
               'lesson: seven short chapters on one of these races ›</a></p>')
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
            "answer": markdown_html(question.revealed()),
            "tryIt": markdown_html(chapter.try_it.text) if chapter.try_it else "",
            "link": live + chapter.try_it.query() if chapter.try_it and live else "",
        })
    # What a link to no chapter opens with; the script only puts the link's name (as text) where NAME stands.
    unknown = ["This lesson has no chapter called \u201c", "NAME", "\u201d: here is chapter 1."]
    return {"chapters": chapters, "unknown": unknown, "words": WORDS, "presentPx": PRESENT_TYPE_PX}


# A presented figure's smallest type, in CSS px: what the back of a room reads on a 1920x1080 projector.
PRESENT_TYPE_PX = 18
BUTTONS = {"present": "Present on a projector (full screen)", "print": "Print the hand-out (one chapter a page)"}
# Every word the page's script shows besides the chapters'.
WORDS = {
    "tryLink": "Open it in the race \u203a",
    "presenting": "Presenting: \u2192 / \u2190 next and previous chapter \u00b7 Space shows the answer \u00b7 Esc leaves",
    "answers": "Answers",
    "question": "Question",
}


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
        "@PRESENT@": escape(BUTTONS["present"]), "@PRINT@": escape(BUTTONS["print"]),
    }
    page = PAGE
    for mark, value in parts.items():
        assert page.count(mark) == 1, mark
        page = page.replace(mark, value)
    return page


def static_lesson(races: list[tuple[str, Race]], plotly_src: str, gpu: GpuCosts) -> str | None:
    """lesson.html for the static page, beside its index.html and plotly (`plotly_src`): the lesson of the first of
    `races` (key, race) that holds every method the lesson reads, priced on a GPU by `gpu`; None without one."""
    found = lesson_race(races)
    if found is None:
        return None
    lesson = build_lesson(found[1], found[0], gpu(found[1].traces["cost"]), whatif=False)
    return lesson_html(lesson, plotly_src=plotly_src, back="index.html")


# The page, here rather than beside the static player: an exported app Space carries the modules the app imports and
# nothing else (explorer/deploy.py), and its hand-out is made from this.
PAGE = PAGE_HEAD + """<style>
body { margin: 0; background: #f8fafc; color: #0f172a; font-family: Inter, system-ui, -apple-system, "Segoe UI",
  Roboto, sans-serif; font-size: 15px; line-height: 1.55; }
main { max-width: 1100px; margin: 0 auto; padding: 16px 20px 40px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 19px; margin: 8px 0; }
.back { font-size: 13px; }
#intro { color: #334155; }
nav ol { display: flex; flex-wrap: wrap; gap: 6px; list-style: none; padding: 0; margin: 10px 0; }
nav a { display: block; padding: 4px 10px; border-radius: 14px; background: #f1f5f9; color: #0f172a;
  text-decoration: none; font-size: 13px; border: 1px solid #e2e8f0; }
nav a[aria-current="true"] { background: #7c3aed; color: #fff; border-color: #7c3aed; }
.chapter { background: #fff; border: 1px solid #e2e8f0; border-radius: 8px; padding: 6px 16px 14px; }
.figure { margin: 8px 0; min-height: 200px; }
.question { border-left: 4px solid #7c3aed; background: #f5f3ff; padding: 6px 12px; border-radius: 6px; }
.question p { margin: 6px 0; }
.question label { display: block; margin: 4px 0; cursor: pointer; }
.reply { margin-top: 8px; border-left: 4px solid #16a34a; background: #f0fdf4; padding: 4px 10px; border-radius: 4px; }
.reply[hidden] { display: none; }
.try { margin-top: 12px; border-left: 4px solid #f59e0b; background: #fffbeb; padding: 4px 10px; border-radius: 4px; }
.steps { display: flex; justify-content: space-between; margin-top: 12px; font-size: 14px; }
@media (max-width: 600px) { main { padding: 10px; } .chapter { padding: 4px 10px 10px; }
  .js-plotly-plot .modebar-container { display: none !important; } }
.tools { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.tools button { font: inherit; font-size: 14px; padding: 6px 14px; border-radius: 6px; border: 1px solid #6d28d9;
  background: #6d28d9; color: #fff; cursor: pointer; }
.tools button.plain { background: #fff; color: #5b21b6; }
#presenter-answer, #presenter-hint, #print-view { display: none; }
/* Presenting: one chapter a screen in large type, its figure first, the answer shown on a key press. */
body.presenting { font-size: 26px; background: #fff; }
body.presenting main { max-width: none; padding: 12px 32px; }
body.presenting .back, body.presenting h1, body.presenting #intro, body.presenting nav, body.presenting .tools,
body.presenting .steps, body.presenting #question-reply, body.presenting #try-it, body.presenting #link-note { display: none; }
body.presenting .chapter { display: grid; grid-template-columns: minmax(0, 57fr) minmax(0, 43fr);
  grid-template-rows: auto minmax(0, 1fr) auto; gap: 0 32px; height: calc(100vh - 64px); border: none; padding: 0; }
body.presenting #chapter-title { grid-column: 1 / -1; font-size: 40px; margin: 4px 0 8px; }
body.presenting #chapter-figure-slot { grid-column: 1; grid-row: 2; min-height: 0; }
body.presenting #side { grid-column: 2; grid-row: 2 / span 2; overflow-y: auto; font-size: 22px; line-height: 1.45; }
body.presenting .question { font-size: 24px; }
body.presenting .question input { width: 22px; height: 22px; }
/* The answer takes room from the figure, under it: in the text's column it pushed the chapter's first lines off the
   screen. */
body.presenting #presenter-answer:not([hidden]) { display: block; grid-column: 1; grid-row: 3; margin-top: 10px;
  font-size: 22px; line-height: 1.45; border-left: 6px solid #16a34a; background: #f0fdf4; padding: 6px 16px;
  border-radius: 6px; }
body.presenting #presenter-hint { display: block; position: fixed; bottom: 0; left: 0; right: 0; font-size: 15px;
  color: #334155; background: #f1f5f9; padding: 4px 16px; }
/* The hand-out on paper: every chapter on a page of its own, its figure drawn for print, the answers last. */
@page { size: A4; margin: 12mm; }
@media print {
  body { background: #fff; font-size: 10.5pt; line-height: 1.4; }
  main { display: none; }
  #print-view { display: block; }
  .print-chapter { break-after: page; }
  .print-chapter:last-child { break-after: auto; }
  .print-chapter h2 { font-size: 16pt; margin: 0 0 6px; }
  .print-answers h3 { font-size: 11pt; margin: 8px 0 2px; }
  /* The seven answers share one page: a paragraph's usual em of space above and below ran them onto a second. */
  .print-answers p { margin: 0 0 4px; }
  .print-figure { break-inside: avoid; }
  .print-choices { margin: 4px 0 0 18px; }
}
</style>
</head>
<body>
<main>
<!--@BACK@-->
<h1 id="title"></h1>
<div id="intro"><!--@INTRO@--></div>
<nav aria-label="chapters"><ol id="chapters"></ol></nav>
<div class="tools"><button type="button" id="present">@PRESENT@</button>
<button type="button" id="print" class="plain">@PRINT@</button></div>
<article class="chapter" id="chapter">
  <p id="link-note" role="status" hidden></p>
  <h2 id="chapter-title"></h2>
  <div id="chapter-figure-slot"></div>
  <div id="side">
  <div id="chapter-text"></div>
  <div id="chapter-figure" class="figure"></div>
  <form class="question" id="question">
    <div id="question-ask"></div>
    <div id="question-choices"></div>
    <div id="question-reply" class="reply" hidden></div>
  </form>
  <div id="try-it" class="try" hidden></div>
  </div>
  <div id="presenter-answer" role="status" hidden></div>
  <div class="steps"><a id="previous" href="#">‹ previous chapter</a><a id="next" href="#">next chapter ›</a></div>
</article>
</main>
<p id="presenter-hint"></p>
<div id="print-view"></div>
<!--@PLOTLY@-->
<script type="application/json" id="lesson">/*@DATA@*/</script>
<script>
"use strict";
(function () {
  // Texts come rendered and escaped from Python (components/lesson_page.py); choices and titles are set as text.
  const data = JSON.parse(document.getElementById("lesson").textContent);
  const chapters = data.chapters;
  const $ = (id) => document.getElementById(id);
  $("title").textContent = document.title;

  chapters.forEach((chapter) => {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = "#" + chapter.anchor;
    link.textContent = chapter.number + ". " + chapter.title;
    link.id = "nav-" + chapter.anchor;
    item.appendChild(link);
    $("chapters").appendChild(item);
  });

  function wanted() {
    // Any link opens a chapter: a name that is not one (or not even a well-formed escape) opens the first, and
    // the page says so.
    const raw = window.location.hash.slice(1);
    let name = raw;
    try { name = decodeURIComponent(raw); } catch (error) { name = raw; }
    const found = chapters.findIndex((c) => c.anchor === name);
    const note = $("link-note");
    note.hidden = !raw || found >= 0;
    note.textContent = note.hidden ? "" : data.unknown.map((part) => (part === "NAME" ? name.slice(0, 80) : part)).join("");
    return found < 0 ? 0 : found;
  }

  function show(index) {
    const chapter = chapters[index];
    chapters.forEach((c, i) => $("nav-" + c.anchor).setAttribute("aria-current", String(i === index)));
    $("chapter").dataset.chapter = String(chapter.number);
    $("chapter-title").textContent = chapter.number + ". " + chapter.title;
    $("chapter-text").innerHTML = chapter.html;
    $("question-ask").innerHTML = chapter.ask;
    const choices = $("question-choices");
    choices.replaceChildren();
    chapter.choices.forEach((text, i) => {
      const label = document.createElement("label");
      const input = document.createElement("input");
      input.type = "radio";
      input.name = "answer";
      input.value = String(i);
      input.addEventListener("change", () => {
        $("question-reply").innerHTML = chapter.replies[i];
        $("question-reply").hidden = false;
      });
      label.appendChild(input);
      label.appendChild(document.createTextNode(" " + text));
      choices.appendChild(label);
    });
    $("question-reply").hidden = true;
    $("question-reply").replaceChildren();
    const tryIt = $("try-it");
    tryIt.hidden = !chapter.tryIt;
    tryIt.innerHTML = chapter.tryIt;
    if (chapter.link) {
      const link = document.createElement("a");
      link.href = chapter.link;
      link.id = "try-link";
      link.textContent = data.words.tryLink;
      tryIt.appendChild(link);
    }
    $("presenter-answer").hidden = true;
    $("presenter-answer").innerHTML = chapter.answer;
    $("previous").hidden = index === 0;
    $("next").hidden = index === chapters.length - 1;
    $("previous").href = "#" + chapters[Math.max(index - 1, 0)].anchor;
    $("next").href = "#" + chapters[Math.min(index + 1, chapters.length - 1)].anchor;
    const presenting = document.body.classList.contains("presenting");
    // Presenting, the figure fills the screen's left side, in type a room can read.
    const figure = presenting ? enlarged(JSON.parse(chapter.figure)) : JSON.parse(chapter.figure);
    const layout = Object.assign({}, figure.layout || {}, {autosize: true});
    delete layout.width;
    if (presenting) $("chapter-figure-slot").appendChild($("chapter-figure"));
    else $("chapter-text").after($("chapter-figure"));
    // Plotly sizes a responsive figure to its element: the element takes the figure's own height, or on a
    // projector what the screen's left side leaves it.
    $("chapter-figure").style.height = presenting ? "100%" : (layout.height || 450) + "px";
    if (presenting) delete layout.height;
    window.Plotly.react($("chapter-figure"), figure.data || [], layout,
                        {responsive: true, displaylogo: false, displayModeBar: "hover"});
  }

  // Keys whose numbers plotly reads as pixels; "width" only in a line's settings (elsewhere it is a figure's or a
  // bar's width).
  const PIXELS = ["size", "xshift", "yshift", "l", "r", "t", "b", "pad"];

  function scaled(node, scale, parent) {
    if (Array.isArray(node)) return node.map((item) => scaled(item, scale, parent));
    if (node === null || typeof node !== "object") return node;
    const out = {};
    Object.entries(node).forEach(([key, value]) => {
      const pixels = PIXELS.includes(key) || (key === "width" && parent === "line");
      if (pixels && typeof value === "number") out[key] = value * scale;
      else if (pixels && Array.isArray(value)) out[key] = value.map((v) => (typeof v === "number" ? v * scale : v));
      else out[key] = scaled(value, scale, key);
    });
    return out;
  }

  function smallestType(node, parent) {
    if (node === null || typeof node !== "object") return Infinity;
    return Object.entries(node).reduce((least, [key, value]) => Math.min(least,
      key === "size" && /font$/.test(parent) && typeof value === "number" ? value : smallestType(value, key)), Infinity);
  }

  // Presenting, a figure is drawn larger as a whole: every length in it that plotly reads as pixels (type, markers,
  // lines, margins, shifts) grows by the one factor that brings its smallest type to data.presentPx, so that its
  // parts keep their places (type that sets no size is the layout's, or plotly's 12 px).
  function enlarged(figure) {
    const layout = figure.layout || {};
    const smallest = Math.min(smallestType(figure.data || [], ""), smallestType(layout, ""), (layout.font || {}).size || 12);
    const scale = Math.max(data.presentPx / smallest, 1);
    return {data: scaled(figure.data || [], scale, ""), layout: scaled(layout, scale, "")};
  }

  function go(step) {
    const next = current + step;
    if (next >= 0 && next < chapters.length) window.location.hash = chapters[next].anchor;
  }

  function present(on) {
    document.body.classList.toggle("presenting", on);
    $("presenter-hint").textContent = on ? data.words.presenting : "";
    if (on && document.documentElement.requestFullscreen) document.documentElement.requestFullscreen().catch(() => {});
    if (!on && document.fullscreenElement) document.exitFullscreen().catch(() => {});
    show(current);
  }

  // The hand-out for paper: every chapter with its figure, then the answers; printed once every figure is drawn.
  async function preparePrint() {
    const view = $("print-view");
    view.replaceChildren();
    const drawn = [];
    chapters.forEach((chapter) => {
      const page = document.createElement("section");
      page.className = "print-chapter";
      const title = document.createElement("h2");
      title.textContent = chapter.number + ". " + chapter.title;
      const text = document.createElement("div");
      text.innerHTML = chapter.html;
      const figure = document.createElement("div");
      figure.className = "print-figure";
      const ask = document.createElement("div");
      ask.innerHTML = chapter.ask;
      const choices = document.createElement("ol");
      choices.className = "print-choices";
      choices.type = "a";
      chapter.choices.forEach((choice) => {
        const item = document.createElement("li");
        item.textContent = choice;
        choices.appendChild(item);
      });
      page.append(title, text, figure, ask, choices);
      view.appendChild(page);
      const spec = JSON.parse(chapter.figure);
      // A4 less its margins is 700 px wide; a figure at most 360 px tall leaves its page room for the text.
      const layout = Object.assign({}, spec.layout || {}, {width: 680, autosize: false});
      layout.height = Math.min(layout.height || 450, 360);
      drawn.push(window.Plotly.newPlot(figure, spec.data || [], layout, {staticPlot: true, displayModeBar: false}));
    });
    const answers = document.createElement("section");
    answers.className = "print-chapter print-answers";
    const heading = document.createElement("h2");
    heading.textContent = data.words.answers;
    answers.appendChild(heading);
    chapters.forEach((chapter) => {
      const answer = document.createElement("div");
      answer.innerHTML = "<h3></h3>" + chapter.answer;
      answer.firstChild.textContent = chapter.number + ". " + chapter.title;
      answers.appendChild(answer);
    });
    view.appendChild(answers);
    await Promise.all(drawn);
    return chapters.length + 1;
  }
  window.preparePrint = preparePrint;

  let current = 0;
  $("question").addEventListener("submit", (event) => event.preventDefault());
  $("present").addEventListener("click", () => present(true));
  $("print").addEventListener("click", () => preparePrint().then(() => window.print()));
  document.addEventListener("keydown", (event) => {
    if (!document.body.classList.contains("presenting") || event.target.closest("input, textarea, select")) return;
    if (["ArrowRight", "PageDown"].includes(event.key)) go(1);
    else if (["ArrowLeft", "PageUp"].includes(event.key)) go(-1);
    else if ([" ", "Enter"].includes(event.key)) {
      $("presenter-answer").hidden = false;
      window.Plotly.Plots.resize($("chapter-figure"));  // the answer took room from the figure
    }
    else if (event.key === "Escape") present(false);
    else return;
    event.preventDefault();
  });
  document.addEventListener("fullscreenchange", () => {
    if (!document.fullscreenElement && document.body.classList.contains("presenting")) present(false);
  });
  window.addEventListener("hashchange", () => { current = wanted(); show(current); $("chapter").scrollIntoView(); });
  current = wanted();
  show(current);
})();
</script>
</body>
</html>
"""
