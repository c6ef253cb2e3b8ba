// mlops ui: hand-written, no build step, no CDN. The server pushes the page's JSON when it
// changes (server-sent events, /api/events); when no push came for a while the page polls
// once a second instead. It re-renders only when the JSON changed; every button POSTs to
// the same function the CLI calls. Charts: static/charts.js (uPlot, vendored).
"use strict";

const POLL_MS = 1000;
const state = { info: null, last: "", open: new Set(), logs: {}, compare: new Set(),
  pushedAt: 0, source: null, polls: 0, mode: "" };
const STALE_MS = 3000; // no push for this long: poll

const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const pct = (v) => (v === null || v === undefined ? "–" : `${v}%`);
const num = (v, d = 2) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
const short = (sha) => (sha ? esc(sha.slice(0, 10)) : "–");
const $ = (sel) => document.querySelector(sel);

function show(text, ok) {
  const box = $("#message");
  box.textContent = text;
  box.className = ok ? "ok" : "error";
  box.hidden = false;
}

async function getJSON(url) {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body;
}

async function act(url, label) {
  const headers = { "Content-Type": "application/json", "X-Mlops-UI": "1" };
  const token = $("#token").value || localStorage.getItem("mlops-token") || "";
  if (token) headers.Authorization = `Bearer ${token}`;
  const who = $("#who").value.trim();
  if (who) localStorage.setItem("mlops-who", who);
  if (token) localStorage.setItem("mlops-token", token);
  document.querySelectorAll("button").forEach((b) => (b.disabled = true));
  try {
    const res = await fetch(url, { method: "POST", headers, body: JSON.stringify({ by: who }) });
    const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
    if (res.ok) show(body.message, true);
    else show(`${label}: ${body.error || "HTTP " + res.status}`, false);
  } catch (err) {
    show(`${label}: ${err.message}`, false);
  } finally {
    state.last = "";
    await refresh();
  }
}

// -- a small Markdown subset: what the evaluation and canary reports use --------------------
function inline(text) {
  return esc(text)
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (m, t, u) =>
      /^(https?:|\/|[a-z0-9._-]+\/)/i.test(u) ? `<a href="${u}">${t}</a>` : t);
}

function markdown(src) {
  const lines = String(src || "").replace(/<!--[\s\S]*?-->/g, "").split("\n");
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*\|/.test(line)) {
      const rows = [];
      while (i < lines.length && /^\s*\|/.test(lines[i])) rows.push(lines[i++]);
      const cells = (r) => r.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
      const body = rows.filter((r) => !/^\s*\|[\s:|-]+\|\s*$/.test(r));
      out.push("<table>" + body.map((r, n) => "<tr>" + cells(r).map((c) =>
        n === 0 ? `<th>${inline(c)}</th>` : `<td>${inline(c)}</td>`).join("") + "</tr>").join("")
        + "</table>");
      continue;
    }
    const h = line.match(/^(#{1,4})\s+(.*)$/);
    if (h) { out.push(`<h${h[1].length + 2}>${inline(h[2])}</h${h[1].length + 2}>`); i++; continue; }
    if (/^\s*[-*]\s+/.test(line)) {
      const items = [];
      while (i < lines.length && /^\s*[-*]\s+/.test(lines[i])) {
        items.push(`<li>${inline(lines[i++].replace(/^\s*[-*]\s+/, ""))}</li>`);
      }
      out.push(`<ul>${items.join("")}</ul>`);
      continue;
    }
    if (/^```/.test(line)) {
      const code = [];
      i++;
      while (i < lines.length && !/^```/.test(lines[i])) code.push(lines[i++]);
      i++;
      out.push(`<pre>${esc(code.join("\n"))}</pre>`);
      continue;
    }
    if (line.trim()) out.push(`<p>${inline(line)}</p>`);
    i++;
  }
  return out.join("\n");
}

function details(key, summary, body) {
  const open = state.open.has(key) ? " open" : "";
  return `<details data-key="${esc(key)}"${open}><summary>${summary}</summary>${body}</details>`;
}

