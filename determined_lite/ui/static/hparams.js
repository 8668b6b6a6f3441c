// det-lite dashboard: the hyperparameter views of Determined's web UI, hand-written SVG.
// Parallel coordinates (one axis per varying hyperparameter, then the searcher metric; one line per
// trial coloured by its metric), a scatter matrix (each pair of hyperparameters, the metric against
// each one on the diagonal) and a heat map of the best metric over two chosen hyperparameters.
// Each view leaves what it drew in detLite.data (parcoords, scatter, heatmap) for tests.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function hpType(data, name) {
  return (data.hparam_types || {})[name] || "";
}

function hpValue(trial, name) {
  const v = trial.varying[name];
  return v === null || v === undefined ? null : v;
}

// Where a value sits on an axis: pos(v) in 0..1, and the labels to draw. Numbers are linear, or
// logarithmic for a `log` hyperparameter (`type`: its type in the config; for the metric, when it
// is positive and spread over more than two decades); categorical ones and text are categories.
function axisScale(values, type) {
  const present = values.filter((v) => v !== null && v !== undefined);
  const numbers = present.length && present.every((v) => typeof v === "number");
  if (numbers && type !== "categorical") {
    const lo = Math.min(...present), hi = Math.max(...present);
    const log = lo > 0 && (type === undefined ? hi / lo > 100 : type === "log");
    const f = log ? Math.log10 : (v) => v;
    const span = f(hi) - f(lo);
    const pos = (v) => (span ? (f(v) - f(lo)) / span : 0.5);
    return { kind: log ? "log" : "linear", pos, ticks: lo === hi ? [lo] : [lo, hi], label: (v) => num(v) };
  }
  const categories = Array.from(new Set(present.map(String))).sort(numbers ? (a, b) => a - b : undefined);
  const pos = (v) => (categories.length > 1 ? categories.indexOf(String(v)) / (categories.length - 1) : 0.5);
  return { kind: "categorical", pos, ticks: categories, label: String };
}

// The searcher metric as a colour: blue for the best value, red for the worst (grey: none yet).
function metricColor(data) {
  const values = data.trials.map((t) => t.best_validation).filter((v) => v !== null);
  const lo = Math.min(...values), hi = Math.max(...values);
  const smaller = data.experiment.smaller_is_better !== false;
  return (v) => {
    if (v === null || v === undefined || !values.length) return "#9ca3af";
    let badness = hi === lo ? 0 : (v - lo) / (hi - lo);
    if (!smaller) badness = 1 - badness;
    return `hsl(${Math.round(220 * (1 - badness))}, 75%, 45%)`;
  };
}

function legend(data) {
  const values = data.trials.map((t) => t.best_validation).filter((v) => v !== null);
  if (!values.length) return el("span", { className: "muted" }, "no metric reported yet");
  const smaller = data.experiment.smaller_is_better !== false;
  const best = smaller ? Math.min(...values) : Math.max(...values);
  const worst = smaller ? Math.max(...values) : Math.min(...values);
  return el("span", { className: "legend" }, `${data.experiment.metric || "metric"}: best ${num(best)} `,
    el("span", { className: "gradient" }), ` worst ${num(worst)}`);
}

function parallelCoordinates(data, width) {
  const names = data.varying.concat([data.experiment.metric || "metric"]);
  const trials = data.trials.slice().sort((a, b) => (a.best_validation === null) - (b.best_validation === null)).reverse();
  const columns = names.map((n, i) => (i < data.varying.length ? trials.map((t) => hpValue(t, n)) : trials.map((t) => t.best_validation)));
  const scales = columns.map((c, i) => axisScale(c, i < data.varying.length ? hpType(data, names[i]) : undefined));
  const color = metricColor(data);
  const [H, top, bottom, left, right] = [300, 34, 24, 60, 90];
  const x = (i) => left + (names.length > 1 ? i * (width - left - right) / (names.length - 1) : 0);
  const y = (i, v) => top + (1 - scales[i].pos(v)) * (H - top - bottom);
  const root = svg("svg", { width, height: H, id: "parcoords", class: "hp-view" });
  const lines = trials.map((t, k) => {
    const values = columns.map((c) => c[k]);
    const points = values.map((v, i) => (v === null ? null : `${x(i).toFixed(1)},${y(i, v).toFixed(1)}`));
    const stroke = color(t.best_validation);
    root.append(svg("polyline", { points: points.filter(Boolean).join(" "), fill: "none", stroke, "stroke-width": 2,
      "stroke-opacity": 0.8, "data-trial": t.id }, svg("title", {}, `trial ${t.id}`)));
    return { trial_id: t.id, values, color: stroke };
  });
  names.forEach((name, i) => {
    const axis = svg("g", { class: "axis", "data-axis": name });
    axis.append(svg("line", { x1: x(i), x2: x(i), y1: top, y2: H - bottom, stroke: "#374151" }),
      svg("text", { x: x(i), y: top - 14, "text-anchor": "middle", class: "axis-name" }, name));
    scales[i].ticks.forEach((v) => axis.append(svg("text", { x: x(i) + 5, y: y(i, v) + 4, class: "tick" }, scales[i].label(v))));
    root.append(axis);
  });
  detLite.data.parcoords = { axes: names, scales: scales.map((s) => s.kind), lines };
  return root;
}

