// det-lite dashboard: an experiment's trial table (sort by any column, filter by state and text,
// select trials to compare) and the comparison page (the selected trials' curves overlaid, their
// hyperparameters and best validation metrics side by side).
"use strict";

function trialColumns(data) {
  const e = data.experiment;
  const metric = e.metric ? `${e.metric} ${e.smaller_is_better === false ? "↑" : "↓"}` : "best metric";
  return [
    { name: "Trial", key: (t) => t.id, cell: (t) => el("a", { href: `#/trials/${t.id}` }, t.id), num: true },
    ...data.varying.map((h) => ({ name: h, key: (t) => t.varying[h], cell: (t) => num(t.varying[h]), num: true })),
    { name: "State", key: (t) => t.display_state, cell: (t) => stateBadge(t.state, t.display_state) },
    { name: "Batches", key: (t) => t.total_batches, cell: (t) => t.total_batches, num: true },
    { name: metric, key: (t) => t.best_validation, cell: (t) => num(t.best_validation), num: true },
    { name: "Restarts", key: (t) => t.restarts, cell: (t) => t.restarts, num: true },
    { name: "Where", key: (t) => t.where, cell: (t) => t.where },
  ];
}

// Missing values last; numbers as numbers, anything else as text.
function compareValues(a, b) {
  const missing = (v) => v === null || v === undefined;
  if (missing(a) || missing(b)) return missing(a) - missing(b);
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b));
}

// The table's controls live across refreshes (typing is not interrupted); render(data) redraws rows.
function trialsView() {
  const view = { sort: 0, desc: false, selected: new Set() };
  const state = el("select", { id: "trial-state" }, el("option", { value: "" }, "any"));
  const filter = el("input", { type: "search", id: "trial-filter", placeholder: "filter" });
  const compare = el("a", { id: "compare-link", className: "button" });
  const box = el("div", { className: "scroll" });
  const title = el("h2", { id: "trials-title" }, "Trials");
  const section = el("section", { id: "trials-section" }, title,
    el("div", { className: "controls" }, el("label", {}, "State ", state), el("label", {}, "Filter ", filter), compare), box);
  let data = null;
  const render = (fresh) => {
    data = fresh || data;
    const columns = trialColumns(data);
    const states = Array.from(new Set(data.trials.map((t) => t.display_state))).sort();
    if (state.options.length !== states.length + 1) {
      const chosen = state.value;
      state.replaceChildren(el("option", { value: "" }, "any"), ...states.map((s) => el("option", { value: s, selected: s === chosen }, s)));
    }
    const needle = filter.value.trim().toLowerCase();
    const rows = data.trials.filter((t) => (!state.value || t.display_state === state.value)
      && (!needle || columns.some((c) => String(c.key(t) ?? "").toLowerCase().includes(needle))));
    const key = columns[Math.min(view.sort, columns.length - 1)].key;
    rows.sort((a, b) => (view.desc ? -1 : 1) * compareValues(key(a), key(b)));
    const head = el("tr", {}, el("th", {}, ""), columns.map((c, i) => el("th", { className: "sortable", "data-sort": i,
      onclick: () => { view.desc = view.sort === i ? !view.desc : false; view.sort = i; render(); } },
    c.name + (view.sort === i ? (view.desc ? " ▼" : " ▲") : ""))));
    const body = rows.map((t) => el("tr", { "data-trial": t.id },
      el("td", {}, el("input", { type: "checkbox", className: "pick", checked: view.selected.has(t.id),
        onchange: (ev) => { if (ev.target.checked) view.selected.add(t.id); else view.selected.delete(t.id); link(); } })),
      columns.map((c) => el("td", { className: c.num ? "num" : "" }, c.cell(t)))));
    box.replaceChildren(el("table", { id: "trials" }, el("thead", {}, head), el("tbody", {}, body)));
    title.textContent = `Trials (${rows.length} of ${data.trials.length})`;
    link();
  };
  const link = () => {
    const picked = Array.from(view.selected).sort((a, b) => a - b);
    compare.textContent = `Compare selected (${picked.length})`;
    if (picked.length) compare.setAttribute("href", `#/compare/${picked.join(",")}`);
    else compare.removeAttribute("href");
  };
  state.addEventListener("change", () => render());
  filter.addEventListener("input", () => render());
  section.render = render;
  return section;
}

function compareTable(data) {
  const trials = data.trials;
  const row = (name, cells, attrs) => el("tr", attrs || {}, el("th", {}, name), cells.map((c) => el("td", { className: "num" }, c)));
  const hp = (t, name) => name.split(".").reduce((v, k) => (v && typeof v === "object" ? v[k] : undefined), t.trial.hparams);
  const validation = Array.from(new Set(trials.flatMap((t) => Object.keys((t.best || {}).metrics || {})))).sort();
  const metric = (t) => (t.metric ? `${t.metric} ${t.smaller_is_better === false ? "↑" : "↓"} ` : "") + num(t.trial.best_validation);
  return el("div", { className: "scroll" }, el("table", { id: "compare-table", className: "compare" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), trials.map((t) => el("th", { "data-trial": t.trial.id },
      el("a", { href: `#/trials/${t.trial.id}` }, `trial ${t.trial.id}`))))),
    el("tbody", {},
      row("Experiment", trials.map((t) => `${t.experiment.id} ${t.experiment.name || ""}`)),
      row("State", trials.map((t) => stateBadge(t.trial.state, t.trial.display_state))),
      row("Batches", trials.map((t) => t.trial.total_batches)),
      row("Best searcher metric", trials.map(metric), { "data-row": "searcher-metric" }),
      el("tr", {}, el("th", { colspan: trials.length + 1, className: "group" }, "Hyperparameters")),
      data.hparams.map((name) => row(name, trials.map((t) => num(hp(t, name))), { "data-hparam": name })),
      el("tr", {}, el("th", { colspan: trials.length + 1, className: "group" }, "Best validation (all its metrics)")),
      row("at batch", trials.map((t) => (t.best ? t.best.total_batches : "-"))),
      validation.map((name) => row(name, trials.map((t) => num(((t.best || {}).metrics || {})[name])), { "data-metric": name })))));
}

async function comparePage(main, ids) {
  const data = await api(`/api/compare?${new URLSearchParams({ trials: ids.join(",") })}`);
  detLite.data.compare = data;
  document.getElementById("crumbs").replaceChildren(el("a", { href: "#/" }, "experiments"), ` / compare ${ids.join(", ")}`);
  const first = data.trials[0];
  const curves = curvesSection("compare-curves", data.metrics, first.metric,
    (kind, metric) => api(`/api/curves?${new URLSearchParams({ trials: ids.join(","), kind, metric })}`), (tid) => `trial ${tid}`);
  main.replaceChildren(el("h1", {}, `Comparing ${ids.length} trials`),
    el("section", {}, el("h2", {}, "Side by side"), compareTable(data)), curves);
  if (curves.redraw) await curves.redraw();
}
