"""What the GitOps repo asks for: ``apps/<model>/`` parsed into plain data (pure).

Input is the repo's files as ``{path: text}`` (the sync reads them from one
commit), output one :class:`ModelSpec` per model folder, or a
:class:`ModelError` naming the file when a human broke something. Errors are
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
import posixpath
import urllib.parse
from typing import Any, Mapping

from serving.manifests import ANNOTATION_MODEL_URI, ANNOTATION_WEIGHTS_SHA256

APPS = "apps"


@dataclasses.dataclass(frozen=True)
class VersionSpec:
    """One live version: where its model directory is and its digest."""

    model_dir: str
    weights_sha256: str | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model folder: versions to run and the traffic split (percent)."""

    versions: Mapping[str, VersionSpec]
    weights: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class ModelError:
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


def _load_all(path: str, text: str) -> list[Any]:
    try:
        from gitops.yamlio import parse  # the GitOps room's loader names file+line
    except ImportError:  # pragma: no cover - only before the gitops room lands
        parse = None
    try:
        if parse is not None:
            docs = parse(text, path)
        else:
            import yaml

            docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except Exception as exc:  # noqa: BLE001 - any parse failure names the file
        message = str(exc)
        if path not in message:
            message = f"{path}: not valid YAML: {message}"
        raise _Broken(path, message) from None
    for doc in docs:
        if not isinstance(doc, dict):
            raise _Broken(path, f"{path}: expected a mapping document, got {type(doc).__name__}")
    return docs


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _model_dir(uri: Any, path: str) -> str:
    if not isinstance(uri, str) or not uri:
        raise _Broken(path, f"{path}: Deployment has no annotation {ANNOTATION_MODEL_URI}")
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        local = urllib.parse.unquote(parsed.path)
    elif parsed.scheme == "" and uri.startswith("/"):
        local = uri
    else:
        raise _Broken(
            path,
            f"{path}: annotation {ANNOTATION_MODEL_URI}={uri!r} is not a file:// URI; "
            "the local platform serves model directories on this machine",
        )
    return local


def parse_model(model: str, files: Mapping[str, str]) -> ModelSpec:
    """Parse one model folder's files (``{repo path: text}``); raises ``_Broken``."""
    versions: dict[str, VersionSpec] = {}
    subsets: dict[str, str] = {}
    routes: list[tuple[str, Any, str]] = []  # (subset, weight, file)
    n_routes_docs = 0
    for path in sorted(files):
        for doc in _load_all(path, files[path]):
            kind = doc.get("kind")
            if kind == "Deployment":
                version = _get(doc, "metadata", "labels", "version")
                if not isinstance(version, str) or not version:
                    raise _Broken(path, f"{path}: Deployment has no metadata.labels.version")
                if version in versions:
                    raise _Broken(
                        path,
                        f"{path}: version {version!r} has a second Deployment "
                        f"(first in {versions[version].source})",
                    )
                annotations = _get(doc, "metadata", "annotations") or {}
                versions[version] = VersionSpec(
                    model_dir=_model_dir(annotations.get(ANNOTATION_MODEL_URI), path),
                    weights_sha256=annotations.get(ANNOTATION_WEIGHTS_SHA256),
                    source=path,
                )
            elif kind == "DestinationRule":
                for subset in _get(doc, "spec", "subsets") or []:
                    name = _get(subset, "name")
                    version = _get(subset, "labels", "version")
                    if not isinstance(name, str) or not isinstance(version, str):
                        raise _Broken(
                            path, f"{path}: every subset needs a name and labels.version"
                        )
                    subsets[name] = version
            elif kind == "VirtualService":
                n_routes_docs += 1
                http = _get(doc, "spec", "http")
                if not isinstance(http, list) or not http or not isinstance(http[0], dict):
                    raise _Broken(path, f"{path}: VirtualService has no spec.http[0]")
                route = http[0].get("route")
                if not isinstance(route, list) or not route:
                    raise _Broken(path, f"{path}: spec.http[0].route is empty")
                for entry in route:
                    subset = _get(entry, "destination", "subset")
                    weight = _get(entry, "weight")
                    if weight is None and len(route) == 1:
                        weight = 100
                    routes.append((subset, weight, path))
    if n_routes_docs > 1:
        raise _Broken(routes[-1][2], f"apps/{model}/: more than one VirtualService")
    weights: dict[str, int] = {v: 0 for v in versions}
    if routes:
        total = 0
        for subset, weight, path in routes:
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                raise _Broken(path, f"{path}: route weight {weight!r} must be an integer 0-100")
            if subset not in subsets:
                raise _Broken(
                    path,
                    f"{path}: route to subset {subset!r}, which the DestinationRule "
                    f"does not define (subsets: {sorted(subsets)})",
                )
            version = subsets[subset]
            if version not in versions:
                raise _Broken(
                    path,
                    f"{path}: subset {subset!r} selects version {version!r}, "
                    f"which has no Deployment in apps/{model}/",
                )
            weights[version] += weight
            total += weight
        if total != 100:
            raise _Broken(routes[0][2], f"{routes[0][2]}: route weights sum to {total}, not 100")
    elif len(versions) == 1:
        # No VirtualService yet: the single version takes all traffic.
        weights = {v: 100 for v in versions}
    return ModelSpec(versions=versions, weights=weights)


def group_by_model(files: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``apps/<model>/*.yaml|yml`` grouped by model (other files ignored)."""
    out: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != APPS:
            continue
        if posixpath.splitext(parts[2])[1] not in (".yaml", ".yml"):
            continue
        out.setdefault(parts[1], {})[path] = text
    return out


def parse_tree(
    files: Mapping[str, str],
) -> tuple[dict[str, ModelSpec], list[ModelError]]:
    """Every model in the tree; broken models come back as errors, not specs."""
    specs: dict[str, ModelSpec] = {}
    errors: list[ModelError] = []
    for model, model_files in sorted(group_by_model(files).items()):
        try:
            spec = parse_model(model, model_files)
        except _Broken as exc:
            errors.append(ModelError(model=model, file=exc.file, message=str(exc)))
            continue
        if spec.versions:
            specs[model] = spec
    return specs, errors


def merge_last_good(
    previous: Mapping[str, ModelSpec],
    parsed: Mapping[str, ModelSpec],
    errors: list[ModelError],
) -> dict[str, ModelSpec]:
    """The state to apply: parsed models, plus the last good spec of broken ones."""
    out = dict(parsed)
    for error in errors:
        if error.model in previous and error.model not in out:
            out[error.model] = previous[error.model]
    return out