// -- Models ---------------------------------------------------------------------------------
function canaryButtons(m) {
  const c = m.canary;
  if (!state.info.actions) return "";
  const b = (action, label, on) =>
    `<button data-action="${action}" data-model="${esc(m.name)}" ${on ? "" : "disabled"}>` +
    `${label}</button>`;
  const active = c && c.active;
  return `<div class="controls">` +
    b("pause", "Pause", active && !c.paused) + b("resume", "Resume", c && c.paused) +
    b("approve", "Approve step", active) + b("promote", "Promote", active) +
    b("abort", "Abort", active) + b("rollback", "Rollback", true) + `</div>`;
}

function liveCells(live, version) {
  const rate = `<td class="num rate" data-rate="${esc(version)}">`;
  if (!live || live.error || live.rate === undefined) {
    return `${rate}–</td><td class="num">–</td><td class="num">–</td>`;
  }
  return `${rate}${num(live.rate)}</td>` +
    `<td class="num">${live.error_rate == null ? "–" : num(100 * live.error_rate, 2) + "%"}</td>` +
    `<td class="num">${live.p99_ms == null ? "–" : num(live.p99_ms, 1) + " ms"}</td>`;
}

function modelCard(m) {
  const c = m.canary;
  const phase = c ? `<span class="phase ${esc(c.phase)}" data-phase="${esc(m.name)}">` +
    `${esc(c.phase)}</span>` : "";
  const liveErr = m.versions.map((v) => v.live && v.live.error).find((e) => e);
  const rows = m.versions.map((v) => `<tr>
      <td><code>${esc(v.version)}</code> <span class="muted">${esc(v.role)}</span></td>
      <td class="num weight" data-model="${esc(m.name)}" data-version="${esc(v.version)}">` +
      `${pct(v.weight)}</td>
      <td><span class="bar" style="width:${(v.weight || 0) * 1.2}px"></span></td>
      ${v.served === null ? "" : `<td class="num served" data-served="${esc(v.version)}">` +
        `${pct(v.served.haproxy_weight)}</td><td>${esc(v.served.phase || "–")}</td>`}
      <td class="mono">${v.weights_sha256 ? esc(v.weights_sha256.slice(0, 12)) + "…" : "–"}</td>
      ${liveCells(v.live, v.version)}</tr>`).join("");
  const notes = [];
  if (c && c.pause_reason) notes.push(`paused: ${esc(c.pause_reason)}`);
  if (c && c.requested) notes.push(`${esc(c.requested)} requested by ${esc(c.requested_by)}`);
  if (c && c.awaiting_approval) notes.push(`waiting for approval to go to ${c.awaiting_approval}%`);
  if (c && c.last_decision) notes.push(`last decision: ${esc(c.last_decision.kind)} – ` +
    `${esc(c.last_decision.reason)}`);
  if (m.state_error) notes.push(`<span class="Failed">${esc(m.state_error)}</span>`);
  if (m.split_error) notes.push(`<span class="Failed">${esc(m.split_error)}</span>`);
  if (liveErr) notes.push(`<span class="muted">${esc(liveErr)}</span>`);
  const tl = m.timeline.map((t) => `<tr>
      <td class="mono">${short(t.commit)}</td><td>${esc(t.decision)}${t.cause ? "/" + esc(t.cause) : ""}</td>
      <td>${esc(t.step)}</td><td>${esc(t.reason || t.subject)}</td>
      <td>${t.checks.map((k) => `${esc(k.name)}: <b>${esc(k.verdict)}</b>` +
        ("value" in k ? ` value ${esc(num(k.value, 4))}` : "") +
        ("threshold" in k ? ` threshold ${esc(num(k.threshold, 4))}` : "") +
        ("statistic" in k ? ` stat ${esc(num(k.statistic, 3))}` : "") +
        ("samples" in k ? ` n ${esc(k.samples)}` : "")).join("<br>")}</td>
      <td>${esc(t.requested_by || t.author)}</td></tr>`).join("");
  const reports = m.reports.map((r) =>
    `<a href="${esc(r.url)}">${esc(r.candidate)} ${esc(r.file)}</a>`).join(" · ");
  return `<section class="card" id="model-${esc(m.name)}">
    <h2>${esc(m.name)} ${phase}</h2>
    <table><tr><th>version</th><th>weight (git)</th><th></th>
      ${m.versions.some((v) => v.served !== null) ? "<th>HAProxy</th><th>server</th>" : ""}
      <th>weights sha256</th>
      <th>req/s</th><th>errors</th><th>p99</th></tr>${rows}</table>
    ${notes.map((n) => `<div>${n}</div>`).join("")}
    ${canaryButtons(m)}
    <div class="charts" data-charts-for="${esc(m.name)}"></div>
    ${reports ? `<div>canary reports: ${reports}</div>` : ""}
    ${details(`tl-${m.name}`, `decision timeline (${m.timeline.length} commits)`,
      `<table><tr><th>commit</th><th>verdict</th><th>step</th><th>reason</th><th>checks</th>` +
      `<th>by</th></tr>${tl}</table>`)}
  </section>`;
}

