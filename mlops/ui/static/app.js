// mlops ui: hand-written, no build step, no CDN. The server pushes the page's JSON when it
// changes (server-sent events, /api/events); when no push came for a while the page polls
// once a second instead. It re-renders only when the JSON changed; every button POSTs to
// the same function the CLI calls. Charts: static/charts.js (uPlot, vendored).
// Markup only through static/html.js: `html` escapes every value, `Html.render` is the
// only way into the page (and the server's CSP lets no other way parse markup).
"use strict";

const { html } = Html;
const POLL_MS = 1000;
const state = { info: null, last: "", open: new Set(), logs: {}, compare: new Set(),
  pushedAt: 0, source: null, polls: 0, mode: "" };
const STALE_MS = 3000; // no push for this long: poll

const pct = (v) => (v === null || v === undefined ? "–" : `${v}%`);
const num = (v, d = 2) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
const short = (sha) => (sha ? String(sha).slice(0, 10) : "–");
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
  const box = $("#who");
  const who = box.disabled ? "" : box.value.trim(); // a fixed identity is the server's
  if (who) localStorage.setItem("mlops-who", who);
  if (token) localStorage.setItem("mlops-token", token);
  document.querySelectorAll("button").forEach((b) => (b.disabled = true));
  try {
    const res = await fetch(url, { method: "POST", headers,
      body: JSON.stringify(who ? { by: who } : {}) });
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
// Inline: `code`, **strong**, [text](link); everything else is text.
const INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)/g;

function inline(text) {
  const out = [];
  let at = 0;
  for (const m of String(text).matchAll(INLINE)) {
    out.push(m.input.slice(at, m.index));
    if (m[1] !== undefined) out.push(html`<code>${m[1]}</code>`);
    else if (m[2] !== undefined) out.push(html`<strong>${m[2]}</strong>`);
    else {
      const url = Html.safeUrl(m[4]);
      out.push(url === "#" ? m[3] : html`<a href="${url}">${m[3]}</a>`);
    }
    at = m.index + m[0].length;
  }
  out.push(String(text).slice(at));
  return html`${out}`;
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
      out.push(html`<table>${body.map((r, n) => html`<tr>${cells(r).map((c) =>
        (n === 0 ? html`<th>${inline(c)}</th>` : html`<td>${inline(c)}</td>`))}</tr>`)}</table>`);
      continue;
    }
    const h = line.match(/^(#{1,4})\s+(.*)$/);
    if (h) {
      const level = h[1].length; // h3..h6: the card's own title is an h2
      const heading = [html`<h3>${inline(h[2])}</h3>`, html`<h4>${inline(h[2])}</h4>`,
        html`<h5>${inline(h[2])}</h5>`, html`<h6>${inline(h[2])}</h6>`][level - 1];
      out.push(heading);
      i++;
      continue;
    }
    if (/^\s*[-*]\s+/.test(line)) {
      const items = [];
      while (i < lines.length && /^\s*[-*]\s+/.test(lines[i])) {
        items.push(html`<li>${inline(lines[i++].replace(/^\s*[-*]\s+/, ""))}</li>`);
      }
      out.push(html`<ul>${items}</ul>`);
      continue;
    }
    if (/^```/.test(line)) {
      const code = [];
      i++;
      while (i < lines.length && !/^```/.test(lines[i])) code.push(lines[i++]);
      i++;
      out.push(html`<pre>${code.join("\n")}</pre>`);
      continue;
    }
    if (line.trim()) out.push(html`<p>${inline(line)}</p>`);
    i++;
  }
  return html`${out}`;
}

function details(key, summary, body, cls = "") {
  const open = state.open.has(key) ? "open" : "";
  return html`<details class="${cls}" data-key="${key}" ${open}>
    <summary>${summary}</summary>${body}</details>`;
}

// A fault of a part the page reads (Prometheus, the platform): one line a person reads,
// the raw text behind a toggle.
function fault(key, error, detail, cls = "muted") {
  if (!error) return "";
  const raw = detail && detail !== error
    ? details(`raw-${key}`, "details", html`<pre class="raw">${detail}</pre>`, "raw") : "";
  return html`<div class="fault ${cls}" data-fault="${key}">
    <span class="fault-line">${error}</span>${raw}</div>`;
}

// Bars are sized after rendering (CSSOM): the CSP allows no style attributes.
function sizeBars(root) {
  root.querySelectorAll(".bar[data-width]").forEach((bar) => {
    bar.style.width = `${Math.max(0, Number(bar.dataset.width) || 0)}px`;
  });
}

