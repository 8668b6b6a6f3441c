// det-lite dashboard: the model registry (det-lite model ... / the SDK's create_model): each model,
// its labels and description, and its versions with the checkpoint, trial and metrics behind each.
"use strict";

function versionRow(model, v) {
  const c = v.checkpoint;
  return el("tr", { "data-version": v.version },
    el("td", { className: "num" }, v.version), el("td", {}, v.name || ""),
    el("td", { title: v.checkpoint_uuid }, v.checkpoint_uuid),
    el("td", {}, c ? el("a", { href: `#/trials/${c.trial_id}` }, `trial ${c.trial_id}`) : "(checkpoint deleted)"),
    el("td", { className: "num" }, c ? c.total_batches : "-"),
    el("td", {}, c ? Object.entries(c.metrics || {}).map(([k, value]) => `${k}=${num(value)}`).join(" ") : ""),
    el("td", {}, when(v.created_at)),
    el("td", {}, c ? el("a", { className: "download", download: `${v.checkpoint_uuid}.tar.gz`,
      href: `/api/checkpoints/${v.checkpoint_uuid}/download?${new URLSearchParams({ token: token() })}` }, "Download") : ""));
}

async function modelsPage(main) {
  const data = await api("/api/models");
  detLite.data.models = data.models;
  document.getElementById("crumbs").replaceChildren("models");
  const sections = data.models.map((m) => el("section", { "data-model": m.name },
    el("h2", {}, m.name, m.archived ? " (archived)" : ""),
    el("p", { className: "muted" }, [m.description || "no description", (m.labels || []).length ? ` · labels: ${m.labels.join(", ")}` : "",
      ` · ${m.num_versions} version${m.num_versions === 1 ? "" : "s"}`].join("")),
    m.versions.length ? table(["Version", "Name", "Checkpoint", "Trial", "Batch", "Metrics", "Created", ""],
      m.versions.map((v) => versionRow(m, v)), { className: "versions" }) : el("p", { className: "muted" }, "No versions.")));
  main.replaceChildren(el("h1", {}, "Model registry"),
    ...(sections.length ? sections : [el("p", { className: "muted", id: "no-models" },
      "No models yet: create one with the SDK (client.create_model(name), then model.register_version(checkpoint_uuid)).")]));
}
