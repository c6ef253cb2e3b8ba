"""Serving manifests: pure builders for one model's Kubernetes and Istio documents.

Each function returns a plain ``dict`` (ready for ``yaml.safe_dump``) and does no I/O:
the Deployment of a version (with the model-uri, weights-sha256 and metrics annotations
other rooms read; :func:`deployment_metrics` reads the last back), the Service, the
DestinationRule and the VirtualService. Bad input raises :class:`ManifestError`
(``exit_code`` 2) naming the value. Why a read-only volume, and the annotations:
docs/inside-serving.md.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any, Mapping, Sequence

from cogs.pods import container_security, pod_security
from contracts.errors import ExitCode, MlopsError
from contracts.names import model_name_problem, version_problem
from contracts.traffic import (
    CANARY,
    MESH_GATEWAY,
    STABLE,
    UNPINNED,
    TrafficError,
    build_route,
    pinned_routes,
)
from serving.options import ServingOptions

__all__ = [
    "ANNOTATION_METRICS",
    "ANNOTATION_MODEL_URI",
    "ANNOTATION_WEIGHTS_SHA256",
    "DEFAULT_MODELS_CLAIM",
    "DEFAULT_RESOURCES",
    "ISTIO_API",
    "ManifestError",
    "TERMINATION_MESSAGE_PATH",
    "deployment",
    "deployment_metrics",
    "deployment_name",
    "destination_rule",
    "model_dir",
    "service",
    "virtual_service",
]

ANNOTATION_MODEL_URI = "mlops.paddle.org/model-uri"
ANNOTATION_WEIGHTS_SHA256 = "mlops.paddle.org/weights-sha256"
ANNOTATION_METRICS = "mlops.paddle.org/metrics"
ISTIO_API = "networking.istio.io/v1"
DEFAULT_MODELS_CLAIM = "mlops-models"
MODELS_MOUNT = "/models"
#: Kubernetes' default terminationMessagePath, written out: the server's `--termination-log`.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

#: Requests sized for one CPU predictor with a warm pool; limits leave room for
#: a burst. Quantities are strings, as the API server writes them.
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "1", "memory": "1Gi"},
    "limits": {"cpu": "2", "memory": "2Gi"},
}

# Names end up in DNS (Service, host of the DestinationRule): RFC 1035 label.
# Versions are label values and part of the Deployment name: lower case only.
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_DNS1123_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RUN_AS = 1000


class ManifestError(MlopsError, ValueError):
    """A value cannot become a valid manifest; the message names the value."""

    exit_code = ExitCode.BAD_INPUT


def _check_model(model: str) -> None:
    problem = model_name_problem(model)
    if problem:
        raise ManifestError(problem)


def _check_version(version: str) -> None:
    problem = version_problem(version)
    if problem:
        raise ManifestError(problem)


def _check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ManifestError(f"port {port!r} must be an integer between 1 and 65535")


def _metadata(name: str, labels: dict[str, str], namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels
    return meta


def deployment_name(model: str, version: str) -> str:
    """Name of the Deployment serving ``version`` of ``model``."""
    return f"{model}-{version}"


def model_dir(model: str, version: str) -> str:
    """Directory the server is started on inside the pod."""
    return f"{MODELS_MOUNT}/{model}/{version}"


def _resources(resources: dict[str, Any] | None, workers: int = 1) -> dict[str, Any]:
    if resources is None and workers > 1:  # one core and one model load per worker
        return {"requests": {"cpu": str(workers), "memory": f"{workers}Gi"},
                "limits": {"cpu": str(workers + 1), "memory": f"{workers + 1}Gi"}}
    if resources is None:
        return copy.deepcopy(DEFAULT_RESOURCES)
    if not isinstance(resources, dict) or not set(resources) <= {"requests", "limits"}:
        raise ManifestError(
            f"resources {resources!r} must be a mapping with 'requests' and/or 'limits'"
        )
    out: dict[str, Any] = {}
    for key in ("requests", "limits"):
        if key in resources:
            values = resources[key]
            if not isinstance(values, dict):
                raise ManifestError(f"resources.{key} {values!r} must be a mapping")
            # Quantities as strings: `cpu: 1` and `cpu: "1"` mean the same to the
            # API server, but only strings survive every schema and round trip.
            out[key] = {str(k): str(v) for k, v in values.items()}
    return out


def _metric_value(name: Any, value: Any) -> float:
    if not isinstance(name, str) or not name:
        raise ManifestError(f"metric name {name!r} must be a non-empty string")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ManifestError(f"metric {name!r} = {value!r} must be a finite number")
    return value


def _metrics_annotation(metrics: Mapping[str, float]) -> str:
    """Compact JSON with sorted keys: one text per set of metrics, stable in git diffs."""
    if not isinstance(metrics, Mapping):
        raise ManifestError(f"metrics {metrics!r} must be a mapping of metric name -> number")
    values = {name: _metric_value(name, value) for name, value in metrics.items()}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def deployment_metrics(doc: Mapping[str, Any]) -> dict[str, float] | None:
    """The metrics a Deployment records (annotation ``mlops.paddle.org/metrics``), or None.

    The inverse of ``deployment(..., metrics=...)``. A human may edit the
    annotation, so a value that is not a JSON mapping of names to finite
    numbers raises :class:`ManifestError` naming the Deployment.
    """
    meta = doc.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(ANNOTATION_METRICS)
    if text is None:
        return None
    where = f"Deployment {meta.get('name')!r}: annotation {ANNOTATION_METRICS}"
    try:
        data = json.loads(text) if isinstance(text, str) else None
    except ValueError as exc:
        raise ManifestError(f"{where} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{where} must be a JSON object of metric -> number, got {text!r}")
    try:
        # as written: a count stays an int (the PR table printed "8000.0000" for detections)
        return {name: _metric_value(name, value) for name, value in data.items()}
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def deployment(
    model: str,
    version: str,
    *,
    image: str,
    model_uri: str,
    weights_sha256: str,
    replicas: int = 1,
    port: int = 8080,
    resources: dict[str, Any] | None = None,
    namespace: str | None = None,
    models_claim: str = DEFAULT_MODELS_CLAIM,
    metrics: Mapping[str, float] | None = None,
    image_pull_secrets: Sequence[str] = (),
    serving: ServingOptions | None = None,
) -> dict[str, Any]:
    """Deployment ``<model>-<version>`` running ``mlops serve`` on the mounted model.

    ``serving`` (the version's ``infer_cfg.yml`` ``serving:`` section) adds its
    ``--workers``/``--batch-*`` flags and sizes the default resources by workers.

    ``model_uri`` and ``weights_sha256`` (and ``metrics``, when given) are
    recorded as annotations (see the module docstring for who reads them).
    ``models_claim`` names the PVC that holds ``<model>/<version>/`` directories.
    ``image_pull_secrets`` name dockerconfigjson Secrets in the models' namespace
    (a private registry for the server image).
    """
    _check_model(model)
    _check_version(version)
    _check_port(port)
    if not isinstance(image, str) or not image.strip():
        raise ManifestError(f"image {image!r} must be a non-empty image reference")
    if not isinstance(model_uri, str) or not model_uri.strip():
        raise ManifestError(f"model_uri {model_uri!r} must be a non-empty URI")
    if not isinstance(weights_sha256, str) or not _SHA256_RE.match(weights_sha256):
        raise ManifestError(f"weights_sha256 {weights_sha256!r} must be 64 lower-case hex digits")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ManifestError(f"replicas {replicas!r} must be a non-negative integer")
    for secret in image_pull_secrets:
        if not isinstance(secret, str) or not _DNS1123_RE.match(secret):
            raise ManifestError(f"image pull secret {secret!r} must be a DNS-1123 name")

    labels = {"app": model, "version": version}
    meta = _metadata(deployment_name(model, version), dict(labels), namespace)
    meta["annotations"] = {
        ANNOTATION_MODEL_URI: model_uri,
        ANNOTATION_WEIGHTS_SHA256: weights_sha256,
    }
    if metrics is not None:
        meta["annotations"][ANNOTATION_METRICS] = _metrics_annotation(metrics)
    probe_action = {"port": "http", "scheme": "HTTP"}
    container = {
        "name": "server",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlops"],
        "args": [
            "serve",
            model_dir(model, version),
            "--port",
            str(port),
            "--host",
            "0.0.0.0",
            "--model-name",
            model,
            "--model-version",
            version,
            "--weights-sha256",
            weights_sha256,
            *(serving.args() if serving is not None else []),
            # A warm-up failure no retry fixes: why, to the kubelet, and exit (not live and
            # never ready until the progress deadline); the controller reads it off the pod.
            "--termination-log",
            TERMINATION_MESSAGE_PATH,
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        # Ready only after load + warm-up (a sample request answered); the start-up probe allows two
        # minutes for large weights before liveness takes over.
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", **probe_action},
            "periodSeconds": 2,
            "failureThreshold": 60,
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", **probe_action},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", **probe_action},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": _resources(resources, (serving.workers or 1) if serving else 1),
        "securityContext": container_security(uid=_RUN_AS),
        "volumeMounts": [
            {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    template_annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
        ANNOTATION_WEIGHTS_SHA256: weights_sha256,
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": pod_security(_RUN_AS),
        # The server drains in-flight requests on SIGTERM.
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": models_claim, "readOnly": True},
            },
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            # Never below the wanted capacity during a rollout of this version.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {"labels": dict(labels), "annotations": template_annotations},
                "spec": pod_spec,
            },
        },
    }


def service(model: str, port: int = 8080, namespace: str | None = None) -> dict[str, Any]:
    """Service ``<model>`` in front of every version's pods (port ``http``)."""
    _check_model(model)
    _check_port(port)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(model, {"app": model}, namespace),
        "spec": {
            "selector": {"app": model},
            "ports": [
                {
                    "name": "http",
                    "port": port,
                    "targetPort": "http",
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def _host(model: str, namespace: str | None) -> str:
    return model if namespace is None else f"{model}.{namespace}.svc.cluster.local"


def destination_rule(
    model: str,
    stable_version: str,
    canary_version: str | None = None,
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """DestinationRule ``<model>`` with subsets ``stable`` and, if given, ``canary``."""
    _check_model(model)
    _check_version(stable_version)
    subsets = [{"name": STABLE, "labels": {"version": stable_version}}]
    if canary_version is not None:
        _check_version(canary_version)
        if canary_version == stable_version:
            raise ManifestError(
                f"canary version {canary_version!r} is the stable version; "
                "a canary must be a different version"
            )
        subsets.append({"name": CANARY, "labels": {"version": canary_version}})
    return {
        "apiVersion": ISTIO_API,
        "kind": "DestinationRule",
        "metadata": _metadata(model, {"app": model}, namespace),
        "spec": {"host": _host(model, namespace), "subsets": subsets},
    }


def virtual_service(
    model: str,
    stable_weight: int,
    canary_weight: int,
    *,
    canary: bool = True,
    gateways: list[str] | None = None,
    hosts: list[str] | None = None,
    port: int = 8080,
    namespace: str | None = None,
) -> dict[str, Any]:
    """VirtualService ``<model>`` splitting traffic between subsets ``stable`` and ``canary``.

    ``canary=False`` routes to ``stable`` alone and requires weights 100/0.
    ``hosts`` default to the Service's host; ``gateways`` default to the mesh, and the
    mesh is kept in a list that names Gateways.
    """
    _check_model(model)
    _check_port(port)
    host = _host(model, namespace)

    def destination(subset: str) -> dict[str, Any]:
        return {"host": host, "subset": subset, "port": {"number": port}}

    try:
        route = build_route(destination, stable_weight, canary_weight, canary=canary)
    except TrafficError as exc:
        raise ManifestError(str(exc)) from None
    spec: dict[str, Any] = {"hosts": list(hosts) if hosts else [host]}
    if gateways:
        # `mesh` stays: without it the routes bind to the Gateways alone, and the mesh's
        # callers, its weights and the controller's pinned probe lose them (MESH_GATEWAY)
        spec["gateways"] = [*([] if MESH_GATEWAY in gateways else [MESH_GATEWAY]),
                            *gateways]
    # http[0] is the weighted route (contracts.traffic reads it); requests pinned to a
    # subset by the canary's answers probe take the routes after it.
    pinned = pinned_routes(destination, [STABLE, CANARY] if canary else [STABLE])
    spec["http"] = [{"name": "primary", "match": copy.deepcopy(UNPINNED), "route": route},
                    *pinned]
    return {
        "apiVersion": ISTIO_API,
        "kind": "VirtualService",
        "metadata": _metadata(model, {"app": model}, namespace),
        "spec": spec,
    }
