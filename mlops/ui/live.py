"""Live numbers and charts of a model's versions, read through the controller's preset.

:func:`live_rates` (each version's requests/s, error share and p99 now) and
:func:`charts` (the same over the rollout, git's weights beside the router's, decisions
as marks, the policy's limits as lines) from `promotion.metrics.live`'s queries, with the
policy read as the controller reads it (`promotion.gitrepo.policy_file`). Prometheus down
is a fault on the page, never an error: :func:`fault` makes it one line and keeps the raw
text for a toggle (docs/security.md, boundary 6).
"""

from __future__ import annotations

import math
import re
import socket
import urllib.parse
from typing import Any, Mapping, Sequence

import requests

from gitops import layout
from gitops.git import redact
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.errors import MetricFault
from promotion.gitrepo.policy_file import folder_policy
from promotion.metrics.live import LiveReader, Series, preset_of

#: How many points a chart is drawn with (the step grows with the rollout's length).
POINTS = 240
#: The shortest trailing window of a rate: a few scrapes of a 1 s (local) Prometheus.
MIN_WINDOW = 10.0
#: The longest history a chart asks Prometheus for.
MAX_SPAN = 6 * 3600.0


#: What `mlops gitops init` writes when a repo has no (readable) `mlops-gitops.yaml`.
NO_CONFIG = layout.RepoConfig(repo_url="")

#: What the page still shows when Prometheus cannot answer.
WITHOUT_PROMETHEUS = "live rates unavailable, git state shown"


def policy_of(current: layout.ModelState,
              config: layout.RepoConfig | None = None) -> CanaryPolicy:
    """The model's canary policy as the controller reads it; the defaults (in the repo's
    namespace) when it is broken (the controller reports a broken policy; a view only
    needs its limits, its preset and its namespace)."""
    try:
        return folder_policy(current, config or NO_CONFIG)
    except Exception:
        return folder_policy(layout.ModelState(model=current.model), config or NO_CONFIG)


def reader(url: str, current: layout.ModelState, config: layout.RepoConfig | None = None,
           default: str = "model", timeout: float = 2.0) -> LiveReader:
    """A reader with the preset and the namespace the controller uses for this model."""
    policy = policy_of(current, config)
    try:
        preset = preset_of(policy, default)
    except Exception:  # an unknown preset is the controller's to report; read with the default
        preset = preset_of(load_policy({}), default)
    return LiveReader(url, preset, namespace=policy.metrics.namespace or NO_CONFIG.namespace,
                      timeout=timeout)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps: causes, contexts, and urllib3's `reason`."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen) or len(seen) > 20:
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__, getattr(e, "reason", None)]
        todo += [a for a in e.args if isinstance(a, BaseException)]
    return seen


def fault(url: str, exc: BaseException, consequence: str = WITHOUT_PROMETHEUS
          ) -> tuple[str, str]:
    """(one line a person reads, the raw text) for Prometheus failing to answer (pure).

    The kind comes from the exception chain `PrometheusSource.api` leaves (a requests
    error as the fault's context), else from its message (an HTTP error answer). The URL
    is shown without credentials, and so is the raw text."""
    where = f"Prometheus at {redact(url)}"
    chain = _chain(exc)
    # urllib3 quotes the request's URL with its PromQL percent-encoded: readable again
    raw = re.sub(r"url: (\S+)", lambda m: "url: " + urllib.parse.unquote_plus(m.group(1)),
                 redact(str(exc)))
    if any(isinstance(e, requests.Timeout | socket.timeout | TimeoutError) for e in chain):
        why = "is unreachable (timed out)"
    elif any(isinstance(e, ConnectionRefusedError) for e in chain):
        why = "is unreachable (connection refused)"
    elif any(isinstance(e, socket.gaierror) for e in chain) or \
            "NameResolutionError" in raw or "Name or service not known" in raw:
        why = "is unreachable (its host name does not resolve)"
    elif any(isinstance(e, requests.exceptions.SSLError) for e in chain):
        why = "is unreachable (TLS failed)"
    elif any(isinstance(e, requests.ConnectionError | ConnectionError) for e in chain):
        why = "is unreachable (connection failed)"
    elif (status := re.search(r"HTTP (\d{3}) without JSON", raw)) is not None:
        why = f"answered HTTP {status.group(1)} without JSON (is it Prometheus?)"
    elif (status := re.search(r"HTTP (\d{3})", raw)) is not None:
        why = f"refused the query (HTTP {status.group(1)})"
    else:
        why = "could not answer"
    return f"{where} {why}; {consequence}", raw


