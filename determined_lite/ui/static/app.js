// det-lite dashboard: experiments, an experiment's trials and curves, a trial; served by `det-lite ui`.
// Plain browser JavaScript, no build step; charts are uPlot (static/vendor, MIT). Every request
// to /api/ carries the token of the printed URL in a header (kept in this origin's localStorage:
// per port, never sent anywhere by the browser on its own). Text from the store is always set as
// textContent, never parsed as HTML.
"use strict";

const TOKEN_KEY = "det-lite-ui-token";
const LIST_POLL_MS = 2000;
const PAGE_POLL_MS = 3000;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777",
  "#4b5563", "#65a30d"];

const detLite = { charts: {}, data: {}, timers: [], route: null, renders: 0 };
window.detLite = detLite;

// --- plumbing ------------------------------------------------------------------------------------

function token() {
  const fromUrl = new URLSearchParams(window.location.search).get("token");
  if (fromUrl) localStorage.setItem(TOKEN_KEY, fromUrl);
  return fromUrl || localStorage.getItem(TOKEN_KEY) || "";
}

async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = Object.assign({ "X-Det-Lite-Token": token() }, init.headers || {});
  const response = await fetch(path, init);
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (response.status === 403) throw new Error("forbidden: open the URL det-lite ui printed (it carries the token)");
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function num(value, digits) {
  if (value === null || value === undefined) return "-";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 1e4 || Math.abs(value) < 1e-3 ? value.toExponential(3) : value.toFixed(digits || 4);
}

// An axis label: 3 significant digits; on a log scale only the powers of ten are labelled.
function tick(value, logScale) {
  if (value === null || value === undefined) return "";
  if (logScale && value > 0 && Math.abs(Math.log10(value) - Math.round(Math.log10(value))) > 1e-9) return "";
  return String(Number(value.toPrecision(3)));
}

