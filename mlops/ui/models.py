"""The Models page's data: versions, weights, phase, live rates, the decision timeline.

Pure functions of what the readers return: a `layout.ModelState` (the repo's
documents), the `promotion.yaml` as `promotion.decision.state.load_state` parses it, the
commits of the model's folder (`Mirror.log` with their trailers) and, when
Prometheus is known, each version's window from `PrometheusSource.observe`.
"""

from __future__ import annotations

import pathlib
from typing import Any, Mapping, Sequence

from contracts.traffic import TrafficError, read_routes
from gitops import layout
from gitops.proposal import ANNOTATION_WEIGHTS_SHA256
from gitops.repo import CommitInfo
from mlops.ui.source import evidence
from promotion.decision.state import CanaryState, load_state
from promotion.errors import StateError

REPORT_FILES = ("report.md", "report.png")


def canary_state(current: layout.ModelState) -> tuple[CanaryState | None, str | None]:
    """`promotion.yaml` parsed by the promotion room's reader, or the reason it cannot be."""
    doc = current.extra.get(layout.PROMOTION)
    if doc is None:
        return None, None
    try:
        return load_state(doc, f"apps/{current.model}/promotion.yaml"), None
    except StateError as exc:
        return None, str(exc)


def split_refusal(current: layout.ModelState) -> str | None:
    """Why the controller and the sync refuse this folder's split (file and field), or
    None: the strict reading they apply to a hand-edited VirtualService."""
    if current.destination_rule is None or current.virtual_service is None:
        return None
    try:
        read_routes(current.destination_rule, current.virtual_service,
                    dr_path=f"apps/{current.model}/destinationrule.yaml",
                    vs_path=f"apps/{current.model}/virtualservice.yaml")
    except TrafficError as exc:
        return f"refused: {exc}; nothing changes until it is fixed"
    return None


def _digest(deployment: Mapping[str, Any]) -> str | None:
    meta = deployment.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ANNOTATION_WEIGHTS_SHA256)
    return str(value) if value else None


def timeline(commits: Sequence[CommitInfo]) -> list[dict[str, Any]]:
    """One entry per commit of the model's folder: verdict, step, reason, checks."""
    out = []
    for c in commits:
        t = c.trailers
        decision = t.get("Mlops-Decision", "")
        kind, _, cause = decision.partition("/")
        checks = []
        for check in evidence(t).get("checks", []):
            if isinstance(check, dict):
                checks.append({k: check.get(k) for k in
                               ("name", "verdict", "value", "threshold", "statistic", "samples")
                               if k in check})
        out.append({
            "commit": c.sha, "subject": c.subject, "author": c.author_name,
            "decision": kind or ("merge" if "Mlops-Pull-Request" in t else "edit"),
            "cause": cause, "step": t.get("Mlops-Step", ""),
            "reason": t.get("Mlops-Reason", ""), "window": t.get("Mlops-Window", ""),
            "requested_by": t.get("Mlops-Requested-By", ""),
            "pull_request": t.get("Mlops-Pull-Request", ""), "checks": checks,
        })
    return out


def reports(root: pathlib.Path | None, model: str) -> list[dict[str, str]]:
    """Canary reports the controller wrote under `root/rollouts/<model>/<candidate>/`."""
    folder = root / "rollouts" / model if root else None
    if folder is None or not folder.is_dir():
        return []
    found = []
    for candidate in sorted(p.name for p in folder.iterdir() if p.is_dir()):
        for name in REPORT_FILES:
            if (folder / candidate / name).is_file():
                found.append({"candidate": candidate, "file": name,
                              "url": f"reports/{model}/{candidate}/{name}"})
    return found


def model_view(current: layout.ModelState, commits: Sequence[CommitInfo],
               live: Mapping[str, Mapping[str, Any]] | None = None,
               report_root: pathlib.Path | None = None,
               served: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the Models page shows for one model.

    `served`: the local platform's versions of this model as `mlops status` reports them
    (`lifecycle.status`: HAProxy's live weight, the server's phase); None elsewhere.
    """
    state, problem = canary_state(current)
    weights = current.weights()
    versions = []
    for version in sorted(set(current.deployments) | set(weights) | set(served or {})):
        role = ""
        if state is not None:
            role = ("stable" if version == state.stable else
                    "candidate" if version == state.candidate else "")
        versions.append({
            "version": version, "role": role, "weight": weights.get(version),
            "weights_sha256": _digest(current.deployments.get(version) or {}),
            "live": dict((live or {}).get(version) or {}),
            "served": None if served is None else {
                k: (served.get(version) or {}).get(k)
                for k in ("haproxy_weight", "phase", "ready", "restarts")},
        })
    view: dict[str, Any] = {
        "name": current.model, "versions": versions, "state_error": problem,
        "split_error": split_refusal(current),
        "timeline": timeline(commits), "reports": reports(report_root, current.model),
    }
    if state is not None:
        last = state.last_decision
        view["canary"] = {
            "phase": state.phase.value, "stable": state.stable, "candidate": state.candidate,
            "weight": state.weight, "paused": state.paused, "pause_reason": state.pause_reason,
            "requested": state.requested, "requested_by": state.requested_by,
            "awaiting_approval": state.awaiting_approval, "approved_by": state.approved_by,
            "active": state.phase.active,
            "last_decision": None if last is None else {
                "kind": last.kind, "reason": last.reason, "at": last.at.isoformat(),
                "cause": last.cause},
        }
    return view
