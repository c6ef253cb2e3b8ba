"""Reports a human reads: the evaluation report (a PR body) and the canary report.

Plain Markdown that GitHub, GitLab and Gitea render alike, built by pure functions from
plain data. Only `write_canary_report` touches the disk: it draws the PNG in a
short-lived child process (matplotlib's `Agg` backend) from the controller's
`timeline.jsonl`, one point per analysis interval, and writes the Markdown beside it.
Why a child process: docs/inside-promotion.md, "Reports".
"""

from __future__ import annotations

import json
import math
import multiprocessing
import pathlib
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from cogs.files import atomic_write_text, replacing
from promotion.reports.report_paired import same_images_section

__all__ = [
    "METRIC_NAMES",
    "canary_summary",
    "evaluation_report",
    "plot_in_child",
    "plot_timeline",
    "read_timeline",
    "write_canary_report",
]

METRIC_NAMES: dict[str, str] = {
    "map50": "mAP@0.5",
    "map": "mAP@[.5:.95]",
    "map75": "mAP@0.75",
}

_LINEAGE = (
    ("version", "version"),
    ("weights_sha256", "weights sha256"),
    ("training_commit", "training commit"),
    ("workflow_id", "workflow id"),
    ("dataset_digest", "dataset digest"),
    ("paddle_version", "Paddle"),
)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}f}"
    return str(value)


def _cell(value: Any) -> str:
    # A pipe or a newline would break the table; backticks keep digests readable. Text
    # that training wrote (hyperparameters, lineage) is escaped as HTML: a `<!--` in it
    # must not open a comment in the PR body, let alone forge the proposal record.
    text = str(value).replace("<", "&lt;")  # no tag, no comment can open; "->" stays
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    text = _cell(value)
    return f"`{text}`" if text and text != "–" else "–"


def evaluation_report(
    record: Mapping[str, Any],
    production: Mapping[str, Any] | None = None,
    *,
    gate: Mapping[str, Any] | None = None,
    steps: Sequence[int] = (10, 25, 50, 100),
    approval: str = "pr",
    model_uri: str | None = None,
    bootstrap: bool = False,
    data: str | None = None,
) -> str:
    """The PR body: metrics vs production, gate verdict, data diff, lineage, rollout plan.

    `record` and `production` are `model.yaml` mappings (the production one may
    lack fields: it was perhaps written by hand). `gate` is the gate step's
    `gate.json` when there is one; `data` the Markdown of the data diff against
    production's pin (`promotion.reports.data_report`), when the candidate's data is pinned.
    """
    name = record.get("name", "model")
    version = record.get("version", "?")
    lines = [f"## Promote `{_cell(name)}` `{_cell(version)}`", ""]
    if bootstrap:
        lines += [
            "First version of this model: it becomes **stable at 100 %** when this "
            "PR is merged (no canary, there is nothing to compare with).",
            "",
        ]
    else:
        prod_version = (production or {}).get("version", "?")
        lines += [
            f"Canary of `{_cell(version)}` against stable `{_cell(prod_version)}`: "
            f"merging starts it at **{steps[0]} %**; the promotion controller then "
            f"steps {' → '.join(f'{s} %' for s in steps)} or rolls back, one commit per decision.",
            "",
        ]

    metrics = dict(record.get("metrics") or {})
    prod_metrics = dict((production or {}).get("metrics") or {})
    if gate and isinstance(gate.get("sets"), list) and gate["sets"]:
        # Production's numbers on the candidate's val images, not its own old val set's.
        same = gate["sets"][0]["intervals"]["production"]
        prod_metrics = {k: v["estimate"] for k, v in same.items()}
    lines += ["### Evaluation", ""]
    if not metrics:
        lines += ["No metrics recorded in `model.yaml` (was the evaluate step run?).", ""]
    else:
        keys = [k for k in METRIC_NAMES if k in metrics] + sorted(
            k for k in metrics if k not in METRIC_NAMES
        )
        lines += ["| metric | candidate | production | change |", "|---|---:|---:|---:|"]
        for key in keys:
            cand = metrics.get(key)
            prod = prod_metrics.get(key)
            change = "–"
            if isinstance(cand, int) and isinstance(prod, int):  # a count, e.g. images
                change = f"{cand - prod:+d}"
            elif isinstance(cand, (int, float)) and isinstance(prod, (int, float)):
                change = f"{float(cand) - float(prod):+.4f}"
            lines.append(
                f"| {METRIC_NAMES.get(key, _cell(key))} | {_fmt(_num(cand))} "
                f"| {_fmt(_num(prod))} | {change} |"
            )
        lines.append("")

    if gate:
        lines += ["### Gate", "", f"{_GATE_WORDS[_gate_outcome(gate)]}: "
                  f"{_cell(gate.get('reason', ''))}", ""]
        lines += same_images_section(gate)

    if data:
        lines += ["### Data", "", data.rstrip("\n"), ""]

    lines += ["### Lineage", "", "| | candidate | production |", "|---|---|---|"]
    for key, label in _LINEAGE:
        lines.append(f"| {label} | {_code(record.get(key, '–'))} | "
                     f"{_code((production or {}).get(key, '–'))} |")
    if model_uri:
        lines.append(f"| model URI | {_code(model_uri)} | |")
    lines.append("")

    hyper = record.get("hyperparameters") or {}
    if isinstance(hyper, Mapping) and hyper:
        lines += ["<details><summary>Hyperparameters</summary>", "", "| name | value |",
                  "|---|---|"]
        lines += [f"| {_cell(k)} | {_code(v)} |" for k, v in hyper.items()]
        lines += ["", "</details>", ""]

    if gate and _gate_outcome(gate) == "review":
        how = ("The gate could not decide (`gate.inconclusive: review`): this PR waits for a "
               "human's judgement of the intervals above, whatever `approval` says. Merge it "
               "to approve; close it to refuse.")
    elif approval == "auto":
        how = "Merged automatically (`approval: auto`)."
    else:
        how = "Merge this PR to approve (`approval: pr`)."
    lines += ["### Approval", "", how, ""]
    return "\n".join(lines)