function renderModels(doc) {
  if (!doc.models.length) return `<p class="muted">No models in the GitOps repo yet.</p>`;
  const problem = doc.platform_error ? `<p class="Failed">${esc(doc.platform_error)}</p>` : "";
  return `<p class="muted">GitOps tip ${short(doc.tip)}</p>` + problem +
    doc.models.map(modelCard).join("");
}

// -- Proposals ------------------------------------------------------------------------------
function renderProposals(doc) {
  if (!doc.proposals.length) return `<p class="muted">No pull requests.</p>`;
  return doc.proposals.map((p) => {
    const r = p.record;
    const approve = p.state === "open" && state.info.actions
      ? `<button class="primary" data-approve="${p.number}">Approve #${p.number}</button>` : "";
    const comments = p.comments.map((c) =>
      `<div class="muted">comment by ${esc(c.author)}: ${inline(c.body)}</div>`).join("");
    return `<section class="card" id="pr-${p.number}">
      <h2>#${p.number} ${esc(p.title)} <span class="phase" data-pr-state="${p.number}">` +
      `${esc(p.state)}</span></h2>
      <div class="muted">${esc(p.branch)} → ${esc(p.base)}, head ${short(p.head_sha)}` +
      `${p.merge_commit ? ", merged as " + short(p.merge_commit) : ""}</div>
      ${r ? `<div>evaluated: ${esc(r.model)} ${esc(r.version)}, weights sha256 ` +
        `<code>${esc(r.weights_sha256.slice(0, 16))}…</code></div>` : ""}
      ${approve}${comments}
      ${details(`pr-${p.number}`, "evaluation report",
        `<div class="report">${markdown(p.body)}</div>`)}
    </section>`;
  }).join("");
}

// -- Runs -----------------------------------------------------------------------------------
function renderRuns(doc) {
  if (!state.info.runs.length) {
    return `<p class="muted">No runs directory: start <code>mlops ui --runs DIR</code>.</p>`;
  }
  if (!doc.runs.length) return `<p class="muted">No pipeline runs yet.</p>`;
  const compare = `<p><button id="compare-runs" ${state.compare.size < 2 ? "disabled" : ""}>` +
    `Compare selected (${state.compare.size})</button> ` +
    `<span class="muted">tick two or more runs</span></p>`;
  return compare + doc.runs.map((r) => {
    const dag = r.steps.map((s) => `<span class="step ${esc(s.state)}" data-log="${esc(s.log)}"` +
      ` data-task="${esc(s.task)}" title="${esc(s.message)}">${esc(s.task)} · ${esc(s.state)}` +
      `${s.seconds !== null ? " · " + num(s.seconds, 0) + "s" : ""}</span>`)
      .join(`<span class="arrow">→</span>`);
    const outs = r.steps.flatMap((s) => Object.entries(s.outputs || {})
      .map(([k, v]) => `<tr><td>${esc(s.task)}</td><td>${esc(k)}</td><td>${esc(v)}</td></tr>`));
    const logKey = state.logs[r.out];
    const training = r.steps.filter((s) => s.training).map((s) => {
      const t = s.training;
      const share = t.total ? Math.min(100, Math.round((100 * t.step) / t.total)) : null;
      return `<div class="training" data-training="${esc(s.task)}">${esc(s.task)}: step ` +
        `${t.step}${t.total ? "/" + t.total : ""}` +
        (share === null ? "" : ` <span class="bar" style="width:${share * 2}px"></span> ${share}%`) +
        (t.epoch === null ? "" : ` · epoch ${t.epoch}`) +
        (t.loss === null ? "" : ` · loss ${num(t.loss, 4)}`) + `</div>`;
    }).join("");
    const picked = state.compare.has(r.out) ? " checked" : "";
    return `<section class="card">
      <h2><input type="checkbox" data-compare="${esc(r.out)}"${picked} title="compare"> ` +
      `${esc(r.name)} <span class="${esc(r.status)}">${esc(r.status)}</span></h2>
      <div class="muted">${esc(r.out)} · ${r.seconds === null ? "" : num(r.seconds, 0) + " s"}
        ${r.version ? " · version " + esc(r.version) : ""}
        ${r.gate ? ` · gate <span class="${esc(r.gate)}">${esc(r.gate)}</span>` : ""}
        ${r.message ? " · " + esc(r.task) + ": " + esc(r.message) : ""}</div>
      <div class="dag" data-run="${esc(r.out)}">${dag}</div>
      ${training}
      ${outs.length ? details(`out-${r.out}`, "outputs",
        `<table><tr><th>step</th><th>output</th><th>value</th></tr>${outs.join("")}</table>`) : ""}
      ${logKey ? `<pre class="log">${esc(logKey.text)}</pre>` : ""}
    </section>`;
  }).join("");
}