// -- Models ---------------------------------------------------------------------------------
function canaryButtons(m) {
  const c = m.canary;
  if (!state.info.actions) return "";
  const b = (action, label, on) =>
    html`<button data-action="${action}" data-model="${m.name}" ${on ? "" : "disabled"}>
      ${label}</button>`;
  const active = c && c.active;
  return html`<div class="controls">${[
    b("pause", "Pause", active && !c.paused), b("resume", "Resume", c && c.paused),
    b("approve", "Approve step", active), b("promote", "Promote", active),
    b("abort", "Abort", active), b("rollback", "Rollback", true)]}</div>`;
}

function liveCells(live, version) {
  if (!live || live.error || live.rate === undefined) {
    return html`<td class="num rate" data-rate="${version}">–</td><td class="num">–</td>
      <td class="num">–</td>`;
  }
  const errors = live.error_rate == null ? "–" : num(100 * live.error_rate, 2) + "%";
  const p99 = live.p99_ms == null ? "–" : num(live.p99_ms, 1) + " ms";
  return html`<td class="num rate" data-rate="${version}">${num(live.rate)}</td>
    <td class="num">${errors}</td><td class="num">${p99}</td>`;
}

function checkText(k) {
  return html`${k.name}: <b>${k.verdict}</b>${[
    "value" in k ? ` value ${num(k.value, 4)}` : "",
    "threshold" in k ? ` threshold ${num(k.threshold, 4)}` : "",
    "statistic" in k ? ` stat ${num(k.statistic, 3)}` : "",
    "samples" in k ? ` n ${k.samples}` : ""]}`;
}

function modelCard(m) {
  const c = m.canary;
  const phase = c ? html`<span class="phase ${c.phase}" data-phase="${m.name}">${c.phase}</span>`
    : "";
  const live = m.versions.map((v) => v.live).find((l) => l && l.error);
  const served = m.versions.some((v) => v.served !== null);
  const rows = m.versions.map((v) => html`<tr>
      <td><code>${v.version}</code> <span class="muted">${v.role}</span></td>
      <td class="num weight" data-model="${m.name}" data-version="${v.version}">${pct(v.weight)}</td>
      <td><span class="bar" data-width="${(v.weight || 0) * 1.2}"></span></td>
      ${v.served === null ? "" : html`<td class="num served" data-served="${v.version}">
        ${pct(v.served.haproxy_weight)}</td><td>${v.served.phase || "–"}</td>`}
      <td class="mono">${v.weights_sha256 ? v.weights_sha256.slice(0, 12) + "…" : "–"}</td>
      ${liveCells(v.live, v.version)}</tr>`);
  const notes = [];
  if (c && c.pause_reason) notes.push(html`paused: ${c.pause_reason}`);
  if (c && c.requested) notes.push(html`${c.requested} requested by ${c.requested_by}`);
  if (c && c.awaiting_approval) {
    notes.push(html`waiting for approval to go to ${c.awaiting_approval}%`);
  }
  if (c && c.last_decision) {
    notes.push(html`last decision: ${c.last_decision.kind} – ${c.last_decision.reason}`);
  }
  if (m.state_error) notes.push(html`<span class="Failed">${m.state_error}</span>`);
  if (m.split_error) notes.push(html`<span class="Failed">${m.split_error}</span>`);
  const rb = m.rollback; // this UI's last rollback of the model (the server waits for it)
  if (rb) {
    const to = rb.to ? ` to ${rb.to}` : "";
    const said = rb.state === "failed" ? html`<span class="Failed">${rb.message}</span>`
      : rb.message;
    notes.push(html`<span data-rollback="${m.name}" data-state="${rb.state}">rollback${to}
      by ${rb.by}: <b>${rb.state}</b></span> <span class="rollback-lines">${said}</span>`);
  }
  const tl = m.timeline.map((t) => html`<tr>
      <td class="mono">${short(t.commit)}</td><td>${t.decision}${t.cause ? "/" + t.cause : ""}</td>
      <td>${t.step}</td><td>${t.reason || t.subject}</td>
      <td>${t.checks.map((k, i) => (i ? html`<br>${checkText(k)}` : checkText(k)))}</td>
      <td>${t.requested_by || t.author}</td></tr>`);
  const reports = m.reports.map((r, i) => html`${i ? " · " : ""}<a
    href="${Html.safeUrl(r.url)}">${r.candidate} ${r.file}</a>`);
  return html`<section class="card" id="model-${m.name}">
    <h2>${m.name} ${phase}</h2>
    <table><tr><th>version</th><th>weight (git)</th><th></th>
      ${served ? html`<th>HAProxy</th><th>server</th>` : ""}
      <th>weights sha256</th>
      <th>req/s</th><th>errors</th><th>p99</th></tr>${rows}</table>
    ${notes.map((n) => html`<div>${n}</div>`)}
    ${live ? fault(`live-${m.name}`, live.error, live.detail) : ""}
    ${canaryButtons(m)}
    <div class="charts" data-charts-for="${m.name}"></div>
    ${reports.length ? html`<div>canary reports: ${reports}</div>` : ""}
    ${details(`tl-${m.name}`, `decision timeline (${m.timeline.length} commits)`,
      html`<table><tr><th>commit</th><th>verdict</th><th>step</th><th>reason</th>
        <th>checks</th><th>by</th></tr>${tl}</table>`)}
  </section>`;
}

