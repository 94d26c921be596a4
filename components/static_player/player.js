// The static page's player (components/static_page.py embeds it in index.html).
//
// A recorded example comes with every view of every step precomputed by the app's own Python code: HTML the
// app escaped, and figures as Gradio sends them. The player only picks the step's views and shows them.
// A race file loaded from disk has no precomputed views: it is checked field by field (a bad file gets a
// message naming the field, never a broken page) and drawn by the simpler views below, all text set with
// textContent or escaped for plotly.
"use strict";
(() => {
  const DATA = JSON.parse(document.getElementById("races").textContent);
  const K = DATA.constants;
  const PLAY_MS = 1000;
  const $ = (id) => document.getElementById(id);
  const hasPlotly = typeof window.Plotly === "object";
  const bundles = new Map();
  let view = null;
  let index = 0;
  let timer = null;
  let loadedView = null;

  class RaceError extends Error {}

  // ---------------------------------------------------------------------------------------------------
  // Showing a view
  // ---------------------------------------------------------------------------------------------------

  function put(element, content) {
    if (content instanceof Node) element.replaceChildren(content);
    else element.innerHTML = content; // precomputed at export by the app's views, which escape what they quote
  }

  function plot(id, figure) {
    const element = $(id).firstElementChild; // the app's figures also sit inside an element of that id
    if (!hasPlotly) {
      element.textContent = "(plotly.min.js is missing beside index.html: figures cannot be drawn)";
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

  function render(at) {
    if (!view) return;
    index = Math.max(0, Math.min(Math.round(Number(at) || 0), view.rounds - 1));
    const slider = $("slider");
    slider.max = String(Math.max(view.rounds - 1, 0));
    slider.value = String(index);
    $("step-label").textContent = `step ${index} of ${view.rounds - 1}` + (index === 0 ? " (prefill)" : "");
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
    for (const method of K.columns) $(`ans-${method}`).parentElement.hidden = !view.columns.includes(method);
    for (const method of K.treeMethods) $(`tree-${method}`).parentElement.hidden = !view.trees.includes(method);
    put($("info"), view.info());
    put($("headline"), view.headline());
    const summary = view.summary();
    $("summary-box").hidden = summary === null;
    if (summary !== null) put($("summary"), summary);
    const about = view.about();
    $("about-box").hidden = about === null;
    if (about !== null) put($("about"), about);
    if ($("summary-box").open) drawTimeline();
    render(view.rounds > 1 ? 1 : 0);
  }

  function drawTimeline() {
    const figure = view && view.timeline();
    if (figure) plot("timeline", figure);
  }

  // ---------------------------------------------------------------------------------------------------
  // Recorded examples: views precomputed by the app's code
  // ---------------------------------------------------------------------------------------------------

  class Recorded {
    constructor(bundle) {
      this.b = bundle;
      this.rounds = bundle.rounds;
      this.columns = bundle.columns;
      this.trees = bundle.trees;
    }
    value(key, at) { return this.b.pool[this.b.steps[key][at]]; }
    html(key, at) { return this.value(key, at); }
    figure(key, at) { return JSON.parse(this.value(key, at)); }
    info() { return this.b.info; }
    headline() { return this.b.headline; }
    summary() { return this.b.summary; }
    about() { return this.b.about; }
    timeline() { return JSON.parse(this.b.timeline); }
  }

  function base64Bytes(text) {
    const raw = atob(text);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  async function gunzip(bytes, limit) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const reader = stream.getReader();
    const chunks = [];
    let total = 0;
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      total += value.length;
      if (total > limit) {
        await reader.cancel();
        throw new RaceError(`it decompresses to more than ${mb(limit)} of JSON; run files may hold at most ${mb(limit)}.`);
      }
      chunks.push(value);
    }
    const out = new Uint8Array(total);
    let at = 0;
    for (const chunk of chunks) {
      out.set(chunk, at);
      at += chunk.length;
    }
    return out;
  }

  async function example(position) {
    const entry = DATA.races[position];
    if (!bundles.has(entry.key)) {
      const bytes = await gunzip(base64Bytes(entry.data), Infinity);
      bundles.set(entry.key, new Recorded(JSON.parse(new TextDecoder().decode(bytes))));
    }
    return bundles.get(entry.key);
  }

  // ---------------------------------------------------------------------------------------------------
  // A race file from disk: read within the app's limits, checked, then drawn here
  // ---------------------------------------------------------------------------------------------------

  const mb = (n) => `${Math.round(n / 2 ** 20)} MB`;

  function kindOf(value) {
    if (value === undefined) return "missing";
    if (value === null) return "null";
    if (Array.isArray(value)) return "a list";
    return {object: "an object", string: "text", boolean: "true/false", number: "a number"}[typeof value] || "something else";
  }

  function short(value) {
    const text = value === undefined ? "missing" : JSON.stringify(value);
    return text.length > 60 ? `${text.slice(0, 60)}…` : text;
  }

  function fail(where, problem) { throw new RaceError(`${where} ${problem}.`); }

  function obj(value, where) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) fail(where, `must be an object, not ${kindOf(value)}`);
    return value;
  }

  function list(value, where, limit) {
    if (!Array.isArray(value)) fail(where, `must be a list, not ${kindOf(value)}`);
    if (value.length > limit) fail(where, `has ${value.length} entries; at most ${limit} are allowed`);
    return value;
  }

  function int(value, where, low, high) {
    if (!Number.isInteger(value)) fail(where, `must be a whole number, not ${kindOf(value)}`);
    if (value < low || value > high) fail(where, `is ${value}, outside ${low}..${high}`);
    return value;
  }

  function number(value, where, low, high, log = false) {
    if (log && value === "-Infinity") return -Infinity; // parseJSON's stand-in for Python's -Infinity
    if (typeof value !== "number" || !Number.isFinite(value)) fail(where, `must be a finite number, not ${kindOf(value)}`);
    if (value < low || value > high) fail(where, `is ${value}, outside ${low}..${high}`);
    return value;
  }

  function text(value, where, limit, optional = false) {
    if ((value === undefined || value === null) && optional) return "";
    if (typeof value !== "string") fail(where, `must be text, not ${kindOf(value)}`);
    if (value.length > limit) fail(where, `is ${value.length} characters long; at most ${limit} are allowed`);
    if (typeof value.isWellFormed === "function" && !value.isWellFormed()) fail(where, "holds an invalid character (a lone surrogate)");
    return value;
  }

  function keys(data, allowed, required, where) {
    const missing = required.filter((name) => !Object.hasOwn(data, name));
    if (missing.length) fail(where, `lacks the field${missing.length > 1 ? "s" : ""} ${missing.join(", ")}`);
    const unknown = Object.keys(data).filter((name) => !allowed.includes(name));
    if (unknown.length) fail(where, `has unexpected field${unknown.length > 1 ? "s" : ""} ${unknown.slice(0, 5).map(short).join(", ")}`);
  }

  function flag(value, where, fallback) {
    if (value === undefined) return fallback;
    if (typeof value !== "boolean") fail(where, `must be true or false, not ${kindOf(value)}`);
    return value;
  }

  function declared(value, settings, where) {
    // settings and sampling, as the app declares them (ddd/settings.py): older names renamed, each value in range
    const renames = new Map(settings.flatMap((s) => s.old.map((old) => [old, s.name])));
    const data = {};
    for (const [name, item] of Object.entries(obj(value, where))) {
      const current = renames.get(name);
      data[current && !Object.hasOwn(value, current) ? current : name] = item;
    }
    keys(data, settings.map((s) => s.name), [], where);
    for (const setting of settings) {
      if (!Object.hasOwn(data, setting.name)) continue;
      const item = data[setting.name];
      const at = `${where}.${setting.name}`;
      if (setting.kind === "calls") {
        if (item !== "all") list(item, at, setting.high).forEach((call, i) => int(call, `${at}[${i}]`, setting.low, setting.high));
      } else if (setting.kind === "tree") {
        list(item, at, K.limits.listItems).forEach((path, i) => list(path, `${at}[${i}]`, K.limits.listItems).forEach((rank, j) => int(rank, `${at}[${i}][${j}]`, setting.low, setting.high)));
      } else if (setting.kind === "float") {
        number(item, at, setting.low, setting.high);
      } else if (setting.kind === "bool") {
        flag(item, at);
      } else {
        int(item, at, setting.low, setting.high);
      }
    }
    return data;
  }

  function checkRace(data, source) {
    obj(data, source);
    let raw;
    let title = "";
    let note = "";
    if (!("format" in data) && "method" in data && "steps" in data) {
      raw = [[data.method, data]]; // a single run's file, as the app reads it too
    } else {
      if (data.format !== K.format) {
        throw new RaceError(`${source} is not a DDD Explorer recorded run (its format is ${short(data.format)}, expected "${K.format}").`);
      }
      if (data.version !== K.version) {
        throw new RaceError(`${source} is a recorded run of version ${short(data.version)}; this page reads version ${K.version}.`);
      }
      keys(data, K.fields.race, ["format", "version", "traces"], "the race");
      title = text(data.title, "title", 2000, true);
      note = text(data.note, "note", 2000, true);
      raw = Object.entries(obj(data.traces, "traces"));
      if (!raw.length) fail("traces", "is empty: a race file holds at least one run");
    }
    const traces = new Map();
    const count = {nodes: 0};
    for (const [method, trace] of raw) {
      if (!Object.hasOwn(K.labels, method)) {
        fail("traces", `has a run of unknown method ${short(method)}; known: ${Object.keys(K.labels).join(", ")}`);
      }
      traces.set(method, checkTrace(trace, `traces.${method}`, method, count));
    }
    checkTogether(traces);
    return {title: title || (traces.values().next().value.prompt.slice(0, 60)), note, traces};
  }

  function checkTrace(data, where, method, count) {
    obj(data, where);
    if (data.schema_version !== K.schema) {
      fail(`${where}.schema_version`, `is ${short(data.schema_version)}; this page reads trace schema version ${K.schema}`);
    }
    keys(data, K.fields.trace, K.fields.traceRequired, where);
    if (!Object.hasOwn(K.labels, data.method)) fail(`${where}.method`, `is ${short(data.method)}, not one of ${Object.keys(K.labels).join(", ")}`);
    if (data.method !== method) fail(`${where}.method`, `is ${short(data.method)} but the run is filed under ${short(method)}`);
    const trace = {
      method,
      settings: declared(data.settings, K.settings[method], `${where}.settings`),
      sampling: declared(data.sampling, K.sampling, `${where}.sampling`),
      prompt_tokens: int(data.prompt_tokens, `${where}.prompt_tokens`, 0, 1e7),
    };
    trace.model = text(data.model, `${where}.model`, 2000);
    trace.head = data.head === null ? null : text(data.head, `${where}.head`, 2000);
    trace.stop_reason = text(data.stop_reason, `${where}.stop_reason`, 2000, true);
    for (const name of ["precision", "device"]) {
      trace[name] = data[name] === undefined ? K.traceDefaults[name] : text(data[name], `${where}.${name}`, 2000);
    }
    trace.prompt = text(data.prompt, `${where}.prompt`, K.limits.text);
    const written = text(data.text, `${where}.text`, K.limits.text, true);
    if (!K.precisions.includes(trace.precision)) {
      fail(`${where}.precision`, `is ${short(trace.precision)}, not one of ${K.precisions.join(", ")}`);
    }
    const summary = obj(data.summary === undefined ? {} : data.summary, `${where}.summary`);
    if (Object.keys(summary).length) { // a run stopped midway has none
      keys(summary, K.fields.summary, K.fields.summary, `${where}.summary`);
      for (const [name, item] of Object.entries(summary)) number(item, `${where}.summary.${name}`, 0, 1e12);
    }
    const steps = list(data.steps, `${where}.steps`, K.limits.steps);
    if (!steps.length) fail(`${where}.steps`, "is empty: a recorded run has at least its prefill step");
    trace.steps = steps.map((step, position) => checkStep(step, `${where}.steps[${position}]`, position, count));
    checkRun(trace, written, where);
    return trace;
  }

  function checkStep(data, where, position, count) {
    obj(data, where);
    keys(data, K.fields.step, ["index", "token_ids", "text", "accepted"], where);
    const confidence = list(data.confidence === undefined ? [] : data.confidence, `${where}.confidence`, K.limits.listItems)
      .map((value, i) => number(value, `${where}.confidence[${i}]`, -Infinity, 1e-3, true));
    if (data.costs !== undefined && data.costs !== null) { // the costs a cost-rule step was priced with
      const costs = obj(data.costs, `${where}.costs`);
      keys(costs, K.fields.costs, K.fields.costs.filter((name) => name !== "step_ms" && name !== "retimed"), `${where}.costs`);
      for (const [name, [low, high]] of Object.entries(K.costBounds)) number(costs[name], `${where}.costs.${name}`, low, high);
      flag(costs.measured, `${where}.costs.measured`);
      flag(costs.retimed, `${where}.costs.retimed`, false);
      if (costs.step_ms !== undefined && costs.step_ms !== null) number(costs.step_ms, `${where}.costs.step_ms`, 0, K.limits.ms);
    }
    if (data.chain_end !== undefined && data.chain_end !== "" && !K.chainEnds.includes(data.chain_end)) {
      fail(`${where}.chain_end`, `is ${short(data.chain_end)}, not one of ${K.chainEnds.join(", ")}`);
    }
    const tokens = list(data.token_ids, `${where}.token_ids`, K.limits.listItems);
    tokens.forEach((token, i) => int(token, `${where}.token_ids[${i}]`, 0, 2 ** 31));
    const step = {
      index: int(data.index, `${where}.index`, position, position),
      token_ids: tokens,
      text: text(data.text, `${where}.text`, 16000),
      accepted: int(data.accepted, `${where}.accepted`, 0, tokens.length),
      prefill: flag(data.prefill, `${where}.prefill`, false),
      bonus_id: data.bonus_id === undefined || data.bonus_id === null ? null : int(data.bonus_id, `${where}.bonus_id`, 0, 2 ** 31),
      bonus_text: text(data.bonus_text, `${where}.bonus_text`, 2000, true),
      confidence,
    };
    for (const name of ["draft_ms", "verify_ms", "other_ms"]) {
      step[name] = data[name] === undefined ? 0 : number(data[name], `${where}.${name}`, 0, 1e9);
    }
    for (const name of ["draft_calls", "max_draft_calls"]) {
      step[name] = data[name] === undefined ? 0 : int(data[name], `${where}.${name}`, 0, K.limits.listItems);
    }
    step.verified = data.verified === undefined ? 0 : int(data.verified, `${where}.verified`, 0, K.limits.nodesPerStep);
    // the costs a cost-rule step was priced at, where its trace records them (in plain steps)
    step.costs = data.costs === undefined || data.costs === null ? null : Object.fromEntries(K.costs.map((name) =>
      [name, number(obj(data.costs, `${where}.costs`)[name], `${where}.costs.${name}`, 0, 10)]));
    step.checks = list(data.checks === undefined ? [] : data.checks, `${where}.checks`, K.limits.listItems).map((check, i) => {
      const at = `${where}.checks[${i}]`;
      obj(check, at);
      keys(check, K.fields.check, K.fields.checkRequired, at);
      const checked = {call: int(check.call, `${at}.call`, 1, K.limits.listItems),
        confidence: number(check.confidence, `${at}.confidence`, -Infinity, 1e-3, true),
        stop: flag(check.stop, `${at}.stop`, undefined) ?? fail(`${at}.stop`, "must be true or false, not missing")};
      // the cost rule's weighing: a count of verified tokens, and tokens or plain steps within one step's worth
      for (const name of K.weighed) {
        const value = check[name];
        if (value === undefined || value === null) checked[name] = null;
        else if (name === "verified") checked[name] = int(value, `${at}.${name}`, 1, K.limits.nodesPerStep);
        else checked[name] = number(value, `${at}.${name}`, -K.limits.listItems, K.limits.listItems);
      }
      return checked;
    });
    const pool = list(data.pool === undefined ? [] : data.pool, `${where}.pool`, K.limits.nodesPerStep);
    count.nodes += pool.length;
    if (count.nodes > K.limits.nodes) fail(where, `brings the file past ${K.limits.nodes} draft nodes in all`);
    step.pool = checkPool(pool, `${where}.pool`);
    const byIndex = new Map(step.pool.map((n) => [n.index, n]));
    const path = list(data.accepted_path === undefined ? [] : data.accepted_path, `${where}.accepted_path`, K.limits.listItems);
    if (!step.pool.length && path.length) fail(`${where}.accepted_path`, "lists nodes but the step has no draft pool");
    path.forEach((node, i) => {
      int(node, `${where}.accepted_path[${i}]`, 0, 2 ** 31);
      if (!byIndex.has(node)) fail(`${where}.accepted_path[${i}]`, `is ${node}, not a node of the pool`);
      if (byIndex.get(node).parent !== (i ? path[i - 1] : -1)) fail(`${where}.accepted_path`, "is not a path from the root down the tree");
    });
    if (step.pool.length && step.accepted > Math.max(path.length - 1, 0)) {
      fail(`${where}.accepted`, `is ${step.accepted} but the accepted path holds only ${Math.max(path.length - 1, 0)} draft tokens`);
    }
    step.accepted_path = path;
    return step;
  }

  function checkPool(pool, where) {
    // A tree listed parents first: the layout walks parent links, so a cycle or a missing parent is refused.
    const depths = new Map();
    return pool.map((data, position) => {
      const at = `${where}[${position}]`;
      obj(data, at);
      keys(data, K.fields.node, K.fields.node, at);
      const node = {
        index: int(data.index, `${at}.index`, 0, 2 ** 31),
        parent: int(data.parent, `${at}.parent`, -1, 2 ** 31),
        depth: int(data.depth, `${at}.depth`, 0, K.limits.listItems),
        status: data.status,
        token_id: int(data.token_id, `${at}.token_id`, 0, 2 ** 31),
        text: text(data.text, `${at}.text`, 2000),
        logprob: number(data.logprob, `${at}.logprob`, -Infinity, 1e-3, true),
        score: number(data.score, `${at}.score`, -Infinity, 1e-3, true),
        rank: int(data.rank, `${at}.rank`, 0, 2 ** 31),
        in_beam: flag(data.in_beam, `${at}.in_beam`, false),
      };
      if (!K.statuses.includes(node.status)) fail(`${at}.status`, `is ${short(node.status)}, not one of ${K.statuses.join(", ")}`);
      if (depths.has(node.index)) fail(`${at}.index`, `repeats node ${node.index}: every node of a pool needs its own index`);
      if (position === 0) {
        if (node.parent !== -1 || node.status !== "root" || node.depth !== 0) fail(at, "must be the root (status 'root', parent -1, depth 0)");
      } else {
        if (node.status === "root") fail(`${at}.status`, "is 'root' but only the first node is the root");
        if (!depths.has(node.parent)) fail(`${at}.parent`, `${node.parent} is not listed before this node: the pool must be a tree with every parent listed before its children`);
        if (node.depth !== depths.get(node.parent) + 1) fail(`${at}.depth`, `is ${node.depth} but its parent's is ${depths.get(node.parent)}`);
      }
      depths.set(node.index, node.depth);
      return node;
    });
  }

  // A file whose every field is in range can still contradict itself (components/runcheck.py): a step emitting
  // fifty copies of its tokens, a pool deeper than its draft calls, timings of zero. The views would show such
  // numbers as facts or draw them for minutes, so they are checked against each other and against what the
  // run's settings can produce, with the app's own limits.

  const many = (n) => n.toLocaleString("en");
  const precise = (x, digits) => String(Number(x.toPrecision(digits)));
  const brief = (x) => precise(x, 6);

  function withDefaults(values, settings) {
    return Object.fromEntries(settings.map((s) => [s.name, Object.hasOwn(values, s.name) ? values[s.name] : s.default]));
  }

  function shapeOf(trace) {
    // the largest draft the run's settings make in one step (runcheck.Shape); plain decoding drafts none
    const kind = K.shapes[trace.method];
    if (!kind) return null;
    const s = withDefaults(trace.settings, K.settings[trace.method]);
    if (Array.isArray(s.tree)) {
      return Object.assign({calls: Math.max(0, ...s.tree.map((path) => path.length)), width: null, nodes: s.tree.length,
        verified: s.tree.length + 1}, kind);
    }
    const costs = kind.weighs ? Object.fromEntries(K.costs.map((name) => [name, s[name]])) : null;
    return Object.assign({calls: s.draft_calls ?? s.max_draft_calls, width: s.beam_width, nodes: 0, verified: s.total_tokens, costs}, kind);
  }

  function poolLimit(shape, calls) {
    if (shape.width === null) return shape.nodes + 1;
    return 1 + (calls ? shape.width + (calls - 1) * shape.width ** 2 : 0);
  }

  function checkRun(trace, written, where) {
    if (trace.prompt_tokens < 1 || trace.prompt_tokens > K.limits.promptTokens) {
      fail(`${where}.prompt_tokens`, `is ${trace.prompt_tokens}; a race here reads 1 to ${many(K.limits.promptTokens)} prompt tokens`);
    }
    const tokens = sum(trace.steps.map((s) => s.token_ids.length));
    if (tokens > K.limits.tokens) fail(`${where}.steps`, `emit ${many(tokens)} tokens; a race here writes at most ${K.limits.tokens} (max new tokens)`);
    const shape = shapeOf(trace);
    trace.steps.forEach((step, position) => checkNumbers(step, shape, `${where}.steps[${position}]`));
    if (written && written !== trace.steps.map((s) => s.text).join("")) fail(`${where}.text`, "differs from the text its steps emitted");
  }

  function checkNumbers(step, shape, where) {
    if (!(stepMs(step) > 0)) fail(where, "took no time (draft_ms + verify_ms + other_ms is 0); a recorded step always takes some");
    if (stepMs(step) < K.minStepMs) {
      fail(where, `took ${brief(stepMs(step))} ms (draft_ms + verify_ms + other_ms); a step runs the target model at least once, `
        + `which takes at least ${K.minStepMs} ms on any machine`);
    }
    if (step.prefill !== (step.index === 0)) fail(`${where}.prefill`, "must be true for step 0, the prefill, and for no other step");
    const emitted = step.token_ids.length;
    if (step.prefill || !shape) {
      const what = step.prefill ? "a prefill" : "a plain decoding step";
      if (emitted !== 1) fail(`${where}.token_ids`, `holds ${emitted} tokens; ${what} emits one`);
      const drafting = [step.draft_calls, step.max_draft_calls, step.verified, step.accepted, step.pool.length, step.checks.length,
        step.confidence.length, step.accepted_path.length, step.bonus_id];
      if (drafting.some(Boolean)) fail(where, `records drafting, but ${what} drafts nothing`);
      return;
    }
    if (emitted !== step.accepted + 1) {
      fail(`${where}.token_ids`, `holds ${emitted} tokens, but a step that accepted ${step.accepted} draft tokens emits ${step.accepted + 1} `
        + "(those and the target's own)");
    }
    if (step.max_draft_calls > shape.calls) fail(`${where}.max_draft_calls`, `is ${step.max_draft_calls}, more than the run's settings allow (${shape.calls})`);
    if (step.draft_calls > step.max_draft_calls) fail(`${where}.draft_calls`, `is ${step.draft_calls}, more than its max_draft_calls (${step.max_draft_calls})`);
    if (step.accepted > step.draft_calls) fail(`${where}.accepted`, `is ${step.accepted}, more than the ${step.draft_calls} levels drafted`);
    if (step.verified > shape.verified) fail(`${where}.verified`, `is ${step.verified}, more than the ${shape.verified} tokens its settings verify`);
    if (step.confidence.length > step.draft_calls) fail(`${where}.confidence`, `lists ${step.confidence.length} values for ${step.draft_calls} draft calls`);
    checkChecks(step, shape, where);
    if (step.pool.length) checkPoolNumbers(step, shape, where);
  }

  function checkChecks(step, shape, where) {
    const checks = step.checks;
    if (checks.length && !shape.checks) {
      const checking = Object.keys(K.shapes).filter((m) => K.shapes[m].checks).map(label).join(" and ");
      fail(`${where}.checks`, `lists depth checks, but only ${checking} check their depth`);
    }
    if (checks.some((c, i) => (i && c.call <= checks[i - 1].call) || c.call > step.draft_calls)) {
      fail(`${where}.checks`, `must be after distinct draft calls in order, each at most the ${step.draft_calls} made`);
    }
    if (checks.slice(0, -1).some((c) => c.stop)) fail(`${where}.checks`, "go on after a check that stopped the drafting");
    const last = checks[checks.length - 1];
    if (last && last.stop && last.call !== step.draft_calls) {
      fail(`${where}.checks`, `stop the drafting after call ${last.call}, yet the step made ${step.draft_calls} draft calls`);
    }
    if (!shape.weighs) {
      if (checks.some((c) => K.weighed.some((name) => c[name] !== null))) {
        fail(`${where}.checks`, "record the cost rule's expected tokens and times, but this run weighs only its confidence");
      }
      return;
    }
    // The cost rule weighs after every draft call: E tokens expected of its best tree's verified ones, in T plain
    // steps, at least the target's one forward.
    if (checks.some((c, i) => c.call !== i + 1)) fail(`${where}.checks`, "must follow every draft call from the first: the cost rule weighs each");
    checks.forEach((check, i) => {
      const at = `${where}.checks[${i}]`;
      const missing = K.weighed.filter((name) => check[name] === null);
      if (missing.length) fail(at, `lacks ${missing.join(", ")}: the cost rule records what it weighed`);
      if (check.verified < 1 || check.verified > shape.verified) {
        fail(`${at}.verified`, `is ${check.verified}, outside the 1 to ${shape.verified} tokens its settings verify`);
      }
      if (!(check.expected >= 0 && check.expected <= check.verified - 1)) {
        fail(`${at}.expected`, `is ${brief(check.expected)}, but ${check.verified - 1} verified draft tokens are expected to give 0 to as many`);
      }
      if (check.time < 1) fail(`${at}.time`, `is ${brief(check.time)}, less than the target's own forward (1 plain step)`);
      checkForecast(check, step.costs || shape.costs, shape.verified, at);
    });
  }

  const stepTime = (costs, calls, verified) => 1 + calls * costs.draft_cost
    + (verified > 1 ? costs.verify_base + (verified - 1) * costs.verify_cost : 0);

  function checkForecast(check, costs, most, at) {
    // a check's numbers as ddd.costs.decide makes them (runcheck._forecast)
    const tol = K.tolerance;
    const time = stepTime(costs, check.call, check.verified);
    if (Math.abs(check.time - time) > tol) {
      fail(`${at}.time`, `is ${brief(check.time)}, but ${check.call} draft calls and ${check.verified} verified tokens take ${brief(time)} plain steps at the step's costs`);
    }
    const deeperTime = check.time + check.time_gain;
    const deeperExpected = check.expected + check.gain;
    const verified = verifiedAt(deeperTime, check.call + 1, costs, most);
    if (verified === null) {
      fail(`${at}.time_gain`, `is ${brief(check.time_gain)}: one more level would take ${brief(deeperTime)} plain steps, which no tree of `
        + `${check.call + 1} draft calls and 1 to ${most} verified tokens takes at the step's costs`);
    }
    if (!(deeperExpected >= -tol && deeperExpected <= verified - 1 + tol)) {
      fail(`${at}.gain`, `is ${brief(check.gain)}: one more level would expect ${brief(deeperExpected)} accepted tokens, but its tree's `
        + `${verified - 1} verified draft tokens give 0 to as many`);
    }
    const now = (check.expected + 1) / check.time;
    const deeper = (deeperExpected + 1) / deeperTime;
    if (Math.abs(deeper - now) > tol * now && check.stop !== (deeper < now)) {
      fail(`${at}.stop`, `says ${check.stop ? "stop" : "go on"}, but one more level's rate (E + dE + 1) / (T + dT) = ${precise(deeper, 4)} is `
        + `${deeper > now ? "above" : "below"} the tree's (E + 1) / T = ${precise(now, 4)}`);
    }
  }

  function verifiedAt(time, calls, costs, most) {
    // the verified tokens of a tree of `calls` draft calls that takes `time` plain steps (runcheck._verified_at)
    const tol = K.tolerance;
    const verify = time - 1 - calls * costs.draft_cost;
    const extra = verify - costs.verify_base;
    const single = Math.abs(verify) <= tol ? 1 : null;
    if (costs.verify_cost === 0) return Math.abs(extra) <= tol ? most : single;
    const count = Math.round(extra / costs.verify_cost);
    if (Math.abs(extra - count * costs.verify_cost) <= tol && count >= 1 && count <= most - 1) return count + 1;
    return single;
  }

  function checkPoolNumbers(step, shape, where) {
    const pool = step.pool;
    const most = poolLimit(shape, step.draft_calls);
    if (pool.length > most) fail(`${where}.pool`, `holds ${many(pool.length)} nodes; ${step.draft_calls} draft calls of its settings make at most ${many(most)}`);
    if (pool.some((n) => n.depth > step.draft_calls)) fail(`${where}.pool`, `holds nodes deeper than the ${step.draft_calls} levels drafted`);
    if (shape.width !== null && pool.some((n) => n.rank >= shape.width)) {
      fail(`${where}.pool`, `ranks a node ${pool.reduce((a, n) => Math.max(a, n.rank), 0)}, beyond a beam of ${shape.width}`);
    }
    const verified = pool.filter((n) => n.status !== "pruned").length;
    if (verified !== step.verified) fail(`${where}.verified`, `is ${step.verified} but the pool holds ${verified} verified nodes (the root included)`);
    const path = step.accepted_path;
    const onPath = new Set(path.slice(1));
    const marked = pool.filter((n) => n.status === "accepted");
    if (marked.length !== onPath.size || marked.some((n) => !onPath.has(n.index))) {
      fail(`${where}.accepted_path`, "does not list the nodes the pool marks accepted");
    }
    const nodes = new Map(pool.map((n) => [n.index, n]));
    if (path.slice(1, step.accepted + 1).some((i, at) => nodes.get(i).token_id !== step.token_ids[at])) {
      fail(`${where}.token_ids`, "are not the tokens of the accepted path");
    }
    // The last token is the target's own (the bonus), or an accepted draft token that ended the answer.
    const ends = new Set([step.bonus_id]);
    if (path.length > step.accepted + 1) ends.add(nodes.get(path[step.accepted + 1]).token_id);
    if (step.bonus_id !== null && !ends.has(step.token_ids[step.token_ids.length - 1])) {
      fail(`${where}.token_ids`, "end with a token that is neither the bonus token nor drafted");
    }
  }

  function checkTogether(traces) {
    // the runs of one race answered one prompt on one model, in one precision and with one sampling
    const [[firstName, first], ...others] = [...traces];
    const sampling = (trace) => withDefaults(trace.sampling, K.sampling);
    for (const [name, trace] of others) {
      for (const field of K.shared) {
        if (trace[field] !== first[field]) {
          fail(`traces.${name}.${field}`, `differs from traces.${firstName}.${field}: the runs of one race share one prompt, model, device and precision`);
        }
      }
      if (K.sampling.some((s) => sampling(trace)[s.name] !== sampling(first)[s.name])) {
        fail(`traces.${name}.sampling`, `differs from traces.${firstName}.sampling: the runs of one race sample alike`);
      }
    }
    const heads = new Set([...traces.values()].filter((t) => t.method !== "plain").map((t) => t.head));
    if (heads.size > 1) fail("traces", `draft with different heads (${[...traces.keys()].map(label).join(", ")})`);
    checkPaces(traces);
  }

  function typicalStepMs(trace) {
    // the median decode step (runcheck.typical_step_ms)
    const times = trace.steps.filter((s) => !s.prefill).map(stepMs).sort((a, b) => a - b);
    if (!times.length) return null;
    const middle = Math.floor(times.length / 2);
    return times.length % 2 ? times[middle] : (times[middle - 1] + times[middle]) / 2;
  }

  function checkPaces(traces) {
    // no speculative run steps at under half of plain decoding's pace (runcheck._paces)
    const plain = traces.has("plain") ? typicalStepMs(traces.get("plain")) : null;
    if (plain === null) return;
    for (const [name, trace] of traces) {
      const typical = typicalStepMs(trace);
      if (name !== "plain" && typical !== null && typical < K.minStepRatio * plain) {
        fail(`traces.${name}.steps`, `take ${precise(typical, 3)} ms each (the median decode step), under half of plain decoding's `
          + `${precise(plain, 3)} ms: a ${label(name)} step runs the target on at least the token a plain step does, and drafts besides`);
      }
    }
  }

  function parseJSON(source) {
    try {
      return JSON.parse(source);
    } catch (first) {
      if (!/NaN|Infinity/.test(source)) throw first;
      // Python's json writes -Infinity (a log-probability of zero), Infinity and NaN, which JSON.parse refuses:
      // outside strings they become "-Infinity" (read back by number()) and null (refused where a number belongs).
      const out = [];
      let start = 0;
      let inString = false;
      for (let i = 0; i < source.length; i++) {
        const c = source.charCodeAt(i);
        if (inString) {
          if (c === 92) i++;
          else if (c === 34) inString = false;
          continue;
        }
        if (c === 34) {
          inString = true;
          continue;
        }
        const word = ["-Infinity", "Infinity", "NaN"].find((w) => source.startsWith(w, i));
        if (word) {
          out.push(source.slice(start, i), word === "-Infinity" ? '"-Infinity"' : "null");
          i += word.length - 1;
          start = i + 1;
        }
      }
      out.push(source.slice(start));
      return JSON.parse(out.join(""));
    }
  }

  async function readRaceFile(file) {
    if (file.size > K.limits.fileBytes) {
      throw new RaceError(`${file.name} is ${(file.size / 2 ** 20).toFixed(1)} MB; run files may be at most ${mb(K.limits.fileBytes)}.`);
    }
    let bytes = new Uint8Array(await file.arrayBuffer());
    if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
      try {
        bytes = await gunzip(bytes, K.limits.jsonBytes);
      } catch (err) {
        if (err instanceof RaceError) throw new RaceError(`${file.name}: ${err.message}`);
        throw new RaceError(`${file.name} looks gzipped but cannot be decompressed.`);
      }
    } else if (bytes.length > K.limits.jsonBytes) {
      throw new RaceError(`${file.name} holds more than ${mb(K.limits.jsonBytes)} of JSON.`);
    }
    let source;
    try {
      source = new TextDecoder("utf-8", {fatal: true, ignoreBOM: false}).decode(bytes);
    } catch (err) {
      throw new RaceError(`${file.name} is not a readable JSON file: it is not UTF-8 text.`);
    }
    let data;
    try {
      data = parseJSON(source);
    } catch (err) {
      throw new RaceError(`${file.name} is not a readable JSON file: ${err.message}.`);
    }
    return checkRace(data, file.name);
  }

  // ---------------------------------------------------------------------------------------------------
  // The views of a loaded file, drawn here (simpler than the app's: see README, Deploy)
  // ---------------------------------------------------------------------------------------------------

  const SHOWN = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"};
  const visible = (s) => (s === "" ? "∅" : Array.from(s, (ch) => SHOWN[ch]
    || (ch.charCodeAt(0) < 32 || ch.charCodeAt(0) === 127 ? `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}` : ch)).join(""));
  // plotly draws a subset of HTML in labels and hover texts: token text goes in escaped
  const plotText = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const quoted = (s) => `'${visible(s)}'`;
  const plural = (n, word) => `${n} ${n === 1 ? word : `${word}s`}`;
  const label = (method) => K.labels[method] || method;
  const either = (names) => (names.length > 1 ? `${names.slice(0, -1).join(", ")} or ${names[names.length - 1]}` : names.join(""));
  const drafting = either(K.treeMethods.map(label));
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  const stepMs = (s) => s.draft_ms + s.verify_ms + s.other_ms;
  const score = (n) => (Number.isFinite(n.score) ? n.score : -Infinity);

  function sourceName(source) {
    // a model or head as components.views.source_name shows it: the shipped head by that name, a local
    // directory by its own name only
    if (!source) return "none";
    const parts = source.split("/").filter(Boolean);
    if (parts.slice(-2).join("/") === "assets/head") return "shipped head";
    return source.startsWith("/") ? parts[parts.length - 1] || source : source;
  }

  function el(tag, className, content) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (content !== undefined) element.textContent = content;
    return element;
  }

  function splitStep(step) {
    if (!step.text) return [];
    if (step.accepted <= 0 || !step.pool.length) return [["target", step.text]];
    const nodes = new Map(step.pool.map((n) => [n.index, n]));
    const drafted = step.accepted_path.slice(1, 1 + step.accepted).map((i) => (nodes.has(i) ? nodes.get(i).text : "")).join("");
    if (drafted && step.text.startsWith(drafted)) {
      const rest = step.text.slice(drafted.length);
      return rest ? [["draft", drafted], ["target", rest]] : [["draft", drafted]];
    }
    return [["draft", step.text]];
  }

  function answerNode(trace, at, column) {
    const box = el("div", "answer");
    if (!trace) {
      box.className = "answer empty";
      box.textContent = column ? "(not run)" : "(no run)";
      return box;
    }
    const last = trace.steps.length - 1;
    const upto = Math.min(at, last);
    const current = column ? (at <= last ? at : null) : upto;
    const speculative = trace.method !== "plain";
    for (const step of trace.steps.slice(0, upto + 1)) {
      const isCurrent = step.index === current;
      const pieces = splitStep(step);
      if (!pieces.length && !isCurrent) continue;
      const span = el("span", isCurrent ? "step cur" : "step");
      span.title = `step ${step.index}`;
      if (!pieces.length) span.textContent = "·";
      for (const [kind, piece] of pieces) span.append(el("span", speculative ? `tok-${kind}` : "tok-plain", piece));
      box.append(span);
    }
    if (column && at < last) box.append(el("span", "cursor", "▍"));
    return box;
  }

  function counts(steps) {
    // the app's counters (components.answer.counters): decode speed as the verdict measures it, the prefill apart
    const decode = steps.filter((s) => !s.prefill);
    const decodeTokens = sum(decode.map((s) => s.token_ids.length));
    const perToken = decodeMsPerToken(steps);
    return {tokens: sum(steps.map((s) => s.token_ids.length)), totalMs: sum(steps.map(stepMs)), forwards: steps.length,
      tau: decode.length ? decodeTokens / decode.length : 0, rate: perToken ? 1000 / perToken : null,
      prefillMs: sum(steps.filter((s) => s.prefill).map(stepMs))};
  }

  // ---------------------------------------------------------------------------------------------------
  // The verdict, as components/verdict.py gives it: the same resampling (a hashed counter), the same arithmetic
  // in the same order, the same words; so a file gets one headline in the app and here.
  // ---------------------------------------------------------------------------------------------------

  const V = K.verdict;

  function fixed(x, digits) {
    // Python's f"{x:.{digits}f}": toFixed, but an exact tie goes to the even neighbour
    const scaled = x * 10 ** digits;
    const floor = Math.floor(scaled);
    if (scaled - floor === 0.5 && floor % 2 === 0 && (floor + 0.5) / 10 ** digits === x) return (floor / 10 ** digits).toFixed(digits);
    return x.toFixed(digits);
  }

  function rounds(steps, count = 0) {
    // a run's decode steps by round (verdict.Rounds): time, tokens and kind of step; zeros after its end
    const decode = steps.filter((s) => !s.prefill);
    const n = Math.max(count, ...decode.map((s) => s.index), 0);
    const r = {ms: new Array(n).fill(0), tokens: new Array(n).fill(0), shape: new Array(n).fill(-1)};
    const kinds = new Map();
    for (const s of decode) {
      const key = `${s.draft_calls},${s.verified}`;
      if (!kinds.has(key)) kinds.set(key, kinds.size);
      r.ms[s.index - 1] = stepMs(s);
      r.tokens[s.index - 1] = s.token_ids.length;
      r.shape[s.index - 1] = kinds.get(key);
    }
    r.kinds = kinds.size;
    return r;
  }

  function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  }

  function typicalMs(r, picks) {
    // every picked step at the median time of the picked steps of its kind (Rounds.typical_ms)
    let total = 0;
    for (let kind = 0; kind < r.kinds; kind++) {
      const times = picks.filter((i) => r.shape[i] === kind).map((i) => r.ms[i]);
      if (times.length) total += median(times) * times.length;
    }
    return total;
  }

  function decodeMsPerToken(steps) {
    const decode = steps.filter((s) => !s.prefill);
    const tokens = sum(decode.map((s) => s.token_ids.length));
    if (!tokens) return null;
    const r = rounds(decode);
    const ms = typicalMs(r, r.ms.map((_, i) => i));
    return Number.isFinite(ms) && ms > 0 ? ms / tokens : null;
  }

  class Draws {
    // verdict.Draws: a seeded counter hashed to 32 bits
    constructor(seed) { this.seed = seed >>> 0; this.used = 0; }
    next(low, high) {
      let x = (this.used + Math.imul(this.seed, 0x9E3779B9)) >>> 0;
      this.used += 1;
      x = (x ^ (x >>> 16)) >>> 0;
      x = Math.imul(x, 0x7FEB352D) >>> 0;
      x = (x ^ (x >>> 15)) >>> 0;
      x = Math.imul(x, 0x846CA68B) >>> 0;
      x = (x ^ (x >>> 16)) >>> 0;
      return low + (x % (high - low));
    }
  }

  function blockPicks(draws, low, high) {
    const size = high - low;
    const rows = [];
    for (let r = 0; r < V.resamples; r++) rows.push([]);
    if (size <= 0) return rows;
    const block = Math.min(V.blockRounds, size);
    const blocks = Math.ceil(size / block);
    for (const row of rows) {
      for (let b = 0; b < blocks; b++) {
        const start = draws.next(low, high - block + 1);
        for (let k = 0; k < block; k++) row.push(start + k);
      }
      row.length = size;
    }
    return rows;
  }

  function percentile(sorted, q) {
    const position = q / 100 * (sorted.length - 1);
    const below = Math.floor(position);
    if (below + 1 >= sorted.length) return sorted[sorted.length - 1];
    return sorted[below] + (sorted[below + 1] - sorted[below]) * (position - below);
  }

  function speedRatio(reference, other) {
    // other's speed over reference's, with its bootstrap interval (verdict.speed_ratio)
    const shared = Math.min(rounds(reference.steps).ms.length, rounds(other.steps).ms.length);
    const count = Math.max(rounds(reference.steps).ms.length, rounds(other.steps).ms.length);
    const ref = rounds(reference.steps, count);
    const run = rounds(other.steps, count);
    if (!count || !sum(ref.tokens) || !sum(run.tokens)) return [0, 0, Infinity];
    const draws = new Draws(0);
    const first = blockPicks(draws, 0, shared);
    const rest = blockPicks(draws, shared, count);
    const picks = [[...Array(count).keys()], ...first.map((row, i) => row.concat(rest[i]))];
    const ratios = picks.map((p) => (typicalMs(ref, p) / sum(p.map((i) => ref.tokens[i])))
      / (typicalMs(run, p) / sum(p.map((i) => run.tokens[i]))));
    const ratio = ratios[0];
    const samples = ratios.slice(1).filter(Number.isFinite).sort((a, b) => a - b);
    if (!samples.length) return [ratio, 0, Infinity];
    const tail = (1 - V.confidence) / 2 * 100;
    return [ratio, Math.min(percentile(samples, tail), ratio), Math.max(percentile(samples, 100 - tail), ratio)];
  }

  const tooClose = (ratio, low, high) => (low <= 1 && 1 <= high) || (1 / V.smallestCalled < ratio && ratio < V.smallestCalled);

  function standing(name, trace, reference) {
    const decode = trace.steps.filter((s) => !s.prefill);
    const typical = decodeMsPerToken(trace.steps) || 0;
    const measured = sum(decode.map(stepMs)) || 1;
    const [speedup, low, high] = speedRatio(reference, trace);
    return {name, label: label(name), steps: decode.length,
      tau: decode.length ? sum(decode.map((s) => s.token_ids.length)) / decode.length : 0, ms: typical,
      draftMs: typical * sum(decode.map((s) => s.draft_ms)) / measured, verifyMs: typical * sum(decode.map((s) => s.verify_ms)) / measured,
      prefillMs: sum(trace.steps.filter((s) => s.prefill).map(stepMs)), speedup, tie: tooClose(speedup, low, high)};
  }

  function noVerdict(traces) {
    const reference = V.reference;
    if (!traces.has(reference)) {
      return `No verdict: these runs hold no ${label(reference).toLowerCase()} decoding run, so there is nothing to compare their speed with.`;
    }
    if (traces.size < 2) return `No verdict: this file holds ${label(reference).toLowerCase()} decoding alone.`;
    const untimed = [...traces].filter(([, t]) => decodeMsPerToken(t.steps) === null).map(([n]) => label(n));
    if (untimed.length) {
      return `No verdict: ${untimed.join(", ")} ${untimed.length === 1 ? "has" : "have"} no timed decode step, so no speed can be derived.`;
    }
    return "";
  }

  function verdictOf(traces) {
    // verdict.verdict, with its headline and why
    if (noVerdict(traces)) return null;
    const ref = traces.get(V.reference);
    const standings = [standing(V.reference, ref, ref),
      ...[...traces].filter(([n]) => n !== V.reference).map(([n, t]) => standing(n, t, ref))];
    const decided = standings.every((s) => s.steps >= V.minSteps);
    const fastest = standings.reduce((best, s) => (s.speedup > best.speedup ? s : best));
    const leaders = [fastest.name];
    for (let i = 0; i < leaders.length; i++) {
      for (const s of standings) {
        if (!leaders.includes(s.name) && (!decided || tooClose(...speedRatio(traces.get(leaders[i]), traces.get(s.name))))) leaders.push(s.name);
      }
    }
    const [first, ...others] = standings;
    const figures = others.map((s) => `${s.label} ${fixed(s.speedup, 2)}× ${first.label.toLowerCase()}${s.tie ? " (too close to call)" : ""}`).join(", ");
    let headline;
    if (!decided) headline = `Too short to call: ${figures}. A few more tokens would let the race tell its noise from a difference.`;
    else if (leaders.length === standings.length) headline = `A tie: ${figures}; each is too close to call against another, so this race names no winner.`;
    else {
      const names = leaders.map(label);
      headline = `${names.length === 1 ? `${names[0]} wins` : `${names.join(" and ")} tie for the lead`}: ${figures}.`;
    }
    const parts = [`${first.label} ${fixed(first.ms, 0)} ms per token`, ...others.map((s) => `${s.label} ${fixed(s.ms, 0)} ms per token `
      + `(tau ${fixed(s.tau, 2)}: ${fixed(s.draftMs, 0)} ms drafting and ${fixed(s.verifyMs, 0)} ms verifying per token)`)];
    const prefill = standings.map((s) => `${s.label} ${fixed(s.prefillMs, 0)}`).join(", ");
    const why = `Why: ${parts.join("; ")}. Prefill, timed apart: ${prefill} ms, counted in no speed.`;
    return {headline, why, kind: leaders.length > 1 || !decided ? "tie" : "win"};
  }

  function headlineNode(traces) {
    const result = verdictOf(traces);
    if (result === null) return el("div", "headline empty", noVerdict(traces));
    const box = el("div", `headline ${result.kind}`);
    box.append(el("b", "", result.headline), el("div", "why", result.why));
    return box;
  }

  function readable(x) {
    // ddd.numbers.readable: three significant digits, never fewer than the whole part, no exponent
    if (!Number.isFinite(x)) return String(x);
    if (x === 0) return "0";
    const magnitude = Math.floor(Math.log10(Math.abs(x)));
    if (magnitude >= 2) return String(Math.round(Number(x.toPrecision(3))));
    return String(Number(fixed(x, 2 - magnitude)));
  }

  function countersNode(method, trace, at) {
    const box = el("div", "counters");
    box.append(el("b", "", label(method)), " ");
    if (!trace) {
      box.append(el("span", "status", "not run"));
      return box;
    }
    const c = counts(trace.steps.slice(0, at + 1));
    const items = [["tokens", String(c.tokens)], ["decode tokens/s", c.rate ? readable(c.rate) : "–"],
      ["prefill", `${fixed(c.prefillMs, 0)} ms`], ["target forwards", String(c.forwards)],
      ["tau", method === "plain" ? "1.00" : fixed(c.tau, 2)], ["elapsed", `${fixed(c.totalMs / 1000, 2)} s`]];
    for (const [k, v] of items) {
      const badge = el("span", "badge");
      badge.append(el("span", "k", k), " ", el("span", "v", v));
      box.append(badge);
    }
    const done = at >= trace.steps.length - 1 && trace.stop_reason;
    box.append(el("span", "status", done ? `done: ${trace.stop_reason}` : ""));
    return box;
  }

  function messageFigure(title, words, height) {
    return {data: [], layout: {title: {text: plotText(title), font: {size: 14}}, height, paper_bgcolor: "white", plot_bgcolor: "white",
      xaxis: {visible: false}, yaxis: {visible: false}, margin: {l: 10, r: 10, t: 40, b: 10},
      annotations: [{text: words, x: 0.5, y: 0.5, xref: "paper", yref: "paper", showarrow: false, font: {size: 13, color: "#475569"}}]}};
  }

  function shownNodes(pool, dropped) {
    const keep = new Set();
    const byDepth = new Map();
    for (const n of pool) {
      if (n.status !== "pruned") keep.add(n.index);
      else {
        if (!byDepth.has(n.depth)) byDepth.set(n.depth, []);
        byDepth.get(n.depth).push(n);
      }
    }
    for (const group of byDepth.values()) {
      group.sort((a, b) => score(b) - score(a));
      group.slice(0, dropped).forEach((n) => keep.add(n.index));
    }
    const parents = new Map(pool.map((n) => [n.index, n.parent]));
    for (const start of [...keep]) {
      let parent = parents.has(start) ? parents.get(start) : -1;
      while (parent >= 0 && !keep.has(parent)) {
        keep.add(parent);
        parent = parents.has(parent) ? parents.get(parent) : -1;
      }
    }
    return keep;
  }

  // As the app's tree (components/tree.py, bounded): at most treeLevels levels and treeNodes nodes, the root and
  // the accepted path first, then verified before pruned nodes by score, each with its ancestors.
  function bounded(pool, keep) {
    const shallow = pool.filter((n) => keep.has(n.index) && n.depth <= K.limits.treeLevels);
    if (shallow.length <= K.limits.treeNodes) return new Set(shallow.map((n) => n.index));
    const parents = new Map(pool.map((n) => [n.index, n.parent]));
    const key = (n) => [n.status !== "root", n.status !== "accepted", n.status === "pruned"].map(Number);
    const order = shallow.slice().sort((a, b) => {
      const [ka, kb] = [key(a), key(b)];
      for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i] - kb[i];
      return score(b) - score(a);
    });
    const chosen = new Set();
    for (const node of order) {
      const chain = [];
      let index = node.index;
      while (index >= 0 && !chosen.has(index) && chain.length <= K.limits.treeLevels) {
        chain.push(index);
        index = parents.has(index) ? parents.get(index) : -1;
      }
      if (chosen.size + chain.length > K.limits.treeNodes) break;
      chain.forEach((i) => chosen.add(i));
    }
    return chosen;
  }

  function treeFigure(trace, at) {
    const name = trace ? label(trace.method) : "Draft";
    if (!trace) return messageFigure(`${name} draft tree`, "No run of this method in the file.", 480);
    const step = trace.steps[Math.min(at, trace.steps.length - 1)];
    const head = `${name} · step ${step.index}`;
    if (step.prefill) return messageFigure(head, "Prefill: the target read the prompt and produced the first token.<br>No draft tree in this step.", 480);
    if (!step.pool.length) return messageFigure(head, "This step was not recorded with its draft tree.", 480);
    const width = Number(trace.settings.beam_width) || 10;
    const wanted = shownNodes(step.pool, Math.min(width, K.droppedShown));
    const keep = bounded(step.pool, wanted);
    const onPath = new Set(step.accepted_path);
    const nodes = new Map();
    for (const n of step.pool) if (keep.has(n.index)) nodes.set(n.index, Object.assign({children: [], onPath: onPath.has(n.index)}, n));
    for (const n of nodes.values()) if (nodes.has(n.parent)) nodes.get(n.parent).children.push(n);
    // x = draft level; within a level, depth-first order with siblings by draft rank (as the app lays it out)
    const columns = new Map();
    const stack = [step.pool[0].index];
    while (stack.length) {
      const node = nodes.get(stack.pop());
      if (!columns.has(node.depth)) columns.set(node.depth, []);
      columns.get(node.depth).push(node);
      const children = node.children.slice().sort((a, b) => (b.rank - a.rank) || (score(b) - score(a)));
      stack.push(...children.map((c) => c.index));
    }
    const pos = new Map();
    for (const [depth, level] of columns) level.forEach((n, i) => pos.set(n.index, [depth, 1 - 2 * (i + 0.5) / level.length]));
    const edges = [];
    for (const n of nodes.values()) {
      if (nodes.has(n.parent)) edges.push([pos.get(n.parent), pos.get(n.index), n.onPath && nodes.get(n.parent).onPath]);
    }
    let bonus = null;
    if (step.bonus_id !== null) {
      const last = step.accepted_path.length ? step.accepted_path[step.accepted_path.length - 1] : step.pool[0].index;
      if (pos.has(last)) {
        const [x, y] = pos.get(last);
        bonus = {x: x + 0.5, y, text: step.bonus_text};
        edges.push([[x, y], [x + 0.5, y], true]);
      }
    }
    const deepest = Math.max(step.draft_calls, ...step.pool.map((n) => n.depth));
    const levels = Math.min(deepest, K.limits.treeLevels);
    const ghost = step.max_draft_calls > step.draft_calls && step.draft_calls <= K.limits.treeLevels;
    const hidden = [];
    if (deepest > levels) hidden.push(`levels ${levels + 1}–${deepest} not drawn`);
    const within = step.pool.filter((n) => wanted.has(n.index) && n.depth <= K.limits.treeLevels).length;
    if (within > keep.size) hidden.push(`the best ${keep.size.toLocaleString("en")} of ${within.toLocaleString("en")} candidates drawn`);
    const perLevel = new Map();
    for (const [x] of pos.values()) perLevel.set(x, (perLevel.get(x) || 0) + 1);
    const height = Math.round(Math.min(Math.max(14 * Math.max(...perLevel.values()) + 150, 440), 900));
    const data = [];
    for (const accepted of [false, true]) {
      const xs = [];
      const ys = [];
      for (const [[x0, y0], [x1, y1], ok] of edges) {
        if (ok !== accepted) continue;
        xs.push(x0, x1, null);
        ys.push(y0, y1, null);
      }
      if (xs.length) {
        data.push({type: "scatter", x: xs, y: ys, mode: "lines", hoverinfo: "skip", showlegend: false,
          line: {color: accepted ? K.colors.accepted : "rgba(100,116,139,0.35)", width: accepted ? 3 : 1}});
      }
    }
    const cut = (s, limit) => {
      const shown = visible(s);
      return plotText(shown.length <= limit ? shown : `${shown.slice(0, limit - 1)}…`);
    };
    for (const status of ["pruned", "rejected", "root", "accepted"]) {
      const group = [...nodes.values()].filter((n) => n.status === status);
      if (!group.length) continue;
      const always = status !== "pruned" && status !== "rejected";
      data.push({type: "scatter", meta: status, mode: "markers+text", x: group.map((n) => pos.get(n.index)[0]),
        y: group.map((n) => pos.get(n.index)[1]),
        text: group.map((n) => (always || perLevel.get(pos.get(n.index)[0]) <= 22 ? cut(n.text, always ? 14 : 6) : "")),
        textposition: K.labelPositions[status] || "middle right",
        textfont: {size: always ? 12 : 10, color: status === "pruned" ? "#64748b" : "#0f172a"},
        marker: {color: K.colors[status], size: always ? 12 : 8, symbol: status === "pruned" ? "circle-open" : "circle",
          line: {width: status === "pruned" ? 1.5 : 0.5, color: status === "pruned" ? K.colors[status] : "white"}},
        hovertext: group.map((n) => `<b>${plotText(visible(n.text))}</b><br>token id ${n.token_id}<br>${K.statusNames[status]}`
          + (n.status === "root" ? "" : `<br>draft probability ${Math.exp(n.logprob).toFixed(3)}<br>cumulative score ${n.score.toFixed(2)}<br>rank ${n.rank} among its siblings`)),
        hoverinfo: "text", name: `${K.statusNames[status]} (${group.length})`});
    }
    if (bonus) {
      data.push({type: "scatter", meta: "bonus", mode: "markers+text", x: [bonus.x], y: [bonus.y], text: [cut(bonus.text, 14)],
        textposition: K.labelPositions.bonus, textfont: {size: 12, color: "#0f172a"},
        marker: {color: K.colors.bonus, size: 15, symbol: "star", line: {width: 0.5, color: "white"}},
        hovertext: [`<b>${plotText(visible(bonus.text))}</b><br>bonus token: chosen by the target itself`], hoverinfo: "text",
        name: `${K.statusNames.bonus} (1)`});
    }
    const shapes = [];
    for (let level = 1; level <= levels; level++) {
      shapes.push({type: "rect", xref: "x", yref: "paper", x0: level - 0.5, x1: level + 0.5, y0: 0, y1: 1,
        fillcolor: K.bandColors[level % 2], line: {width: 0}, layer: "below"});
    }
    const notes = [];
    if (ghost) {
      const band = levels + 0.55;
      shapes.push({type: "rect", xref: "x", yref: "paper", x0: band, x1: band + 0.6, y0: 0, y1: 1, fillcolor: K.ghostColor,
        line: {width: 1, color: K.ghostLine, dash: "dot"}, layer: "below"});
      notes.push({x: band + 0.3, y: 0.5, xref: "x", yref: "paper", textangle: -90, showarrow: false,
        text: step.max_draft_calls === step.draft_calls + 1 ? `level ${step.max_draft_calls} not drafted`
          : `levels ${step.draft_calls + 1}–${step.max_draft_calls} not drafted`, font: {size: 11, color: "rgba(109,40,217,0.8)"}});
    }
    if (hidden.length) {
      notes.push({x: 1, y: -0.02, xref: "paper", yref: "paper", xanchor: "right", yanchor: "top", showarrow: false,
        text: hidden.join("; "), font: {size: 11, color: "#b45309"}});
    }
    const checks = step.checks.filter((c) => c.call <= levels).sort((a, b) => a.call - b.call);
    if (checks.length) {
      notes.push({x: 0, y: 1.0, xref: "x", yref: "paper", yanchor: "bottom", showarrow: false, text: "H:", font: {size: 10, color: "#475569"}});
      checks.forEach((check, row) => notes.push({x: check.call, y: 1.0 + 0.04 * (row % 3), xref: "x", yref: "paper", yanchor: "bottom",
        showarrow: false, text: `${check.confidence.toFixed(2)}${check.stop ? " stop" : ""}`,
        font: {size: 10, color: check.stop ? "#dc2626" : "#15803d"}}));
    }
    const ticks = Array.from({length: levels + 1}, (_, i) => i);
    return {data, layout: {
      title: {text: `${plotText(head)} · ${plural(step.draft_calls, "draft call")} · ${step.accepted} accepted`, font: {size: 14}},
      height, shapes, annotations: notes, margin: {l: 10, r: 10, t: checks.length ? 90 : 50, b: 40}, hovermode: "closest",
      paper_bgcolor: "white", plot_bgcolor: "white", font: {family: "Inter, system-ui, sans-serif", size: 12, color: "#0f172a"},
      legend: {orientation: "h", y: -0.08, x: 0, font: {size: 10}},
      xaxis: {range: [-1.0, levels + (ghost ? 1.3 : 0.7)], tickmode: "array", tickvals: ticks,
        ticktext: ticks.map((i) => (i ? String(i) : "root")), showgrid: false, zeroline: false},
      yaxis: {visible: false, range: [-1.08, 1.08]}, uirevision: `tree-${trace.method}`}};
  }

  function depthFigure(race, current) {
    const decode = (m) => (race.traces.has(m) ? race.traces.get(m).steps.filter((s) => !s.prefill) : []);
    if (!K.treeMethods.some((m) => decode(m).length)) {
      return messageFigure("Depth & confidence", `This file has no ${drafting} run to show depth and confidence for.`, 600);
    }
    const data = [];
    const shapes = [];
    const notes = [];
    for (const method of K.treeMethods) {
      const steps = decode(method);
      if (!steps.length) continue;
      const color = K.methodColors[method];
      const fixed = method === "eagle2";
      data.push({type: "scatter", meta: `${method}-depth`, x: steps.map((s) => s.index), y: steps.map((s) => s.draft_calls),
        name: `${label(method)} depth`, mode: fixed ? "lines" : "lines+markers", legendgroup: method, marker: {size: 6},
        line: {color, shape: fixed ? "hv" : "linear", width: fixed ? 3 : 2},
        hovertemplate: `${label(method)} step %{x}: %{y} draft calls<extra></extra>`});
      data.push({type: "bar", meta: `${method}-accepted`, x: steps.map((s) => s.index), y: steps.map((s) => s.accepted), name: `${label(method)} accepted`,
        marker: {color}, opacity: 0.75, legendgroup: method, xaxis: "x3", yaxis: "y3",
        hovertemplate: `${label(method)} step %{x}: %{y} draft tokens accepted<extra></extra>`});
    }
    const ddd = decode("ddd");
    if (ddd.length) {
      const limit = Math.max(...ddd.map((s) => s.max_draft_calls));
      shapes.push({type: "line", xref: "x domain", yref: "y", x0: 0, x1: 1, y0: limit, y1: limit, line: {color: "#a78bfa", dash: "dot", width: 1}});
      notes.push({xref: "x domain", yref: "y", x: 0, y: limit, yanchor: "bottom", xanchor: "left", showarrow: false,
        text: `DDD max ${limit}`, font: {size: 10, color: "#7c3aed"}});
      for (const stop of [false, true]) {
        const points = ddd.flatMap((s) => s.checks.filter((c) => c.stop === stop && Number.isFinite(c.confidence)).map((c) => [s.index, c]));
        if (!points.length) continue;
        data.push({type: "scatter", x: points.map(([i]) => i), y: points.map(([, c]) => c.confidence), mode: "markers",
          name: stop ? "H → stop" : "H → go deeper", xaxis: "x2", yaxis: "y2",
          marker: {color: stop ? "#dc2626" : "#16a34a", size: 8, symbol: stop ? "x" : "circle"},
          hovertext: points.map(([i, c]) => `step ${i}, after draft call ${c.call}: H = ${c.confidence.toFixed(3)} → ${stop ? "stop" : "draft deeper"}`),
          hoverinfo: "text"});
      }
      const threshold = race.traces.get("ddd").settings.threshold;
      if (typeof threshold === "number") {
        const xs = ddd.map((s) => s.index);
        data.push({type: "scatter", x: [Math.min(...xs), Math.max(...xs)], y: [threshold, threshold], mode: "lines",
          name: `threshold ${threshold}`, xaxis: "x2", yaxis: "y2", line: {color: "#dc2626", dash: "dash", width: 1.5}, hoverinfo: "skip"});
      }
    }
    shapes.push({type: "line", xref: "x", yref: "paper", x0: current, x1: current, y0: 0, y1: 1, line: {color: "#f59e0b", width: 2}});
    const domains = [["", [0.66, 1.0], "draft calls per step (tree depth)", "calls"], ["2", [0.31, 0.59], "DDD confidence H at each check", "H"],
      ["3", [0.0, 0.22], "draft tokens accepted per step (each step also adds one bonus token)", "accepted"]];
    const layout = {height: 600, barmode: "group", margin: {l: 50, r: 10, t: 60, b: 90}, hovermode: "closest",
      paper_bgcolor: "white", plot_bgcolor: "white", font: {family: "Inter, system-ui, sans-serif", size: 12, color: "#0f172a"},
      legend: {orientation: "h", y: -0.2, yanchor: "top", x: 0, font: {size: 10}}, shapes, annotations: notes, uirevision: "depth"};
    for (const [suffix, [low, high], title, axis] of domains) {
      notes.push({text: title, xref: "paper", yref: "paper", x: 0, y: high, xanchor: "left", yanchor: "bottom", showarrow: false, font: {size: 12}});
      layout[`xaxis${suffix}`] = Object.assign({anchor: `y${suffix}`, showticklabels: suffix === "3"},
        suffix ? {matches: "x"} : {}, suffix === "3" ? {title: {text: "step"}} : {});
      layout[`yaxis${suffix}`] = {anchor: `x${suffix}`, domain: [low, high], title: {text: axis}, rangemode: suffix !== "2" ? "tozero" : "normal"};
    }
    return {data, layout};
  }

  function narrationNode(race, at) {
    const box = document.createDocumentFragment();
    for (const method of K.treeMethods) {
      if (!race.traces.has(method)) continue;
      const trace = race.traces.get(method);
      const step = trace.steps[Math.min(at, trace.steps.length - 1)];
      const p = el("p");
      if (at >= trace.steps.length) p.append(el("i", "", `${label(method)} had already finished; its last step: `));
      const ms = (x) => `${x.toFixed(0)} ms`;
      if (step.prefill) {
        p.append(el("b", "", "Step 0 — prefill."), ` The target read the ${plural(trace.prompt_tokens, "prompt token")} in one forward pass `
          + `(${ms(stepMs(step))}) and produced ${step.text ? quoted(step.text) : "its first token"}.`);
      } else if (!step.draft_calls) {
        p.append(el("b", "", `Step ${step.index} — ${label(method)}.`), ` One target forward (${ms(stepMs(step))}) produced ${quoted(step.text)}.`);
      } else {
        const nodes = new Map(step.pool.map((n) => [n.index, n]));
        const accepted = step.accepted_path.slice(1, 1 + step.accepted).map((i) => quoted(nodes.get(i).text));
        const listed = accepted.slice(0, 5).join(", ") + (accepted.length > 5 ? ` and ${accepted.length - 5} more` : "");
        const bonus = step.bonus_id !== null ? quoted(step.bonus_text) : "a token of its own";
        let words = ` The draft head built ${plural(step.draft_calls, "level")} (${ms(step.draft_ms)}); the target checked `
          + `${Math.max(step.verified - 1, 0)} candidates in one forward pass (${ms(step.verify_ms)}) and accepted `
          + `${plural(step.accepted, "draft token")}${accepted.length ? ` (${listed})` : ""}, then added ${bonus} itself (the bonus token).`;
        if (method === "ddd" && step.checks.length) {
          const threshold = trace.settings.threshold;
          words += ` DDD checked its confidence after ${step.checks.map((c) => `call ${c.call}: H = ${c.confidence.toFixed(2)}${c.stop ? " (stop)" : ""}`).join(", ")}`
            + `${typeof threshold === "number" ? ` against the threshold ${threshold}` : ""}; it drafted ${step.draft_calls} of at most ${step.max_draft_calls} levels.`;
        }
        if (method === K.costMethod && step.checks.length) {
          const c = step.checks[step.checks.length - 1];
          const n = (x) => x.toFixed(2);
          words += ` The cost rule weighed its tree after every draft call; at its last weighing (call ${c.call}) the best tree, `
            + `${plural(c.verified, "verified token")}, expected E = ${n(c.expected)} accepted tokens in T = ${n(c.time)} plain steps, `
            + `(E + 1) / T = ${n((c.expected + 1) / c.time)} per plain step, and one more level dE = ${n(c.gain)} tokens for `
            + `dT = ${n(c.time_gain)} steps, so ${c.stop ? "it stopped there" : "only its limit stopped it"}; it drafted ${step.draft_calls} of at most `
            + `${step.max_draft_calls} levels.`;
        }
        const tokens = step.token_ids.length;
        words += ` Time: ${ms(stepMs(step))} for ${plural(tokens, "token")}.`;
        p.append(el("b", "", `Step ${step.index} — ${label(method)}.`), words);
      }
      box.append(p);
    }
    if (!box.childNodes.length) box.append(el("p", "", `This file has no ${drafting} run to narrate.`));
    return box;
  }

  class Loaded {
    constructor(race, name) {
      this.race = race;
      this.name = name;
      this.rounds = Math.max(...[...race.traces.values()].map((t) => t.steps.length));
      this.columns = race.traces.has(K.costMethod) ? K.columns : K.methods;
      this.trees = K.treeMethods.filter((m) => this.columns.includes(m));
    }
    html(key, at) {
      const [kind, method] = key.split("_");
      if (key === "narration") return narrationNode(this.race, at);
      const trace = this.race.traces.get(method);
      if (kind === "cnt") return countersNode(method, trace, at);
      return answerNode(trace, at, kind === "ans");
    }
    figure(key, at) {
      if (key === "depth") return depthFigure(this.race, at);
      return treeFigure(this.race.traces.get(key.split("_")[1]), at);
    }
    info() {
      const box = document.createDocumentFragment();
      const traces = this.race.traces;
      const first = K.treeMethods.map((m) => traces.get(m)).find(Boolean) || traces.values().next().value;
      const sampling = first.sampling;
      box.append(el("b", "", `Loaded file ${this.name}`), ` · ${this.race.title ? `${this.race.title} · ` : ""}Prompt: “${first.prompt.slice(0, 300)}”`,
        el("br"), `Model ${sourceName(first.model)} (${first.precision}, ${first.device}), head: ${sourceName(first.head)}, `
          + `${sampling.temperature ? `sampling (temperature ${sampling.temperature}, top-p ${sampling.top_p}, seed ${sampling.seed})` : "greedy"}.`);
      for (const method of K.treeMethods) {
        const trace = this.race.traces.get(method);
        if (trace) box.append(el("br"), `${label(method)}: ${Object.entries(trace.settings).map(([k, v]) => `${k} ${v}`).join(", ")}.`);
      }
      if (this.race.note) box.append(el("br"), this.race.note);
      return box;
    }
    headline() { return headlineNode(this.race.traces); }
    summary() { return null; }
    about() { return null; }
    timeline() { return null; }
  }

  // ---------------------------------------------------------------------------------------------------
  // Controls
  // ---------------------------------------------------------------------------------------------------

  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    $("play").textContent = "▶ Play";
  }

  function play() {
    if (timer !== null) return stop();
    if (!view) return undefined;
    if (index >= view.rounds - 1) render(0);
    $("play").textContent = "❚❚ Pause";
    timer = setInterval(() => {
      if (index >= view.rounds - 1) stop();
      else render(index + 1);
    }, PLAY_MS);
    return undefined;
  }

  async function choose(value) {
    message("");
    try {
      showRace(value === "file" ? loadedView : await example(Number(value)));
    } catch (err) {
      message(`Could not show that race: ${err.message}`);
      console.warn(err);
    }
  }

  async function upload(file) {
    if (!file) return;
    try {
      const race = await readRaceFile(file);
      loadedView = new Loaded(race, file.name);
      let option = $("example").querySelector("option[value=file]");
      if (!option) {
        option = el("option");
        option.value = "file";
        $("example").prepend(option);
      }
      option.textContent = `Loaded file: ${file.name}`;
      $("example").value = "file";
      message("");
      showRace(loadedView);
    } catch (err) {
      message(`Could not load that file: ${err instanceof RaceError ? err.message : `it cannot be read (${err.message}).`}`);
      if (!(err instanceof RaceError)) console.warn(err);
    } finally {
      $("upload").value = "";
    }
  }

  function start() {
    const menu = $("example");
    DATA.races.forEach((race, position) => {
      const option = el("option", "", race.title);
      option.value = String(position);
      menu.append(option);
    });
    menu.addEventListener("change", () => choose(menu.value));
    $("upload").addEventListener("change", (event) => upload(event.target.files[0]));
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
      message("This browser cannot decompress the recorded races (it lacks DecompressionStream): use a current browser.");
      return;
    }
    if (!hasPlotly) message("plotly.min.js did not load: keep it beside index.html. The texts still show; the figures cannot.");
    if (DATA.races.length) choose("0");
    else message("This page holds no recorded races: load a run file.");
  }

  start();
})();