function when(seconds) {
  if (!seconds) return "-";
  const d = new Date(seconds * 1000);
  return d.toISOString().slice(0, 19).replace("T", " ");
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// A state as the CLI words it (`shown`: ASHA-stopped, ACTIVE (pause requested)...), coloured by
// the stored state.
function stateBadge(state, shown) {
  return el("span", { className: `state state-${state}`, "data-state": state }, shown || state);
}

// "val_loss ↓ 0.0123": the searcher metric, its direction and the best value.
function metricText(metric, smallerIsBetter, value) {
  if (!metric) return num(value);
  return `${metric} ${smallerIsBetter ? "↓" : "↑"} ${num(value)}`;
}

function setStatus(text) { document.getElementById("status").textContent = text; }

function every(ms, fn) {
  detLite.timers.push(setInterval(() => fn().catch(showError), ms));
}

function showError(error) {
  setStatus(`error: ${error.message}`);
  console.warn(error);  // a failed poll is reported on the page, not as a JavaScript error
}

// --- charts --------------------------------------------------------------------------------------

function smooth(values, weight) {
  if (!weight) return values;
  let last = null, debias = 0;
  return values.map((v) => {
    if (v === null || v === undefined) return null;
    debias = debias * weight + (1 - weight);
    last = last === null ? v * (1 - weight) : last * weight + (1 - weight) * v;
    return last / debias;
  });
}

function aligned(series, weight, logScale) {
  const xs = Array.from(new Set(series.flatMap((s) => s.x))).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const columns = series.map((s) => {
    const column = new Array(xs.length).fill(null);
    smooth(s.y, weight).forEach((y, i) => {
      column[index.get(s.x[i])] = logScale && y !== null && y <= 0 ? null : y;
    });
    return column;
  });
  return [xs, ...columns];
}

function drawChart(name, container, options, data) {
  if (detLite.charts[name]) detLite.charts[name].destroy();
  container.replaceChildren();
  const width = Math.max(300, container.clientWidth || 800);
  const chart = new uPlot(Object.assign({ width, height: 300 }, options), data, container);
  detLite.charts[name] = chart;
  return chart;
}

function curveChart(name, container, payload, labels, view) {
  const series = payload.series;
  const data = aligned(series, view.smoothing, view.log);
  const shape = JSON.stringify([payload.kind, payload.metric, view.log, series.map((s) => s.label || s.trial_id)]);
  const order = Array.from(new Set(series.map((s) => s.trial_id)));  // one colour per trial
  const current = detLite.charts[name];
  detLite.data[name] = payload;
  if (current && current.shape === shape) {  // a live refresh: new data, same chart (zoom kept)
    current.setData(data, false);
    current.redraw();
    return current;
  }
  const options = {
    title: `${payload.kind} ${payload.metric}`,
    scales: { x: { time: false }, y: view.log ? { distr: 3 } : {} },
    axes: [{ label: "batches", values: (u, ticks) => ticks.map((v) => (Number.isInteger(v) ? v : "")) },
      { label: payload.metric, size: 70, values: (u, ticks) => ticks.map((v) => tick(v, view.log)) }],
    series: [{ label: "batches" }].concat(series.map((s) => ({
      label: s.label || labels(s.trial_id), stroke: COLORS[order.indexOf(s.trial_id) % COLORS.length], width: 1.5,
      dash: s.dash, spanGaps: true, points: { show: s.x.length < 60 },
    }))),
  };
  const chart = drawChart(name, container, options, data);
  chart.shape = shape;
  return chart;
}

// --- shared pieces -------------------------------------------------------------------------------

function table(headers, rows, attrs) {
  return el("div", { className: "scroll" }, el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
}

function checkpointsTable(checkpoints) {
  if (!checkpoints.length) return el("p", { className: "muted" }, "No checkpoints.");
  const link = (c) => el("a", { className: "download", download: `${c.uuid}.tar.gz`,
    href: `/api/checkpoints/${c.uuid}/download?${new URLSearchParams({ token: token() })}` }, "Download");
  return table(["UUID", "Trial", "Batch", "Metrics", "Size", ""], checkpoints.map((c) => el("tr", { "data-uuid": c.uuid },
    el("td", { title: c.path }, c.uuid), el("td", {}, el("a", { href: `#/trials/${c.trial_id}` }, c.trial_id)),
    el("td", { className: "num" }, c.total_batches),
    el("td", {}, Object.entries(c.metrics || {}).map(([k, v]) => `${k}=${num(v)}`).join(" ")),
    el("td", { className: "num" }, bytes(c.size)), el("td", {}, c.size === null ? "" : link(c)))), { id: "checkpoints" });
}

function curvesSection(name, metrics, defaultMetric, fetchCurves, labels) {
  const kinds = ["validation", "training"].filter((k) => (metrics[k] || []).length);
  const section = el("section", { id: `${name}-section` }, el("h2", {}, "Learning curves"));
  if (!kinds.length) {
    section.append(el("p", { className: "muted" }, "No metrics yet."));
    return section;
  }
  const pairs = metricPairs(metrics);
  if (pairs.length) kinds.push("both");
  const options = { ...metrics, both: pairs.map((p) => p.join(" / ")) };
  const view = { kind: kinds[0], metric: null, log: false, smoothing: 0 };
  const kind = el("select", { id: `${name}-kind` }, kinds.map((k) => el("option", { value: k }, k === "both" ? "training + validation" : k)));
  const metric = el("select", { id: `${name}-metric` });
  const log = el("input", { type: "checkbox", id: `${name}-log` });
  const smoothing = el("input", { type: "range", min: 0, max: 0.99, step: 0.01, value: 0, id: `${name}-smoothing` });
  const box = el("div", { className: "chart", id: `${name}-chart` });
  const fillMetrics = () => {
    const names = options[view.kind] || [];
    view.metric = names.includes(view.metric) ? view.metric : (names.includes(defaultMetric) ? defaultMetric : names[0]);
    metric.replaceChildren(...names.map((m) => el("option", { value: m, selected: m === view.metric }, m)));
  };
  const redraw = async () => {
    view.log = log.checked; view.smoothing = Number(smoothing.value);
    const payload = view.kind === "both" ? await overlaid(fetchCurves, view.metric, labels) : await fetchCurves(view.kind, view.metric);
    curveChart(name, box, payload, labels, view);
  };
  kind.addEventListener("change", () => { view.kind = kind.value; fillMetrics(); redraw().catch(showError); });
  metric.addEventListener("change", () => { view.metric = metric.value; redraw().catch(showError); });
  log.addEventListener("change", () => redraw().catch(showError));
  smoothing.addEventListener("change", () => redraw().catch(showError));
  fillMetrics();
  section.append(el("div", { className: "controls" }, el("label", {}, "Kind ", kind), el("label", {}, "Metric ", metric),
    el("label", {}, log, " log scale"), el("label", {}, "Smoothing ", smoothing)), box);
  section.redraw = redraw;
  return section;
}

// [training, validation] metric names that are one quantity: `loss` with `loss`, `val_loss` or
// `validation_loss`.
function metricPairs(metrics) {
  const training = metrics.training || [];
  return (metrics.validation || []).flatMap((v) => {
    const t = training.find((name) => v === name || v === `val_${name}` || v === `validation_${name}`);
    return t === undefined ? [] : [[t, v]];
  });
}

// One payload with each trial's training curve (dashed) and validation curve of a pair "t / v".
async function overlaid(fetchCurves, pair, labels) {
  const [t, v] = pair.split(" / ");
  const [train, val] = await Promise.all([fetchCurves("training", t), fetchCurves("validation", v)]);
  const series = train.series.map((s) => ({ ...s, label: `${labels(s.trial_id)} training ${t}`, dash: [6, 4] }))
    .concat(val.series.map((s) => ({ ...s, label: `${labels(s.trial_id)} validation ${v}` })));
  return { kind: "training + validation", metric: pair, width: train.width, series };
}

function logsSection(path, live) {
  const search = el("input", { type: "search", placeholder: "search", id: "log-search" });
  const tail = el("input", { type: "number", min: 1, value: 200, id: "log-tail", style: "width:80px" });
  const out = el("pre", { id: "logs" });
  const refresh = async () => {
    const query = new URLSearchParams({ tail: tail.value || "200", q: search.value });
    const body = await api(`${path}?${query}`);
    const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.textContent = body.lines.map((l) => (l.trial_id ? `[trial ${l.trial_id}] ` : "") + l.line).join("\n")
      || (search.value ? "(no matching line)" : "(no log lines yet)");
    if (atEnd) out.scrollTop = out.scrollHeight;
  };
  search.addEventListener("change", () => refresh().catch(showError));
  tail.addEventListener("change", () => refresh().catch(showError));
  if (live) every(PAGE_POLL_MS, refresh);
  const section = el("section", { id: "logs-section" }, el("h2", {}, "Logs"),
    el("div", { className: "controls" }, el("label", {}, "Search ", search), el("label", {}, "Tail ", tail)), out);
  refresh().catch(showError);
  return section;
}

// --- pages ---------------------------------------------------------------------------------------

function experimentRow(e) {
  return el("tr", { "data-experiment": e.id },
    el("td", {}, el("a", { href: `#/experiments/${e.id}` }, e.id)),
    el("td", {}, el("a", { href: `#/experiments/${e.id}`, className: "exp-name" }, e.name || `experiment ${e.id}`)),
    el("td", {}, stateBadge(e.state, e.display_state)),
    el("td", {}, e.progress === null ? "-" : [el("span", { className: "bar" },
      el("span", { style: `width:${Math.round(100 * e.progress)}%` })), `${Math.round(100 * e.progress)}%`]),
    el("td", { className: "num best-metric" }, metricText(e.metric, e.smaller_is_better, e.best_metric)),
    el("td", { className: "num" }, e.num_trials), el("td", {}, when(e.created_at)), el("td", {}, when(e.ended_at)));
}

async function experimentsPage(main) {
  const state = el("select", { id: "filter-state" }, ["", "ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "ERROR"]
    .map((s) => el("option", { value: s }, s || "any")));
  const name = el("input", { type: "search", id: "filter-name", placeholder: "name" });
  const body = el("tbody", { id: "experiments" });
  const refresh = async () => {
    const query = new URLSearchParams({ state: state.value, name: name.value });
    const data = await api(`/api/experiments?${query}`);
    body.replaceChildren(...data.experiments.map(experimentRow));
    detLite.data.experiments = data.experiments;
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  };
  state.addEventListener("change", () => refresh().catch(showError));
  name.addEventListener("input", () => refresh().catch(showError));
  main.replaceChildren(el("h1", {}, "Experiments"), el("section", {},
    el("div", { className: "controls" }, el("label", {}, "State ", state), el("label", {}, "Name ", name)),
    el("div", { className: "scroll" }, el("table", { id: "experiments-table" }, el("thead", {}, el("tr", {},
      ["ID", "Name", "State", "Progress", "Best metric", "Trials", "Started", "Ended"].map((h) => el("th", {}, h)))),
    body))));
  await refresh();
  every(LIST_POLL_MS, refresh);
}

// Pause, Activate and Kill, only those that apply to the experiment's state now (`exp.actions`).
function actionsBar(reload) {
  const message = el("div", { className: "message", id: "action-message" });
  const buttons = el("div", { className: "actions", id: "actions" });
  const act = async (id, action) => {
    if (!window.confirm(`${action[0].toUpperCase()}${action.slice(1)} experiment ${id}?`)) return;
    try {
      const result = await api(`/api/experiments/${id}/${action}`, { method: "POST" });
      message.className = "message"; message.textContent = result.messages.join(" ");
    } catch (error) {
      message.className = "message error"; message.textContent = error.message;
    }
    await reload();
  };
  const board = el("span", { id: "tensorboard-box" });
  const tensorboard = async (id) => {
    try {
      const result = await api(`/api/experiments/${id}/tensorboard`, { method: "POST" });
      board.replaceChildren(el("a", { id: "tensorboard-link", href: result.url, target: "_blank", rel: "noopener" }, `TensorBoard ↗`));
    } catch (error) {
      board.replaceChildren(el("span", { className: "message error" }, error.message));
    }
  };
  const bar = el("div", {}, buttons, message);
  let shown = null;  // rebuilt only when the actions change: a poll never swaps a button being clicked
  bar.render = (exp) => {
    if (shown === exp.actions.join()) return;
    shown = exp.actions.join();
    buttons.replaceChildren(...exp.actions.map((action) => el("button",
      { id: action, className: action === "kill" ? "danger" : "", onclick: () => act(exp.id, action) },
      action[0].toUpperCase() + action.slice(1))),
    el("button", { id: "tensorboard", onclick: () => tensorboard(exp.id) }, "TensorBoard"), board);
  };
  return bar;
}

// The experiment's labels (comma-separated) and notes, saved together.
function annotationsSection(exp) {
  const labels = el("input", { type: "text", id: "labels", placeholder: "label, another", style: "width:420px" });
  const notes = el("textarea", { id: "notes", rows: 4, style: "width:100%" });
  const message = el("span", { className: "message", id: "annotations-message" });
  labels.value = (exp.labels || []).join(", ");
  notes.value = exp.notes || "";
  const save = async () => {
    try {
      const saved = await api(`/api/experiments/${exp.id}/annotations`, { method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ labels: labels.value.split(","), notes: notes.value }) });
      labels.value = saved.labels.join(", ");
      message.className = "message"; message.textContent = "saved";
    } catch (error) {
      message.className = "message error"; message.textContent = error.message;
    }
  };
  return el("section", { id: "annotations-section" }, el("h2", {}, "Labels and notes"),
    el("div", { className: "controls" }, el("label", {}, "Labels ", labels)), notes,
    el("div", { className: "actions" }, el("button", { id: "save-annotations", onclick: save }, "Save"), message));
}

function rungsSection(rungs) {
  return el("section", { id: "rungs" }, el("h2", {}, "ASHA rungs"), rungs.map((r) => el("div", { className: "rung" },
    el("strong", {}, `Bracket ${r.bracket}, rung ${r.rung}`), ` (trains to ${r.length}): `,
    r.trials.length ? r.trials.map((t) => el("span", { className: t.stopped ? "stopped" : (t.promoted ? "promoted" : "") },
      `trial ${t.trial_id ?? t.request_id} ${num(t.metric)}${t.promoted ? " ↑" : ""}${t.stopped ? " stopped" : ""}; `))
      : el("span", { className: "muted" }, "no report yet"))));
}

async function experimentPage(main, id) {
  let data = await api(`/api/experiments/${id}`);
  const exp = data.experiment;
  const labels = (trialId) => `trial ${trialId}`;
  const curves = curvesSection("curves", data.metrics, exp.metric,
    (kind, metric) => api(`/api/experiments/${id}/curves?${new URLSearchParams({ kind, metric })}`), labels);
  const hparams = hparamViews(data);
  const head = el("div", { id: "experiment-head" });
  const trials = trialsView();
  let actions = null;
  const renderHead = () => {
    const e = data.experiment;
    head.replaceChildren(el("h1", {}, `Experiment ${e.id}: `, el("span", { id: "experiment-name" }, e.name || "-"), " ",
      stateBadge(e.state, e.display_state)),
    el("p", { className: "muted" }, `progress ${e.progress === null ? "-" : Math.round(100 * e.progress) + "%"} · started ${when(e.created_at)} · ended ${when(e.ended_at)}`));
    trials.render(data);
    actions.render(e);
  };
  const reload = async () => { data = await api(`/api/experiments/${id}`); renderHead(); };
  actions = actionsBar(reload);
  document.getElementById("crumbs").replaceChildren(el("a", { href: "#/" }, "experiments"), ` / ${id}`);
  renderHead();
  main.replaceChildren(...[head, actions, trials, curves, hparams, annotationsSection(exp),
    data.rungs ? rungsSection(data.rungs) : null,
    el("section", {}, el("h2", {}, "Checkpoints"), checkpointsTable(data.checkpoints)),
    el("section", { id: "config-section" }, el("h2", {}, "Config"), el("pre", { id: "config" }, data.config_yaml)),
    logsSection(`/api/experiments/${id}/logs`, true)].filter(Boolean));
  if (curves.redraw) await curves.redraw();
  if (hparams.draw) hparams.draw();
  every(PAGE_POLL_MS, async () => {
    await reload();
    if (data.experiment.state !== "ACTIVE") return;
    if (curves.redraw) await curves.redraw();
    if (hparams.draw) hparams.draw(data);
  });
}

async function trialPage(main, id) {
  const data = await api(`/api/trials/${id}`);
  const t = data.trial;
  document.getElementById("crumbs").replaceChildren(el("a", { href: "#/" }, "experiments"), " / ",
    el("a", { href: `#/experiments/${data.experiment.id}` }, data.experiment.id), ` / trial ${id}`);
  const curves = curvesSection("trial-curves", data.metrics, data.metric,
    (kind, metric) => api(`/api/trials/${id}/curves?${new URLSearchParams({ kind, metric })}`), (tid) => `trial ${tid}`);
  const hparams = Object.entries(t.hparams).map(([k, v]) => el("tr", {}, el("td", {}, k),
    el("td", {}, typeof v === "object" ? JSON.stringify(v) : num(v))));
  const message = el("span", { className: "message", id: "trial-action-message" });
  const kill = async () => {
    if (!window.confirm(`Kill trial ${t.id}? The search goes on.`)) return;
    try {
      const result = await api(`/api/trials/${t.id}/kill`, { method: "POST" });
      message.className = "message"; message.textContent = result.messages.join(" ");
    } catch (error) {
      message.className = "message error"; message.textContent = error.message;
    }
  };
  main.replaceChildren(
    el("h1", {}, `Trial ${t.id} `, stateBadge(t.state, t.display_state)),
    el("div", { className: "actions" }, t.actions.map(() => el("button", { id: "kill-trial", className: "danger", onclick: kill }, "Kill trial")), message),
    el("p", { className: "muted" }, `experiment ${data.experiment.id} (${data.experiment.name || "-"}) · ${t.total_batches} batches · `
      + `best ${data.metric || "metric"} ${num(t.best_validation)} · restarts ${t.restarts} · ${t.where}`),
    curves, el("section", {}, el("h2", {}, "Hyperparameters"), table(["Name", "Value"], hparams, { id: "trial-hparams" })),
    el("section", {}, el("h2", {}, "Where it ran"), t.runs.length ? table(["Started", "Executor", "Host", "Slots", "GPUs"],
      t.runs.map((r) => el("tr", {}, el("td", {}, when(r.started_at)), el("td", {}, r.executor), el("td", {}, r.host),
        el("td", { className: "num" }, r.slots), el("td", {}, (r.devices || []).join(",") || "-"))), { id: "trial-runs" })
      : el("p", { className: "muted" }, "Not started yet.")),
    el("section", {}, el("h2", {}, "Checkpoints"), checkpointsTable(data.checkpoints)),
    logsSection(`/api/trials/${id}/logs`, t.state === "ACTIVE"));
  if (curves.redraw) await curves.redraw();
}

// --- router --------------------------------------------------------------------------------------

async function route() {
  detLite.timers.forEach(clearInterval);
  detLite.timers = [];
  Object.values(detLite.charts).forEach((c) => c.destroy());
  detLite.charts = {};
  detLite.data = {};
  const main = document.getElementById("main");
  document.getElementById("crumbs").replaceChildren();
  const hash = window.location.hash.replace(/^#/, "") || "/";
  detLite.route = hash;
  delete document.body.dataset.ready;
  let match;
  if ((match = hash.match(/^\/experiments\/(\d+)$/))) await experimentPage(main, Number(match[1]));
  else if ((match = hash.match(/^\/trials\/(\d+)$/))) await trialPage(main, Number(match[1]));
  else if (hash === "/models") await modelsPage(main);
  else if ((match = hash.match(/^\/compare\/(\d+(?:,\d+)*)$/))) await comparePage(main, match[1].split(",").map(Number));
  else await experimentsPage(main);
  detLite.renders += 1;
  document.body.dataset.ready = hash;
}

function start() {
  token();
  if (window.location.search.includes("token=")) {
    window.history.replaceState(null, "", window.location.pathname + window.location.hash);  // out of the address bar
  }
  window.addEventListener("hashchange", () => route().catch(showError));
  route().catch((error) => {
    document.getElementById("main").replaceChildren(el("p", { className: "message error", id: "page-error" }, error.message));
    showError(error);
  });
}

document.addEventListener("DOMContentLoaded", start);
