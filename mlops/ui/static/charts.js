// mlops ui charts: the live canary charts (Models page) and the loss curves (Compare view),
// drawn with the vendored uPlot (static/vendor/). A chart is built once per model and
// panel and then only given new data, so it survives the page's re-renders: the page
// re-attaches each model's chart element to the placeholder it renders. Text from the
// server (a panel's title, Prometheus' error) goes in as text: DOM nodes and textContent,
// or static/html.js where a piece of markup is shorter.
"use strict";

const MlopsCharts = (() => {
  const models = {};  // model -> {el, plots: {panel id: uPlot}, lasts: {panel id: el}, shape}
  const COLORS = ["#2456c4", "#e07b00", "#1a7f37", "#9c27b0", "#c62828", "#00838f"];
  const WIDTH = 380, HEIGHT = 150;

  const fmt = (v) => (v === null || v === undefined ? "–" : Number.isInteger(v) ? String(v) :
    Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(2));

  // Decision commits as vertical lines on the time axis, with the step as a label.
  function marksPlugin(getMarks) {
    return {
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          let labelled = -Infinity; // labels closer than 40 px would overprint
          for (const m of getMarks()) {
            const x = Math.round(u.valToPos(m.at, "x", true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = m.decision === "rollback" ? "#c62828" : "#6b7280";
            ctx.setLineDash([3, 3]);
            ctx.lineWidth = 1;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.fillStyle = "#374151";
            ctx.font = `${10 * devicePixelRatio}px system-ui`;
            if (x - labelled >= 40 * devicePixelRatio) {
              ctx.fillText(m.step || m.decision, x + 3, u.bbox.top + 10 * devicePixelRatio);
              labelled = x;
            }
          }
          ctx.restore();
        }],
      },
    };
  }

  function colorOf(versions, version) {
    return COLORS[Math.max(0, versions.indexOf(version)) % COLORS.length];
  }

  function panelSeries(doc, panel) {
    const series = [{}];
    const data = [doc.times];
    for (const line of panel.lines) {
      series.push({
        label: line.label, stroke: colorOf(doc.versions, line.version), width: 2,
        dash: line.source === "router" ? [6, 4] : undefined, spanGaps: false,
        value: (u, v) => fmt(v),
      });
      data.push(line.values);
    }
    if (panel.threshold !== null && panel.threshold !== undefined) {
      series.push({ label: "limit", stroke: "#c62828", width: 1, dash: [2, 4],
        value: (u, v) => fmt(v) });
      data.push(doc.times.map(() => panel.threshold));
    }
    return [series, data];
  }

  function lastValues(panel) {
    return panel.lines.map((l) => {
      const v = [...l.values].reverse().find((x) => x !== null && x !== undefined);
      return `${l.label} ${fmt(v)}`;
    }).join(" · ") + (panel.threshold !== null && panel.threshold !== undefined
      ? ` · limit ${fmt(panel.threshold)}` : "");
  }

  function build(doc) {
    const el = document.createElement("div");
    el.className = "chart-grid";
    const entry = { el, plots: {}, lasts: {}, doc, shape: "" };
    entry.shape = shapeOf(doc);
    for (const panel of doc.panels) {
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.chart = `${doc.model}:${panel.id}`;
      const title = document.createElement("div");
      title.className = "chart-title";
      title.textContent = panel.title;
      const last = document.createElement("div");
      last.className = "chart-last";
      last.dataset.last = `${doc.model}:${panel.id}`;
      box.append(title, last);
      entry.lasts[panel.id] = last;
      el.appendChild(box);
      const [series, data] = panelSeries(doc, panel);
      const opts = {
        width: WIDTH, height: HEIGHT, series, legend: { show: false },
        scales: { x: { time: true } }, cursor: { drag: { x: false, y: false } },
        axes: [{ space: 60 }, { size: 50 }],
        plugins: [marksPlugin(() => entry.doc.marks)],
      };
      entry.plots[panel.id] = new uPlot(opts, data, box);
    }
    return entry;
  }

  function shapeOf(doc) {
    return JSON.stringify(doc.panels.map((p) => [p.id, p.lines.map((l) => l.label),
      p.threshold]));
  }

  function update(doc) {
    let entry = models[doc.model];
    if (!entry || entry.shape !== shapeOf(doc)) {
      if (entry) entry.el.remove();
      entry = models[doc.model] = build(doc);
    }
    entry.doc = doc;
    for (const panel of doc.panels) {
      const plot = entry.plots[panel.id];
      plot.setData(panelSeries(doc, panel)[1]);
      const last = entry.lasts[panel.id];
      if (last) last.textContent = lastValues(panel);
    }
    entry.el.dataset.marks = String(doc.marks.length);
    entry.el.dataset.preset = doc.preset || "";
    entry.error = doc.error || "";
    entry.detail = doc.detail || "";
    attach();
  }

  // Put each model's chart element into the placeholder the page just rendered.
  function attach() {
    document.querySelectorAll("[data-charts-for]").forEach((slot) => {
      const entry = models[slot.dataset.chartsFor];
      if (!entry) return;
      if (entry.el.parentNode !== slot) slot.appendChild(entry.el);
      const note = slot.querySelector(".chart-note") || document.createElement("div");
      note.className = "chart-note muted";
      // The card already says it (the live rates' fault): the same line once is enough.
      const card = slot.closest(".card");
      const said = card && [...card.querySelectorAll(".fault-line")]
        .some((line) => line.textContent === entry.error);
      const key = said ? "" : `${entry.error}\n${entry.detail}`;
      if (note.dataset.key !== key) { // rebuilt only when it changes: a toggle stays open
        note.dataset.key = key;
        note.textContent = said ? "" : entry.error;
      }
      if (entry.detail && !said && !note.querySelector("details")) {
        const raw = document.createElement("details");
        raw.className = "raw";
        const summary = document.createElement("summary");
        summary.textContent = "details";
        const pre = document.createElement("pre");
        pre.className = "raw";
        pre.textContent = entry.detail;
        raw.append(summary, pre);
        note.append(" ", raw);
      }
      if (!note.parentNode) slot.appendChild(note);
    });
  }

  // The Compare view: one training-loss curve per run on a shared step axis.
  function loss(el, comparison) {
    const steps = [...new Set(comparison.loss.flat().map((p) => p[0]))].sort((a, b) => a - b);
    if (!steps.length) {
      Html.render(el, Html.html`<p class="muted">No training loss logged.</p>`);
      return;
    }
    const data = [steps];
    const series = [{ label: "step" }];
    comparison.loss.forEach((curve, i) => {
      const at = new Map(curve.map((p) => [p[0], p[1]]));
      data.push(steps.map((s) => (at.has(s) ? at.get(s) : null)));
      series.push({ label: comparison.runs[i].name, stroke: COLORS[i % COLORS.length],
        width: 2, spanGaps: true });
    });
    el.replaceChildren();
    new uPlot({ width: 2 * WIDTH, height: 2 * HEIGHT, series, scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: "loss", size: 50 }] }, data, el);
  }

  return { update, attach, loss, models };
})();