// -- Compare --------------------------------------------------------------------------------
function cell(v) {
  if (v === null || v === undefined) return `<td>–</td>`;
  if (typeof v === "number") {
    return `<td class="num">${Number.isInteger(v) ? v : v.toPrecision(4)}</td>`;
  }
  const text = String(v);
  const shown = text.length > 36 ? text.slice(0, 16) + "…" + text.slice(-16) : text;
  return `<td title="${esc(text)}">${esc(shown)}</td>`;
}

function renderCompare(doc) {
  const head = doc.runs.map((r) => `<th title="${esc(r.out)}">${esc(r.name)}</th>`).join("");
  let section = "";
  const rows = doc.rows.map((row) => {
    const title = row.section !== section ? `<tr class="section"><th colspan="` +
      `${doc.runs.length + 1}">${esc(row.section)}</th></tr>` : "";
    section = row.section;
    return title + `<tr class="${row.differs ? "differs" : ""}" data-row="` +
      `${esc(row.section)}.${esc(row.key)}"><td>${esc(row.key)}</td>` +
      row.values.map(cell).join("") + `</tr>`;
  }).join("");
  const differ = doc.rows.filter((r) => r.differs).length;
  return `<section class="card" id="compare"><h2>${doc.runs.length} runs compared ` +
    `<span class="muted">${differ} rows differ (highlighted)</span></h2>
    <table class="compare"><tr><th></th>${head}</tr>${rows}</table>
    <h3>training loss</h3><div id="loss-chart"></div></section>`;
}

// -- the loop -------------------------------------------------------------------------------
const PAGES = {
  models: ["api/models", renderModels],
  runs: ["api/runs", renderRuns],
  proposals: ["api/proposals", renderProposals],
  compare: [() => "api/compare?" + (location.hash.split("?")[1] || ""), renderCompare],
};