function renderModels(doc) {
  const problem = doc.platform_error
    ? html`<p class="Failed" data-fault="platform">${doc.platform_error}</p>` : "";
  if (!doc.models.length) {
    return html`${problem}<p class="muted">No models in the GitOps repo yet.</p>`;
  }
  return html`<p class="muted">GitOps tip ${short(doc.tip)}</p>${problem}
    ${doc.models.map(modelCard)}`;
}

// -- Proposals ------------------------------------------------------------------------------
function renderProposals(doc) {
  if (!doc.proposals.length) return html`<p class="muted">No pull requests.</p>`;
  return html`${doc.proposals.map((p) => {
    const r = p.record;
    const approve = p.state === "open" && state.info.actions
      ? html`<button class="primary" data-approve="${p.number}">Approve #${p.number}</button>`
      : "";
    const merged = p.merge_commit ? ", merged as " + short(p.merge_commit) : "";
    const comments = p.comments.map((c) =>
      html`<div class="muted">comment by ${c.author}: ${inline(c.body)}</div>`);
    return html`<section class="card" id="pr-${p.number}">
      <h2>#${p.number} ${p.title}
        <span class="phase" data-pr-state="${p.number}">${p.state}</span></h2>
      <div class="muted">${p.branch} → ${p.base}, head ${short(p.head_sha)}${merged}</div>
      ${r ? html`<div>evaluated: ${r.model} ${r.version}, weights sha256
        <code>${String(r.weights_sha256).slice(0, 16)}…</code></div>` : ""}
      ${approve}${comments}
      ${details(`pr-${p.number}`, "evaluation report",
        html`<div class="report">${markdown(p.body)}</div>`)}
    </section>`;
  })}`;
}

// -- Runs -----------------------------------------------------------------------------------
function gateLine(r) {
  const g = r.gate_view || {};
  return html`<div class="gate" data-gate="${r.out}">gate:
    <span class="verdict ${g.verdict}">${g.verdict || "–"}</span>${g.reason ? " – " : ""}
    <span class="reason">${g.reason || ""}</span></div>`;
}

function renderRuns(doc) {
  if (!state.info.runs.length) {
    return html`<p class="muted">No runs directory: start <code>mlops ui --runs DIR</code>.</p>`;
  }
  if (!doc.runs.length) return html`<p class="muted">No pipeline runs yet.</p>`;
  const compare = html`<p><button id="compare-runs" ${state.compare.size < 2 ? "disabled" : ""}>
    Compare selected (${state.compare.size})</button>
    <span class="muted">tick two or more runs</span></p>`;
  return html`${compare}${doc.runs.map((r) => {
    const dag = r.steps.map((s, i) => html`${i ? html`<span class="arrow">→</span>` : ""}<span
      class="step ${s.state}" data-log="${s.log}" data-task="${s.task}" title="${s.message}">
      ${s.task} · ${s.state}${s.seconds !== null ? " · " + num(s.seconds, 0) + "s" : ""}</span>`);
    const outs = r.steps.flatMap((s) => Object.entries(s.outputs || {})
      .map(([k, v]) => html`<tr><td>${s.task}</td><td>${k}</td><td>${v}</td></tr>`));
    const logKey = state.logs[r.out];
    const training = r.steps.filter((s) => s.training).map((s) => {
      const t = s.training;
      const share = t.total ? Math.min(100, Math.round((100 * t.step) / t.total)) : null;
      const bar = share === null ? ""
        : html` <span class="bar" data-width="${share * 2}"></span> ${share}%`;
      return html`<div class="training" data-training="${s.task}">${s.task}: step
        ${t.step}${t.total ? "/" + t.total : ""}${bar}${t.epoch === null ? ""
          : ` · epoch ${t.epoch}`}${t.loss === null ? "" : ` · loss ${num(t.loss, 4)}`}</div>`;
    });
    const picked = state.compare.has(r.out) ? "checked" : "";
    return html`<section class="card">
      <h2><input type="checkbox" data-compare="${r.out}" ${picked} title="compare">
        ${r.name} <span class="${r.status}">${r.status}</span></h2>
      <div class="muted">${r.out} · ${r.seconds === null ? "" : num(r.seconds, 0) + " s"}
        ${r.version ? " · version " + r.version : ""}
        ${r.message ? " · " + r.task + ": " + r.message : ""}</div>
      ${gateLine(r)}
      <div class="dag" data-run="${r.out}">${dag}</div>
      ${training}
      ${outs.length ? details(`out-${r.out}`, "outputs",
        html`<table><tr><th>step</th><th>output</th><th>value</th></tr>${outs}</table>`) : ""}
      ${logKey ? html`<pre class="log">${logKey.text}</pre>` : ""}
    </section>`;
  })}`;
}

// -- Compare --------------------------------------------------------------------------------
function cell(v) {
  if (v === null || v === undefined) return html`<td>–</td>`;
  if (typeof v === "number") {
    return html`<td class="num">${Number.isInteger(v) ? v : v.toPrecision(4)}</td>`;
  }
  const text = String(v);
  const shown = text.length > 36 ? text.slice(0, 16) + "…" + text.slice(-16) : text;
  return html`<td title="${text}">${shown}</td>`;
}

function renderCompare(doc) {
  const head = doc.runs.map((r) => html`<th title="${r.out}">${r.name}</th>`);
  let section = "";
  const rows = doc.rows.map((row) => {
    const title = row.section !== section ? html`<tr class="section"><th
      colspan="${doc.runs.length + 1}">${row.section}</th></tr>` : "";
    section = row.section;
    return html`${title}<tr class="${row.differs ? "differs" : ""}"
      data-row="${row.section}.${row.key}"><td>${row.key}</td>${row.values.map(cell)}</tr>`;
  });
  const differ = doc.rows.filter((r) => r.differs).length;
  return html`<section class="card" id="compare"><h2>${doc.runs.length} runs compared
    <span class="muted">${differ} rows differ (highlighted)</span></h2>
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
    Html.render($("#page"), PAGES[name][1](doc));
    sizeBars($("#page"));
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
  const source = new EventSource(`api/events?page=${encodeURIComponent(name)}`);
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
    const note = $("#page-error") || document.createElement("p");
    note.id = "page-error";
    note.className = "Failed";
    note.textContent = `cannot read: ${err.message}`;
    if (!note.parentNode) $("#page").prepend(note);
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
    await act(`api/proposals/${encodeURIComponent(t.dataset.approve)}/approve`, "approve");
  } else if (t.dataset.action) {
    await act(`api/models/${encodeURIComponent(t.dataset.model)}/` +
      `${encodeURIComponent(t.dataset.action)}`, `${t.dataset.action} ${t.dataset.model}`);
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
  const fixed = state.info.proxy_user || state.info.identity;
  // Who acts: typed here on one's own machine; the token's identity or the proxy's
  // signed-in person otherwise (the server ignores nothing silently: it refuses a name).
  $("#who").value = state.info.identity ||
    (state.info.proxy_user ? "" : localStorage.getItem("mlops-who") || state.info.user);
  $("#who").disabled = Boolean(fixed);
  if (fixed) {
    $("#who").title = state.info.identity
      ? "actions with this UI's token are signed with the token's identity"
      : "actions are signed as the person the auth proxy signed in";
  }
  $("#token-box").hidden = !state.info.token;
  $("#source").textContent = `${state.info.gitops} (${state.info.branch})` +
    (state.info.actions ? "" : " · read-only");
  state.mode = "polled";
  await refresh();
  listen();
  setInterval(tick, POLL_MS);
}

start().catch((err) => show(`cannot load: ${err.message}`, false));