function scatterCell(points, xs, ys, color, size) {
  const pad = 8;
  const cell = svg("svg", { width: size, height: size, class: "scatter-cell" },
    svg("rect", { x: 0.5, y: 0.5, width: size - 1, height: size - 1, fill: "none", stroke: "#e5e7eb" }));
  points.forEach(([vx, vy, trial, metric]) => {
    if (vx === null || vy === null) return;
    cell.append(svg("circle", { cx: pad + xs.pos(vx) * (size - 2 * pad), cy: pad + (1 - ys.pos(vy)) * (size - 2 * pad),
      r: 4, fill: color(metric), "data-trial": trial }, svg("title", {}, `trial ${trial}`)));
  });
  return cell;
}

function scatterMatrix(data) {
  const names = data.varying;
  const metric = data.experiment.metric || "metric";
  const color = metricColor(data);
  const scales = Object.fromEntries(names.map((n) => [n, axisScale(data.trials.map((t) => hpValue(t, n)), hpType(data, n))]));
  const metricScale = axisScale(data.trials.map((t) => t.best_validation));
  const size = names.length > 3 ? 130 : 170;
  const grid = el("div", { className: "scatter-matrix", id: "scatter-matrix",
    style: `grid-template-columns: 90px repeat(${names.length}, ${size}px)` });
  const cells = [];
  grid.append(el("div", {}), ...names.map((n) => el("div", { className: "matrix-label" }, n)));
  names.forEach((row, i) => {
    grid.append(el("div", { className: "matrix-label" }, i === 0 ? `${row} (diagonal: ${metric})` : row));
    names.forEach((col, j) => {
      const ys = i === j ? metricScale : scales[row];
      const points = data.trials.map((t) => [hpValue(t, col), i === j ? t.best_validation : hpValue(t, row), t.id, t.best_validation]);
      cells.push({ row, col, y: i === j ? metric : row, points: points.filter((p) => p[0] !== null && p[1] !== null).map((p) => p.slice(0, 3)) });
      grid.append(el("div", { "data-cell": `${row}/${col}` }, scatterCell(points, scales[col], ys, color, size)));
    });
  });
  detLite.data.scatter = { hparams: names, cells };
  return grid;
}

// Up to `most` bins of a hyperparameter's values: each distinct value when there are few (or it is
// categorical), else equal ranges (of log10 when its axis is logarithmic).
function bins(values, type, most) {
  const scale = axisScale(values, type);
  const distinct = Array.from(new Set(values.filter((v) => v !== null).map((v) => (scale.kind === "categorical" ? String(v) : v))));
  if (scale.kind === "categorical" || distinct.length <= most) {
    distinct.sort((a, b) => (typeof a === "number" ? a - b : String(a).localeCompare(String(b))));
    return { labels: distinct.map((v) => scale.label(v)), of: (v) => distinct.indexOf(scale.kind === "categorical" ? String(v) : v) };
  }
  const edges = Array.from({ length: most + 1 }, (_, i) => i / most);
  const label = (i) => `${num(invert(values, scale, edges[i]))}–${num(invert(values, scale, edges[i + 1]))}`;
  return { labels: edges.slice(0, -1).map((_, i) => label(i)), of: (v) => Math.min(most - 1, Math.floor(scale.pos(v) * most)) };
}