_GATE_WORDS = {"pass": "✅ passed", "review": "⚠️ inconclusive, needs review",
               "fail": "❌ failed"}


def _gate_outcome(gate: Mapping[str, Any]) -> str:
    """pass, review or fail; a record from before the third outcome says only `passed`."""
    outcome = gate.get("outcome")
    if outcome in _GATE_WORDS:
        return str(outcome)
    return "pass" if gate.get("passed") else "fail"


def _num(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value  # a count stays an int: "8000", not "8000.0000"
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# --- canary report -----------------------------------------------------------------------


def read_timeline(path: pathlib.Path) -> list[dict[str, Any]]:
    """Points of a `timeline.jsonl`; a torn last line (a crash mid-write) is ignored."""
    if not path.is_file():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            point = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(point, dict) and "t" in point:
            points.append(point)
    return points


def _series(points: Sequence[Mapping[str, Any]], version: str, key: str) -> list[float]:
    out = []
    for p in points:
        v = (p.get(version) or {}).get(key)
        out.append(float("nan") if v is None else float(v))
    return out


def plot_timeline(points: Sequence[Mapping[str, Any]], path: pathlib.Path, title: str) -> None:
    """Panels over time: weight, request rate, error rate, p99 (stable vs canary), and
    the share of poor answers per model-quality check when the source measured them."""
    # Here, not at the top: matplotlib is the controller extra's and costs ~1 s to import,
    # and only a plot needs it; the Agg backend is chosen before pyplot loads.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = points[0]["t"] if points else 0.0
    xs = [(p["t"] - t0) / 60.0 for p in points]
    checks = sorted({name for p in points for version in ("stable", "canary")
                     for name in ((p.get(version) or {}).get("poor") or {})})
    fig, axes = plt.subplots(5 if checks else 4, 1, figsize=(8, 11 if checks else 9),
                             sharex=True)
    try:
        # A point is the window that *ends* at t, at the weight it had meanwhile.
        axes[0].step(xs, [p.get("weight", 0) for p in points], where="pre", color="tab:purple")
        axes[0].set_ylabel("canary weight %")
        axes[0].set_ylim(-5, 105)
        panels = (("rps", "requests/s", 1.0), ("error_rate", "error rate %", 100.0),
                  ("p99_ms", "p99 ms", 1.0))
        if checks:
            ax = axes[4]
            for version, color in (("stable", "tab:blue"), ("canary", "tab:orange")):
                for check, style in zip(checks, ("-", "--", ":", "-.")):
                    ys = [100.0 * float(((p.get(version) or {}).get("poor") or {}).get(
                        check, float("nan"))) for p in points]
                    ax.plot(xs, ys, marker=".", color=color, linestyle=style,
                            label=f"{version}: {check}")
            ax.set_ylabel("poor answers %")
            ax.legend(loc="upper left", fontsize="small")
        for ax, (key, label, scale) in zip(axes[1:4], panels):
            for version, color in (("stable", "tab:blue"), ("canary", "tab:orange")):
                ys = [v * scale for v in _series(points, version, key)]
                ax.plot(xs, ys, marker=".", color=color, label=version)
            if all(
                math.isnan(v)
                for v in _series(points, "stable", key) + _series(points, "canary", key)
            ):
                ax.text(0.5, 0.5, "not measured by this metric source", ha="center",
                        va="center", transform=ax.transAxes, color="grey")
            ax.set_ylabel(label)
            ax.legend(loc="upper left", fontsize="small")
        colors = {"step": "grey", "promote": "green", "rollback": "red"}
        for p, x in zip(points, xs):
            kind = p.get("decision")
            shadow = str(p.get("cause", "")).removeprefix("shadow-")
            if kind in colors or (shadow != p.get("cause") and shadow in colors):
                style = "-" if kind in colors else ":"  # dotted: a verdict not acted on
                for ax in axes:
                    ax.axvline(x, color=colors.get(str(kind), colors.get(shadow)), alpha=0.3,
                               linewidth=1, linestyle=style)
        axes[-1].set_xlabel("minutes since the canary started")
        axes[0].set_title(title)
        fig.tight_layout()
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=80, format="png")
    finally:
        plt.close(fig)


