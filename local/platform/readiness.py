"""The local platform's answer to "is this version deployed and ready?".

The controller's stand-in for the Kubernetes API (`promotion.cluster.readiness`):
the sync loop writes, per version, whether its Deployment is part of the
applied commit, its server passed the Deployment's readiness probe and
HAProxy routes to it (`ready` in `state/status.json`). A version the sync has
not applied yet (cluster-latency mode: `mlops up --sync-delay`) or whose
server is still starting (`--start-delay`, a slow load) is not ready, for now.
A server that said it cannot answer (`cannot_serve`: its warm-up inference
failed, and it never tries again) is not ready for good (`Readiness.lasting`).
"""

from __future__ import annotations

from typing import Any, Mapping

from cogs.files import read_json
from local.platform.workdir import Workdir
from promotion.cluster.readiness import Readiness, routing_applied

__all__ = ["PlatformReadiness"]


class PlatformReadiness:
    """Reads the sync's status file of the platform in `workdir`."""

    def __init__(self, workdir: Workdir) -> None:
        self.workdir = workdir

    def check(self, model: str, version: str, desired: Mapping[str, Any] | None) -> Readiness:
        doc = read_json(self.workdir.status, {}) or {}
        if not doc:
            return Readiness(False, f"no platform status in {self.workdir.root} (is it up?)")
        entry = ((doc.get("models") or {}).get(model) or {}).get("versions", {}).get(version)
        if entry is None or entry.get("desired_weight") is None:
            applied = str(doc.get("applied_commit") or "nothing")[:12]
            return Readiness(False, f"{model} {version} is not applied yet (applied: {applied})")
        if not entry.get("ready"):
            if entry.get("cannot_serve"):
                return Readiness(False, f"{model} {version} cannot serve: "
                                        f"{entry['cannot_serve']}", lasting=True)
            successor = entry.get("successor")
            if successor:
                return Readiness(False, f"{model} {version}: its new pod is "
                                        f"{successor.get('phase', 'starting')} beside the "
                                        "serving one")
            why = entry.get("not_ready_reason") or "readiness probe not passed or not routed"
            return Readiness(False, f"{model} {version} is {entry.get('phase', 'pending')}, "
                                    f"not ready ({why})")
        return Readiness(True, f"{model} {version} ready on port {entry.get('port')}")

    def router_url(self, model: str) -> str | None:
        """The model's HAProxy frontend (what clients use; the paired answers probe
        pins each request to a version there), None before the sync routed it."""
        doc = read_json(self.workdir.status, {}) or {}
        url = ((doc.get("models") or {}).get(model) or {}).get("url")
        return str(url) if url else None

    def routed(self, model: str, weights: Mapping[str, int]) -> Readiness:
        """HAProxy's weights, as the sync last set them (`haproxy_weight`)."""
        doc = read_json(self.workdir.status, {}) or {}
        versions = ((doc.get("models") or {}).get(model) or {}).get("versions")
        if not versions:
            return routing_applied(None, weights, model)
        live = {v: int(e.get("haproxy_weight") or 0) for v, e in versions.items()
                if e.get("haproxy_up")}
        return routing_applied(live, weights, model)
