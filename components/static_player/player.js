// The static page's player (components/static_page.py embeds it in index.html, or in a page the app saves).
//
// Every view of every step comes precomputed by the app's own Python code: HTML the app escaped, figures as
// Gradio sends them, and every word this script shows (DATA.words). The player only picks the step's views,
// draws them, and steps through them: it checks, computes and writes nothing of its own.
"use strict";
(() => {
  const DATA = JSON.parse(document.getElementById("races").textContent);
  const WORDS = DATA.words;
  const PLAY_MS = 1000;
  const $ = (id) => document.getElementById(id);
  const hasPlotly = typeof window.Plotly === "object";
  const bundles = new Map();
  let view = null;
  let index = 0;
  let timer = null;

  function put(element, html) {
    element.innerHTML = html; // precomputed by the app's views, which escape what they quote
  }

  function plot(id, figure) {
    const element = $(id).firstElementChild; // the app's figures also sit inside an element of that id
    if (!hasPlotly) {
      element.textContent = WORDS.noFigures;
      return;
    }
    const layout = Object.assign({}, figure.layout || {}, {autosize: true});
    delete layout.width;
    window.Plotly.react(element, figure.data || [], layout, {responsive: true, displaylogo: false, displayModeBar: "hover"});
  }

  function message(text) {
    const box = $("message");
    box.textContent = text || "";
    box.hidden = !text;
  }

  // One race's views: each step's value of a page element is a position in the race's pool of distinct values.
  class Recorded {
    constructor(bundle) {
      this.b = bundle;
      this.rounds = bundle.rounds;
      this.columns = bundle.columns;
      this.trees = bundle.trees;
    }
    html(key, at) { return this.b.pool[this.b.steps[key][at]]; }
    figure(key, at) { return JSON.parse(this.html(key, at)); }
    timeline() { return JSON.parse(this.b.timeline); }
  }

  function render(at) {
    if (!view) return;
    index = Math.max(0, Math.min(Math.round(Number(at) || 0), view.rounds - 1));
    const slider = $("slider");
    slider.max = String(Math.max(view.rounds - 1, 0));
    slider.value = String(index);
    $("step-label").textContent = view.b.labels[index];
    for (const method of view.columns) {
      put($(`ans-${method}`), view.html(`ans_${method}`, index));
      put($(`cnt-${method}`), view.html(`cnt_${method}`, index));
    }
    for (const method of view.trees) {
      put($(`txt-${method}`), view.html(`txt_${method}`, index));
      plot(`tree-${method}`, view.figure(`tree_${method}`, index));
    }
    put($("narration"), view.html("narration", index));
    plot("depth", view.figure("depth", index));
  }

  function showRace(next) {
    stop();
    view = next;
    // The cost rule's column and tree show only for a race that raced it, as in the app.
    for (const method of DATA.columns) $(`ans-${method}`).parentElement.hidden = !view.columns.includes(method);
    for (const method of DATA.treeMethods) $(`tree-${method}`).parentElement.hidden = !view.trees.includes(method);
    for (const part of ["info", "headline", "summary", "about"]) put($(part), view.b[part]);
    if ($("summary-box").open) drawTimeline();
    render(view.rounds > 1 ? 1 : 0);
  }

  function drawTimeline() {
    if (view) plot("timeline", view.timeline());
  }

  function base64Bytes(text) {
    const raw = atob(text);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  async function example(position) {
    const entry = DATA.races[position];
    if (!bundles.has(entry.key)) {
      const stream = new Blob([base64Bytes(entry.data)]).stream().pipeThrough(new DecompressionStream("gzip"));
      bundles.set(entry.key, new Recorded(JSON.parse(await new Response(stream).text())));
    }
    return bundles.get(entry.key);
  }

  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    $("play").textContent = WORDS.play;
  }

  function play() {
    if (timer !== null) return stop();
    if (!view) return undefined;
    if (index >= view.rounds - 1) render(0);
    $("play").textContent = WORDS.pause;
    timer = setInterval(() => {
      if (index >= view.rounds - 1) stop();
      else render(index + 1);
    }, PLAY_MS);
    return undefined;
  }

  async function choose(value) {
    message("");
    try {
      showRace(await example(Number(value)));
    } catch (err) {
      message(WORDS.failed);
      console.warn(err);
    }
  }

  function start() {
    const menu = $("example");
    DATA.races.forEach((race, position) => {
      const option = document.createElement("option");
      option.textContent = race.title;
      option.value = String(position);
      menu.append(option);
    });
    menu.addEventListener("change", () => choose(menu.value));
    $("shade").addEventListener("change", (event) => document.body.classList.toggle("noshade", !event.target.checked));
    $("first").addEventListener("click", () => { stop(); render(0); });
    $("prev").addEventListener("click", () => { stop(); render(index - 1); });
    $("next").addEventListener("click", () => { stop(); render(index + 1); });
    $("last").addEventListener("click", () => { stop(); render(view ? view.rounds - 1 : 0); });
    $("play").addEventListener("click", play);
    $("slider").addEventListener("input", (event) => { stop(); render(event.target.value); });
    $("summary-box").addEventListener("toggle", () => { if ($("summary-box").open) drawTimeline(); });
    document.addEventListener("keydown", (event) => {
      if (event.target.closest("input, select, textarea") || !view) return;
      if (event.key === "ArrowRight") render(index + 1);
      else if (event.key === "ArrowLeft") render(index - 1);
    });
    if (!("DecompressionStream" in window)) {
      message(WORDS.noDecompression);
      return;
    }
    if (!hasPlotly) message(WORDS.noPlotly);
    choose("0");
  }

  start();
})();