def live_rates(url: str, current: layout.ModelState, window: float = 60.0,
               config: layout.RepoConfig | None = None, default: str = "model",
               timeout: float = 2.0) -> dict[str, dict[str, Any]]:
    """version -> {rate, error_rate, p99_ms} (or {error, detail} when Prometheus cannot
    answer: the one line and the raw text, :func:`fault`)."""
    versions = sorted(current.deployments)
    if not versions:
        return {}
    try:
        now = reader(url, current, config, default, timeout).now(current.model, versions,
                                                                 window)
    except MetricFault as exc:
        line, raw = fault(url, exc)
        return {v: {"error": line, "detail": raw} for v in versions}
    return {v: {"rate": _round(m.get("rps"), 3), "error_rate": _round(m.get("error_share"), 4),
                "p99_ms": _round(m.get("p99_ms"), 1)} for v, m in now.items()}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def span(started_at: float | None, now: float, minutes: float) -> tuple[float, float, float, float]:
    """(start, end, step, rate window) of a chart: the rollout so far when one is under way
    (from a minute before it started), else the last `minutes` (pure)."""
    start = now - minutes * 60 if started_at is None else started_at - 60
    start = max(start, now - MAX_SPAN)
    step = max(1.0, math.ceil((now - start) / POINTS))
    start = math.floor(start / step) * step  # steps on a fixed grid: points do not wander
    return start, now, step, max(MIN_WINDOW, 2 * step)


def git_weights(history: Sequence[tuple[str, float, Mapping[str, int]]], times: Sequence[float],
                versions: Sequence[str]) -> dict[str, list[int | None]]:
    """Each version's weight in git at each time: that of the last commit at or before it
    (pure; None before the first commit known)."""
    out: dict[str, list[int | None]] = {v: [] for v in versions}
    i, current = 0, None
    for t in times:
        while i < len(history) and history[i][1] <= t:
            current = history[i][2]
            i += 1
        for v in versions:
            out[v].append(None if current is None else int(current.get(v, 0)))
    return out


def marks(history: Sequence[tuple[str, float, Mapping[str, int]]],
          timeline: Sequence[Mapping[str, Any]], start: float) -> list[dict[str, Any]]:
    """The model folder's commits inside the chart as marks: time, kind, subject (pure)."""
    kinds = {t["commit"]: t for t in timeline}
    out = []
    for sha, at, _ in history:
        if at < start:
            continue
        entry = kinds.get(sha, {})
        out.append({"at": at, "commit": sha, "decision": entry.get("decision", "edit"),
                    "subject": entry.get("subject", ""), "step": entry.get("step", "")})
    return out


def panels(series: Series | None, git: Mapping[str, Sequence[int | None]],
           policy: CanaryPolicy, versions: Sequence[str]) -> list[dict[str, Any]]:
    """The charts: one panel per measure, one line per version (and per source of a
    weight), the policy's hard limit where it has one (pure)."""
    values = series.values if series is not None else {}

    def lines(measure: str) -> list[dict[str, Any]]:
        return [{"version": v, "label": v, "values": values[v][measure]}
                for v in versions if measure in values.get(v, {})]

    weight = [{"version": v, "label": f"{v} git", "source": "git", "values": list(git[v])}
              for v in versions]
    weight += [{**line, "label": f"{line['version']} router", "source": "router"}
               for line in lines("weight")]
    out: list[dict[str, Any]] = [
           {"id": "weight", "title": "weight (%)", "lines": weight, "threshold": None},
           {"id": "rps", "title": "requests/s", "lines": lines("rps"), "threshold": None},
           {"id": "error_share", "title": "error share", "lines": lines("error_share"),
            "threshold": policy.max_error_rate},
           {"id": "p99_ms", "title": "p99 latency (ms)", "lines": lines("p99_ms"),
            "threshold": policy.max_p99_ms}]
    signals = sorted({m for v in versions for m in values.get(v, {}) if m.startswith("quality.")})
    for measure in signals:
        out.append({"id": measure, "title": f"median {measure.split('.', 1)[1]}",
                    "lines": lines(measure), "threshold": None})
    return out


def charts(url: str | None, current: layout.ModelState,
           history: Sequence[tuple[str, float, Mapping[str, int]]],
           timeline: Sequence[Mapping[str, Any]], started_at: float | None, now: float,
           minutes: float = 15.0, config: layout.RepoConfig | None = None,
           default: str = "model") -> dict[str, Any]:
    """Everything the Models page draws for one model."""
    start, end, step, window = span(started_at, now, minutes)
    versions = sorted(set(current.deployments) | {v for _, _, w in history for v in w})
    policy = policy_of(current, config)
    series, problem, detail = None, None, None
    if url:
        live = reader(url, current, config, default)
        try:
            series = live.series(current.model, versions, start, end, step, window)
        except MetricFault as exc:
            problem, detail = fault(url, exc)
        preset = live.preset.name
    else:
        preset, problem = None, "no Prometheus given (start `mlops ui` with --prometheus)"
    if series is not None:
        times = series.times
    else:  # the grid, then now: git's weights as they are, not as of up to a step ago
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        times += [end] if times[-1] < end else []
    return {
        "model": current.model, "start": start, "end": end, "step": step, "window": window,
        "preset": preset, "error": problem, "detail": detail, "times": times,
        "versions": versions, "namespace": policy.metrics.namespace,
        "panels": panels(series, git_weights(history, times, versions), policy, versions),
        "marks": marks(history, timeline, start),
    }