function page() {
  const name = (location.hash.replace(/^#\//, "") || "models").split(/[/?]/)[0];
  return PAGES[name] ? name : "models";
}

function show_(name, doc) {
  const text = JSON.stringify(doc) + JSON.stringify(state.logs) + state.compare.size;
  if (text !== state.last || name !== state.shown) {
    state.last = text;
    state.shown = name;
    $("#page").innerHTML = PAGES[name][1](doc);
    if (name === "compare") MlopsCharts.loss($("#loss-chart"), doc);
    MlopsCharts.attach();
  }
  $("#updated").textContent = `${new Date().toLocaleTimeString()} (${state.mode})`;
}

// Pushed updates: one event stream per page; the poll takes over while it is silent.
function listen() {
  if (state.source) state.source.close();
  state.source = null;
  const name = page();
  if (!window.EventSource || name === "compare") return;
  const source = new EventSource(`api/events?page=${name}`);
  source.addEventListener("page", (ev) => {
    state.pushedAt = Date.now();
    state.mode = "pushed";
    if (page() === name) show_(name, JSON.parse(ev.data));
  });
  source.addEventListener("charts", (ev) => {
    state.pushedAt = Date.now();
    MlopsCharts.update(JSON.parse(ev.data));
  });
  source.addEventListener("problem", () => { // the poll shows the reason, and goes on
    source.close();
    state.pushedAt = 0;
  });
  state.source = source;
}

async function pollCharts() {
  const models = [...document.querySelectorAll("[data-charts-for]")]
    .map((el) => el.dataset.chartsFor);
  for (const m of models) {
    try { MlopsCharts.update(await getJSON(`api/models/${encodeURIComponent(m)}/charts`)); }
    catch (err) { /* the page's own error line says why */ }
  }
}

async function tick() {
  if (Date.now() - state.pushedAt < STALE_MS) return;
  state.mode = "polled";
  await refresh();
  if (page() === "models" && state.polls++ % 2 === 0) await pollCharts();
}

async function refresh() {
  const name = page();
  const url = PAGES[name][0];
  document.querySelectorAll("nav a").forEach((a) =>
    a.classList.toggle("active", a.id === `nav-${name}`));
  try {
    show_(name, await getJSON(typeof url === "function" ? url() : url));
  } catch (err) {
    // the last good page stays; the reason is shown above it, in the server's words
    const note = `<p class="Failed" id="page-error">cannot read: ${esc(err.message)}</p>`;
    const old = $("#page-error");
    if (old) old.outerHTML = note; else $("#page").insertAdjacentHTML("afterbegin", note);
    state.last = "";
    $("#updated").textContent = `failed at ${new Date().toLocaleTimeString()}`;
  }
}

document.addEventListener("click", async (ev) => {
  const t = ev.target;
  if (!(t instanceof HTMLElement)) return;
  if (t.dataset.compare !== undefined) {
    if (t.checked) state.compare.add(t.dataset.compare);
    else state.compare.delete(t.dataset.compare);
    state.last = "";
    await refresh();
  } else if (t.id === "compare-runs") {
    location.hash = "#/compare?" + [...state.compare]
      .map((o) => `run=${encodeURIComponent(o)}`).join("&");
  } else if (t.dataset.approve) {
    await act(`api/proposals/${t.dataset.approve}/approve`, "approve");
  } else if (t.dataset.action) {
    await act(`api/models/${encodeURIComponent(t.dataset.model)}/${t.dataset.action}`,
      `${t.dataset.action} ${t.dataset.model}`);
  } else if (t.dataset.log !== undefined && t.closest(".dag")) {
    const run = t.closest(".dag").dataset.run;
    try {
      const res = await fetch(`api/log?path=${encodeURIComponent(t.dataset.log)}`);
      state.logs[run] = { text: await res.text() };
    } catch (err) {
      state.logs[run] = { text: err.message };
    }
    await refresh();
  }
});

document.addEventListener("toggle", (ev) => {
  const d = ev.target;
  if (d instanceof HTMLDetailsElement && d.dataset.key) {
    if (d.open) state.open.add(d.dataset.key); else state.open.delete(d.dataset.key);
  }
}, true);

window.addEventListener("hashchange", () => {
  $("#message").hidden = true; // a message belongs to the page its button was on
  state.last = "";
  state.pushedAt = 0;
  listen();
  refresh();
});

async function start() {
  state.info = await getJSON("api/info");
  $("#who").value = localStorage.getItem("mlops-who") || (state.info.proxy_user ? "" : state.info.user);
  $("#who").disabled = state.info.proxy_user;
  $("#token-box").hidden = !state.info.token;
  $("#source").textContent = `${state.info.gitops} (${state.info.branch})` +
    (state.info.actions ? "" : " · read-only");
  state.mode = "polled";
  await refresh();
  listen();
  setInterval(tick, POLL_MS);
}

start().catch((err) => show(`cannot load: ${err.message}`, false));
