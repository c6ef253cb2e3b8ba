"""A model version's Deployment, as the process the local platform starts for it (pure).

Container 0 of the rendered pod template becomes a local process, as the kubelet would
run it: the command from this Python environment, the models claim and `emptyDir`s as
local directories, the container port as a free loopback port, the readiness and
startup probes as written. The container -> process part is `cogs.containers`. Errors
name the file and the field (:class:`PodSpecError`). What is translated and why:
docs/inside-local.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any, Mapping

from cogs.containers import ContainerSpecError, Mounts, local_argv, local_process

__all__ = ["LocalPod", "PodSpecError", "Probe", "local_pod", "pod_digest", "probe_of"]

MODELS_MOUNT = "/models"


class PodSpecError(ValueError):
    """The Deployment cannot run locally; the message names the file and field."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """An HTTP readiness probe, with Kubernetes' defaults for what is not written."""

    path: str = "/v2/health/ready"
    port: int = 8080
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


@dataclasses.dataclass(frozen=True)
class LocalPod:
    """What the sync starts for one Deployment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    readiness: Probe
    #: Seconds a server may take to become ready (startup probe budget).
    start_timeout: float
    #: Probe period until the first success (the startup probe's, when there is one).
    start_period: float
    #: Local directories standing in for the pod's emptyDir volumes.
    scratch_dirs: tuple[str, ...] = ()


def _container(deployment: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    try:
        containers = deployment["spec"]["template"]["spec"]["containers"]
        container = containers[0]
    except (KeyError, IndexError, TypeError):
        raise PodSpecError(f"{source}: spec.template.spec.containers[0] is missing") from None
    if not isinstance(container, Mapping):
        raise PodSpecError(f"{source}: spec.template.spec.containers[0] is not a mapping")
    return container


def pod_digest(deployment: Mapping[str, Any]) -> str:
    """A digest of the pod template: a change means a new pod (a restart), as in Kubernetes."""
    template = (deployment.get("spec") or {}).get("template") or {}
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def _port(value: Any, container: Mapping[str, Any], source: str, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise PodSpecError(
        f"{source}: {field} names port {value!r}, which the container does not declare"
    )


def probe_of(
    deployment: Mapping[str, Any], source: str, kind: str = "readinessProbe"
) -> Probe | None:
    """The container's HTTP probe of `kind`, or None when it has none."""
    container = _container(deployment, source)
    spec = container.get(kind)
    if spec is None:
        return None
    field = f"spec.template.spec.containers[0].{kind}"
    http = spec.get("httpGet") if isinstance(spec, Mapping) else None
    if not isinstance(http, Mapping):
        raise PodSpecError(f"{source}: {field}: only httpGet probes run locally")
    if str(http.get("scheme", "HTTP")).upper() != "HTTP":
        raise PodSpecError(f"{source}: {field}.httpGet.scheme: only HTTP probes run locally")
    try:
        return Probe(
            path=str(http.get("path", "/")),
            port=_port(http.get("port"), container, source, f"{field}.httpGet.port"),
            initial_delay=float(spec.get("initialDelaySeconds", 0)),
            period=float(spec.get("periodSeconds", 10)),
            timeout=float(spec.get("timeoutSeconds", 1)),
            success_threshold=int(spec.get("successThreshold", 1)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
        )
    except (TypeError, ValueError) as exc:
        raise PodSpecError(f"{source}: {field}: {exc}") from None


def local_pod(
    deployment: Mapping[str, Any],
    *,
    source: str,
    model_dir: str,
    port: int,
    scratch: str,
    python: str = sys.executable,
) -> LocalPod:
    """Translate one Deployment into a local process (see the module docstring)."""
    container = _container(deployment, source)
    labels = ((deployment.get("metadata") or {}).get("labels")) or {}
    model, version = labels.get("app"), labels.get("version")
    volumes = {v.get("name"): v for v in
               (deployment["spec"]["template"]["spec"].get("volumes") or [])}
    mounts: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        path = str(mount.get("mountPath", ""))
        if "persistentVolumeClaim" in volume:
            # The models claim: this version's directory is the one the annotation names.
            mounts[f"{path.rstrip('/')}/{model}/{version}"] = model_dir
        elif "emptyDir" in volume:
            mounts[path] = f"{scratch}/{mount.get('name')}"
        else:
            raise PodSpecError(f"{source}: volume {mount.get('name')!r} is neither a claim nor "
                               "an emptyDir; it cannot be mounted locally")
    try:
        # valueFrom (a Secret, a field): the local environment's own value, if any
        process = local_process(container, source=source, mounts=Mounts(mounts))
    except ContainerSpecError as exc:
        raise PodSpecError(str(exc)) from None
    ports = [int(p["containerPort"]) for p in container.get("ports") or [] if "containerPort" in p]
    argv = local_argv(_without_termination_log(_rebind(process.argv, ports, port, source)),
                      python)
    readiness = probe_of(deployment, source) or Probe(port=ports[0] if ports else port)
    startup = probe_of(deployment, source, "startupProbe")
    start_timeout = (startup.period * startup.failure_threshold + startup.initial_delay
                     if startup else 300.0)
    if readiness.port in ports:
        readiness = dataclasses.replace(readiness, port=port)
    scratch_dirs = tuple(d for d in mounts.values() if d.startswith(scratch))
    return LocalPod(argv=tuple(argv), env=process.env, readiness=readiness,
                    start_timeout=start_timeout,
                    start_period=startup.period if startup else readiness.period,
                    scratch_dirs=scratch_dirs)


def _without_termination_log(argv: list[str]) -> list[str]:
    """`--termination-log PATH` left out: no kubelet keeps the message here; the server
    stays live and never ready, and the sync reads why from its probe (`cannot_serve`)."""
    out: list[str] = []
    skip = False
    for part in argv:
        if skip:
            skip = False
        elif part == "--termination-log":
            skip = True
        elif not part.startswith("--termination-log="):
            out.append(part)
    return out


def _rebind(argv: list[str], ports: list[int], local_port: int, source: str) -> list[str]:
    """`--port N` (or `--port=N`) for the container port -> the local port; 0.0.0.0 -> loopback."""
    out = list(argv)
    found = False
    for i, part in enumerate(out):
        if part == "--port" and i + 1 < len(out) and out[i + 1].isdigit() \
                and int(out[i + 1]) in ports:
            out[i + 1] = str(local_port)
            found = True
        elif part.startswith("--port=") and part[7:].isdigit() and int(part[7:]) in ports:
            out[i] = f"--port={local_port}"
            found = True
        elif part == "--host" and i + 1 < len(out) and out[i + 1] == "0.0.0.0":
            out[i + 1] = "127.0.0.1"
    if not found:
        raise PodSpecError(
            f"{source}: the container's args do not pass its containerPort ({ports or 'none'}) "
            "as --port N; the local platform gives every server its own port that way")
    return out
