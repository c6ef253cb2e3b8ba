"""What the GitOps repo asks for: ``apps/<model>/`` parsed into plain data (pure).

Input is a tree exported from one commit, read with the GitOps room's own
reader (:func:`gitops.layout.read_model`, so both rooms agree on what the
layout means); output one :class:`ModelSpec` per model folder, or a
:class:`ModelProblem` naming the file when a human broke something.
:func:`spec_from_state` is the pure part and carries the checks only running
processes need (a local ``file://`` model URI, weights that add up). Errors are
per model: a broken ``apps/a/`` does not stop ``apps/b/`` from applying, and
the sync keeps the last good spec of ``a``.

What we read (the documents ``serving.manifests`` builds):

* each ``Deployment`` (label ``version``; annotation
  ``mlops.paddle.org/model-uri``, a ``file://`` URI of the model directory
  to serve locally; ``mlops.paddle.org/weights-sha256``);
* the ``DestinationRule`` subsets (name -> ``version`` label);
* the ``VirtualService``'s first HTTP route: subset -> weight.

Anything else (Service, promotion.yaml, kustomization.yaml) is not needed to
run processes and is ignored. A version with a Deployment but no route gets
weight 0 (it runs, takes no traffic); a route to a subset with no Deployment
behind it is an error, as it would be a 503 in the mesh.
"""

from __future__ import annotations

import dataclasses
import pathlib
import urllib.parse
from typing import Any, Mapping

from contracts.traffic import TrafficError, nested, read_routes
from gitops import layout
from gitops.errors import GitOpsError
from gitops.layout import ModelState
from local.platform import podspec
from serving.manifests import ANNOTATION_MODEL_URI, ANNOTATION_WEIGHTS_SHA256

APPS = "apps"


@dataclasses.dataclass(frozen=True)
class VersionSpec:
    """One live version: its model directory, digest, and the Deployment that runs it."""

    model_dir: str
    weights_sha256: str | None = None
    source: str = ""
    #: The Deployment document as committed (the sync starts its container, `podspec`).
    deployment: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    #: Digest of its pod template: a changed template restarts the server, as a rollout would.
    pod: str = ""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model folder: versions to run and the traffic split (percent)."""

    versions: Mapping[str, VersionSpec]
    weights: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class ModelProblem:
    """``apps/<model>/`` could not be read; ``file`` is the culprit."""

    model: str
    file: str
    message: str

    def __str__(self) -> str:
        return self.message


class _Broken(Exception):
    def __init__(self, file: str, message: str) -> None:
        super().__init__(message)
        self.file = file


def _model_dir(uri: Any, path: str) -> str:
    if not isinstance(uri, str) or not uri:
        raise _Broken(path, f"{path}: Deployment has no annotation {ANNOTATION_MODEL_URI}")
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        return urllib.parse.unquote(parsed.path)
    if parsed.scheme == "" and uri.startswith("/"):
        return uri
    raise _Broken(
        path,
        f"{path}: annotation {ANNOTATION_MODEL_URI}={uri!r} is not a file:// URI; "
        "the local platform serves model directories on this machine",
    )


def spec_from_state(state: ModelState) -> ModelSpec:
    """What to run for one parsed model folder (pure); raises ``_Broken`` naming the file."""
    model = state.model
    folder = f"{APPS}/{model}"
    versions: dict[str, VersionSpec] = {}
    for version, doc in sorted(state.deployments.items()):
        path = f"{folder}/deployment-{version}.yaml"
        annotations = nested(doc, "metadata", "annotations") or {}
        model_dir = _model_dir(annotations.get(ANNOTATION_MODEL_URI), path)
        try:  # would its container run here? (same translation as at start time)
            podspec.local_pod(doc, source=path, model_dir=model_dir, port=1, scratch="/")
        except podspec.PodSpecError as exc:
            raise _Broken(path, str(exc)) from None
        versions[version] = VersionSpec(
            model_dir=model_dir,
            weights_sha256=annotations.get(ANNOTATION_WEIGHTS_SHA256),
            source=path,
            deployment=doc,
            pod=podspec.pod_digest(doc),
        )
    weights: dict[str, int] = {v: 0 for v in versions}
    vs_path = f"{folder}/virtualservice.yaml"
    dr_path = f"{folder}/destinationrule.yaml"
    if state.virtual_service is None:
        if len(versions) == 1:  # no VirtualService yet: the one version takes all traffic
            weights = {v: 100 for v in versions}
        return ModelSpec(versions=versions, weights=weights)
    try:
        routes = read_routes(state.destination_rule, state.virtual_service,
                             dr_path=dr_path, vs_path=vs_path)
    except TrafficError as exc:
        raise _Broken(exc.path, str(exc)) from None
    total = 0
    for route in routes:
        if route.version not in versions:
            if route.weight == 0:
                continue  # a subset kept at 0 while its Deployment is gone: harmless
            raise _Broken(
                vs_path,
                f"{vs_path}: subset {route.subset!r} (version {route.version!r}) gets weight "
                f"{route.weight} but {folder}/ has no deployment-{route.version}.yaml",
            )
        weights[route.version] += route.weight
        total += route.weight
    if total != 100:
        raise _Broken(vs_path, f"{vs_path}: route weights sum to {total}, not 100")
    return ModelSpec(versions=versions, weights=weights)


def read_checkout(root: pathlib.Path) -> tuple[dict[str, ModelSpec], list[ModelProblem]]:
    """Every model of a checked-out (exported) GitOps tree, through the GitOps room's reader.

    Broken models come back as errors naming the file, not as specs.
    """
    specs: dict[str, ModelSpec] = {}
    errors: list[ModelProblem] = []
    for model in layout.list_models(root):
        try:
            spec = spec_from_state(layout.read_model(root, model))
        except _Broken as exc:
            errors.append(ModelProblem(model=model, file=exc.file, message=str(exc)))
            continue
        except GitOpsError as exc:
            file = getattr(exc, "path", None) or f"{APPS}/{model}/"
            errors.append(ModelProblem(model=model, file=file, message=str(exc)))
            continue
        if spec.versions:
            specs[model] = spec
    return specs, errors


def merge_last_good(
    previous: Mapping[str, ModelSpec],
    parsed: Mapping[str, ModelSpec],
    errors: list[ModelProblem],
) -> dict[str, ModelSpec]:
    """The state to apply: parsed models, plus the last good spec of broken ones."""
    out = dict(parsed)
    for error in errors:
        if error.model in previous and error.model not in out:
            out[error.model] = previous[error.model]
    return out