def plot_in_child(points: Sequence[Mapping[str, Any]], path: pathlib.Path, title: str,
                  timeout: float = 180.0) -> None:
    """`plot_timeline` in a fresh (spawned, not forked: the caller has threads) child
    process, so matplotlib never lives in the caller; its errors are raised here."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        pool.submit(plot_timeline, list(points), path, title).result(timeout=timeout)


def canary_summary(
    model: str,
    stable: str | None,
    candidate: str,
    outcome: str,
    decisions: Iterable[Mapping[str, Any]],
    points: Sequence[Mapping[str, Any]] = (),
    *,
    plot_name: str | None = "canary.png",
) -> str:
    """Markdown summary of one rollout: outcome, the decisions in order, totals per version.

    `decisions` are the committed decisions (from git trailers): each with
    `kind`, `subject`, `commit`, `time` and optionally `reason`.
    """
    lines = [f"## Canary report: `{_cell(model)}` `{_cell(candidate)}` over "
             f"`{_cell(stable or '–')}`", "", f"**Outcome: {outcome}**", ""]
    if plot_name:
        lines += [f"![canary timeline]({plot_name})", ""]
    decisions = list(decisions)
    if decisions:
        lines += ["| # | time (UTC) | decision | commit | reason |", "|---:|---|---|---|---|"]
        for i, d in enumerate(decisions, 1):
            when = d.get("time")
            stamp = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(when)))
                     if isinstance(when, (int, float)) else _cell(when or "–"))
            lines.append(
                f"| {i} | {stamp} | {_cell(d.get('subject') or d.get('kind', '?'))} | "
                f"{_code(str(d.get('commit', ''))[:12] or '–')} | {_cell(d.get('reason') or '')} |"
            )
        lines.append("")
    shadow = [p for p in points if str(p.get("cause", "")).startswith("shadow-")]
    if shadow:
        lines += [f"Shadow mode: {len(shadow)} verdicts recorded, none acted on.", "",
                  "| time (UTC) | weight | verdict |", "|---|---:|---|"]
        for p in shadow:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(p["t"])))
            lines.append(f"| {stamp} | {p.get('weight', '–')} % | {_cell(p.get('reason', ''))} |")
        lines.append("")
    if points:
        lines += ["| version | requests | errors | error rate | worst p99 ms |",
                  "|---|---:|---:|---:|---:|"]
        for version in ("stable", "canary"):
            req = sum(float((p.get(version) or {}).get("requests") or 0) for p in points)
            err = sum(float((p.get(version) or {}).get("errors") or 0) for p in points)
            p99s = [v for v in _series(points, version, "p99_ms") if not math.isnan(v)]
            rate = f"{100.0 * err / req:.3f} %" if req else "–"
            worst = f"{max(p99s):.1f}" if p99s else "–"
            lines.append(f"| {version} | {int(req)} | {int(err)} | {rate} | {worst} |")
        span = (points[-1]["t"] - points[0]["t"]) / 60.0
        lines += ["", f"{len(points)} analysis intervals over {span:.1f} min.", ""]
    else:
        lines += ["No analysis intervals were recorded by this controller.", ""]
    return "\n".join(lines)


def write_canary_report(
    directory: pathlib.Path,
    model: str,
    stable: str | None,
    candidate: str,
    outcome: str,
    decisions: Iterable[Mapping[str, Any]],
    points: Sequence[Mapping[str, Any]],
) -> tuple[pathlib.Path, pathlib.Path | None]:
    """Write `canary.png` (when there are points) and `report.md` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    png: pathlib.Path | None = None
    if points:
        png = directory / "canary.png"
        plot_in_child(points, png, f"{model}: {candidate} over {stable or '–'} ({outcome})")
    text = canary_summary(model, stable, candidate, outcome, decisions, points,
                          plot_name=png.name if png else None)
    md = directory / "report.md"
    atomic_write_text(md, text)
    return md, png
