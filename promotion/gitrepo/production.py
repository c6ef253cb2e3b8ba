"""The model in production, read back from the GitOps repo: what the gate compares with.

Production is the *stable* version of `apps/<model>/` on the repo's branch, read
through the same path as `propose` (`gitops.repo.Mirror`, `gitops.layout.read_model`),
with its metrics from the Deployment's `mlops.paddle.org/metrics` annotation. No
stable version is no production (None); a repo that cannot be read is an error.
`stable_version`, `current_state` and `production_record` are pure; `read_production`
does the I/O. Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import pathlib
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping

from contracts.artifact import RECORD_FILE, ArtifactError, read_record_data
from gitops import layout
from gitops.errors import GitOpsError
from gitops.git import remote
from gitops.repo import Mirror
from promotion.decision.state import CanaryState, load_state
from promotion.errors import ProductionError
from serving import manifests

__all__ = [
    "ProductionModel",
    "current_state",
    "production_metrics",
    "production_record",
    "read_production",
    "stable_version",
]


@dataclass(frozen=True)
class ProductionModel:
    """The stable version of a model and what it scored when it was evaluated."""

    model: str
    version: str
    metrics: dict[str, float] = field(default_factory=dict)
    source: str = ""
    """Where the metrics came from: the annotation, a model.yaml path, or "" (unknown)."""
    model_dir: pathlib.Path | None = None
    """Its export, when the model-uri is a ``file://`` path (the models volume, mounted
    read-only where the evaluate step runs it on the candidate's images)."""


def current_state(current: layout.ModelState | None) -> CanaryState | None:
    """The `promotion.yaml` of a model folder read from main (None when absent)."""
    if current is None or layout.PROMOTION not in current.extra:
        return None
    raw = current.extra[layout.PROMOTION]
    return load_state(raw if isinstance(raw, (str, Mapping)) else {},
                      f"apps/{current.model}/promotion.yaml")


def stable_version(current: layout.ModelState, state: CanaryState | None = None) -> str | None:
    """The stable version: promotion.yaml, else the DestinationRule, else the only Deployment."""
    if state is None:
        state = current_state(current)
    if state is not None and state.stable:
        return state.stable
    if current.destination_rule is not None:
        for subset in current.destination_rule.get("spec", {}).get("subsets", []) or []:
            if subset.get("name") == "stable":
                version = (subset.get("labels") or {}).get("version")
                return version if isinstance(version, str) else None
    if len(current.deployments) == 1:
        return next(iter(current.deployments))
    return None


def _local_dir(deployment: Mapping[str, Any]) -> pathlib.Path | None:
    """The directory a ``file://`` model-uri names (None for any other URI)."""
    meta = deployment.get("metadata") or {}
    uri = (meta.get("annotations") or {}).get(manifests.ANNOTATION_MODEL_URI, "")
    if not isinstance(uri, str) or not uri.startswith("file://"):
        return None
    return pathlib.Path(uri[len("file://"):])


def _local_record(deployment: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The model.yaml behind a ``file://`` model-uri, with its path (None if unreadable)."""
    model_dir = _local_dir(deployment)
    if model_dir is None:
        return None
    try:
        data = read_record_data(model_dir)
    except (OSError, ArtifactError):
        return None
    return data, str(model_dir / RECORD_FILE)


def production_model_dir(
    current: layout.ModelState | None, stable: str | None
) -> pathlib.Path | None:
    """The stable version's model directory behind a ``file://`` model-uri (None: another
    scheme, or no live stable version): where its dataset lock is kept, for the data diff."""
    if current is None or stable is None or stable not in current.deployments:
        return None
    meta = current.deployments[stable].get("metadata") or {}
    uri = (meta.get("annotations") or {}).get(manifests.ANNOTATION_MODEL_URI, "")
    if not isinstance(uri, str) or not uri.startswith("file://"):
        return None
    return pathlib.Path(uri[len("file://"):])


def _annotated(current: layout.ModelState, version: str) -> dict[str, float] | None:
    try:
        return manifests.deployment_metrics(current.deployments[version])
    except manifests.ManifestError as exc:
        raise ProductionError(
            f"apps/{current.model}/deployment-{version}.yaml: {exc}; fix or remove the annotation"
        ) from None


def production_record(
    current: layout.ModelState | None, stable: str | None
) -> dict[str, Any] | None:
    """The stable version's record for the PR report (None without a live stable version).

    The lineage comes from its local ``model.yaml`` when the model-uri points at
    one; the metrics from the Deployment's annotation when it has one (it is
    what was evaluated, and it is there in a cluster too).
    """
    if current is None or stable is None or stable not in current.deployments:
        return None
    local = _local_record(current.deployments[stable])
    record: dict[str, Any] = dict(local[0]) if local else {"version": stable}
    annotated = _annotated(current, stable)
    if annotated is not None:
        record["metrics"] = annotated
    return record


def _metrics_of(current: layout.ModelState, version: str) -> tuple[dict[str, float], str]:
    annotated = _annotated(current, version)
    if annotated is not None:
        return annotated, f"annotation {manifests.ANNOTATION_METRICS}"
    local = _local_record(current.deployments[version])
    if local is not None and isinstance(local[0].get("metrics"), dict):
        metrics = {k: v for k, v in local[0]["metrics"].items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return metrics, local[1]
    return {}, ""


def production_of(current: layout.ModelState | None) -> ProductionModel | None:
    """The production model of a parsed folder (None: nothing is in production)."""
    if current is None:
        return None
    stable = stable_version(current)
    if stable is None or stable not in current.deployments:
        return None  # a stable version nothing serves is not in production
    metrics, source = _metrics_of(current, stable)
    return ProductionModel(model=current.model, version=stable, metrics=metrics, source=source,
                           model_dir=_local_dir(current.deployments[stable]))


def read_production(repo: str, model: str, branch: str = "main") -> ProductionModel | None:
    """The production model of ``model`` on ``branch`` of the GitOps ``repo`` (path or URL)."""
    where = f"cannot read the production model from GitOps repo {remote(repo).display}"
    try:
        with tempfile.TemporaryDirectory(prefix="mlops-production-") as tmp:
            with Mirror(repo, path=pathlib.Path(tmp) / "mirror.git") as mirror:
                tip = mirror.sha(branch)
                if tip is None:
                    raise ProductionError(
                        f"{where}: branch {branch!r} not found; is it a GitOps repo? "
                        "(create one with `mlops gitops init`)"
                    )
                if not mirror.ls(tip, f"{layout.APPS}/{model}"):
                    return None
                root = pathlib.Path(tmp) / "tree"
                mirror.export(tip, root)
            current = layout.read_model(root, model)
    except GitOpsError as exc:
        raise ProductionError(f"{where} (branch {branch!r}): {exc}") from None
    return production_of(current)


def production_metrics(repo: str, model: str, branch: str = "main") -> dict[str, float] | None:
    """The production model's metrics, or None when there is none (or none recorded)."""
    found = read_production(repo, model, branch)
    return found.metrics if found is not None and found.metrics else None
