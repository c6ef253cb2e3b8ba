"""Live per-version rates from Prometheus, read by the controller's own metric source.

`PrometheusSource.observe` over the last `window` seconds, with the preset the
model's `canary-policy.yaml` names (as `mlops controller` picks it): requests
per second, the share of errors and the p99 latency of each version. Prometheus
down is a message on the page, never an error.
"""

from __future__ import annotations

from typing import Any

from gitops import layout
from promotion.decision.observations import VersionWindow, histogram_quantile
from promotion.decision.policy import load_policy
from promotion.gitrepo.apply import POLICY_FILE
from promotion.metrics.prometheus import PrometheusSource


def _rates(window: VersionWindow, seconds: float) -> dict[str, Any]:
    p99 = histogram_quantile(0.99, window.latency) if window.latency else None
    return {
        "rate": round(window.requests / seconds, 3),
        "error_rate": round(window.errors / window.requests, 4) if window.requests else None,
        "p99_ms": None if p99 is None else round(p99 * 1000, 1),
    }


def live_rates(url: str, current: layout.ModelState, window: float = 60.0,
               namespace: str = "default", timeout: float = 2.0) -> dict[str, dict[str, Any]]:
    """version -> {rate, error_rate, p99_ms} (or {error} when Prometheus cannot answer)."""
    versions = sorted(current.deployments)
    if not versions:
        return {}
    try:
        raw = current.extra.get(POLICY_FILE)
        policy = load_policy(raw if isinstance(raw, dict) else {})
        preset = policy.metrics.preset or "model"  # rates, not verdicts: any view will do
    except Exception:  # a broken policy is the controller's to report; read with the default
        preset = "model"
    source = PrometheusSource(url, preset=preset, namespace=namespace, timeout=timeout)
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(versions), 2):
        pair = versions[i:i + 2]
        obs = source.observe(current.model, pair[0], pair[-1], window)
        if obs.fault:
            return {v: {"error": f"Prometheus: {obs.fault}"} for v in versions}
        assert obs.stable is not None and obs.canary is not None
        out[pair[0]] = _rates(obs.stable, window)
        out[pair[-1]] = _rates(obs.canary, window)
    return out