function invert(values, scale, p) {
  const present = values.filter((v) => v !== null);
  const lo = Math.min(...present), hi = Math.max(...present);
  return scale.kind === "log" ? 10 ** (Math.log10(lo) + p * (Math.log10(hi) - Math.log10(lo))) : lo + p * (hi - lo);
}

function heatMap(data, xName, yName) {
  const xb = bins(data.trials.map((t) => hpValue(t, xName)), hpType(data, xName), 6);
  const yb = bins(data.trials.map((t) => hpValue(t, yName)), hpType(data, yName), 6);
  const smaller = data.experiment.smaller_is_better !== false;
  const color = metricColor(data);
  const cells = new Map();
  data.trials.forEach((t) => {
    const [vx, vy] = [hpValue(t, xName), hpValue(t, yName)];
    if (vx === null || vy === null || t.best_validation === null) return;
    const key = `${xb.of(vx)},${yb.of(vy)}`;
    const cell = cells.get(key) || { x: xb.of(vx), y: yb.of(vy), value: null, trials: [] };
    cell.trials.push(t.id);
    if (cell.value === null || (smaller ? t.best_validation < cell.value : t.best_validation > cell.value)) cell.value = t.best_validation;
    cells.set(key, cell);
  });
  const table = el("table", { id: "heatmap", className: "heatmap" }, el("tr", {}, el("th", {}, `${yName} ↓ ${xName} →`),
    xb.labels.map((l) => el("th", {}, l))));
  yb.labels.forEach((ly, yi) => table.append(el("tr", {}, el("th", {}, ly), xb.labels.map((_, xi) => {
    const cell = cells.get(`${xi},${yi}`);
    return cell ? el("td", { style: `background:${color(cell.value)}`, className: "heat", title: `trials ${cell.trials.join(", ")}`,
      "data-x": xi, "data-y": yi }, num(cell.value)) : el("td", { className: "heat empty" }, "");
  }))));
  detLite.data.heatmap = { x: xName, y: yName, xbins: xb.labels, ybins: yb.labels, cells: Array.from(cells.values()) };
  return table;
}

function heatMapControls(data, box, choice) {
  const pick = (id, chosen) => el("select", { id }, data.varying.map((h) => el("option", { value: h, selected: h === chosen }, h)));
  const xs = pick("heatmap-x", choice.x), ys = pick("heatmap-y", choice.y);
  const draw = () => {
    Object.assign(choice, { x: xs.value, y: ys.value });
    box.replaceChildren(heatMap(data, choice.x, choice.y));
  };
  xs.addEventListener("change", draw);
  ys.addEventListener("change", draw);
  draw();
  return el("div", { className: "controls" }, el("label", {}, "x ", xs), el("label", {}, "y ", ys));
}

// The section: a view picker and the chosen view, redrawn with the experiment's data.
function hparamViews(data) {
  const section = el("section", { id: "hparams-section" }, el("h2", {}, "Hyperparameters"));
  if (!data.varying.length) {
    section.append(el("p", { className: "muted" }, "No hyperparameter varies."));
    return section;
  }
  const views = { parcoords: "Parallel coordinates", scatter: "Scatter matrix", heatmap: "Heat map" };
  const picker = el("select", { id: "hparam-view" }, Object.entries(views).map(([k, v]) => el("option", { value: k }, v)));
  const body = el("div", { id: "hparam-view-body" });
  const choice = { x: data.varying[0], y: data.varying[1] };
  section.append(el("div", { className: "controls" }, el("label", {}, "View ", picker), legend(data)), body);
  section.draw = (fresh) => {
    data = fresh || data;
    const width = Math.max(600, section.clientWidth - 40);
    if (picker.value === "parcoords") body.replaceChildren(parallelCoordinates(data, width));
    else if (picker.value === "scatter") body.replaceChildren(el("div", { className: "scroll" }, scatterMatrix(data)));
    else if (data.varying.length < 2) body.replaceChildren(el("p", { className: "muted" }, "A heat map needs two varying hyperparameters."));
    else {
      const box = el("div", { className: "scroll" });
      body.replaceChildren(heatMapControls(data, box, choice), box);
    }
  };
  picker.addEventListener("change", () => section.draw());
  return section;
}
