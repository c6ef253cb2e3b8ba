"""Validate any generated manifest against the official schemas, and pin golden YAML.

One entry point for every room's tests::

    from tests.manifest_validation import validate_manifest, validate_all, assert_golden
    validate_manifest(doc)          # raises AssertionError "<Kind> <name>: <path>: <message>"

Dispatch is by ``(apiVersion group, kind)``:

* built-in Kubernetes kinds (no group, or a ``*.k8s.io``/``apps``/``batch``/...
  group) go to ``kubernetes_validate`` 1.37 in strict mode (unknown fields fail);
* Istio VirtualService/DestinationRule, Argo CD Application, PaddleJob, Argo
  Events EventSource/Sensor use the derived files in ``workflows/schemas/``;
* Argo Workflows kinds use the verbatim upstream schema through a ``$ref`` to the
  one kind, with IntOrString widened (see ``workflows/schemas/README.md``).

Validators are built once per schema file and cached. ``assert_golden`` compares
text with a committed file; ``MLOPS_REGENERATE=1`` rewrites it on purpose.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from typing import Any, Iterable

import jsonschema
import kubernetes_validate

SCHEMAS = pathlib.Path(__file__).resolve().parents[1] / "workflows" / "schemas"
K8S_VERSION = "1.37.0"

# (group, kind) -> schema file for CRDs rooted at their kind.
_ROOTED = {
    ("networking.istio.io", "VirtualService"): "istio-virtualservice.schema.json",
    ("networking.istio.io", "DestinationRule"): "istio-destinationrule.schema.json",
    ("argoproj.io", "Application"): "argocd-application.schema.json",
    ("argoproj.io", "EventSource"): "argo-events-eventsource.schema.json",
    ("argoproj.io", "Sensor"): "argo-events-sensor.schema.json",
    ("batch.paddlepaddle.org", "PaddleJob"): "paddlejob.schema.json",
}
_ARGO_WORKFLOWS_KINDS = {
    "Workflow",
    "WorkflowTemplate",
    "CronWorkflow",
    "ClusterWorkflowTemplate",
    "WorkflowEventBinding",
}
# Groups served by the API server itself (kubernetes_validate knows them).
_BUILTIN_GROUPS = {
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "coordination.k8s.io",
    "scheduling.k8s.io",
    "discovery.k8s.io",
}


@functools.lru_cache(maxsize=None)
def _rooted_validator(filename: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / filename).read_text())
    return jsonschema.Draft202012Validator(schema)


@functools.lru_cache(maxsize=None)
def _argo_workflows_validator(kind: str) -> jsonschema.Draft202012Validator:
    full = json.loads((SCHEMAS / "argo-workflows.schema.json").read_text())
    defs = {
        **full["definitions"],
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": ["integer", "string"]},
    }
    schema = {
        "$schema": full["$schema"],
        "definitions": defs,
        "$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}",
    }
    return jsonschema.Draft202012Validator(schema)


def _label(doc: dict[str, Any]) -> str:
    name = (doc.get("metadata") or {}).get("name") or (doc.get("metadata") or {}).get(
        "generateName", "?"
    )
    return f"{doc.get('kind', '?')} {name}"


def _schema_errors(validator: jsonschema.Draft202012Validator, doc: dict[str, Any]) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [
            f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
            for err in errors[:10]
        ]
        raise AssertionError(f"{_label(doc)} is invalid:\n  " + "\n  ".join(lines))


def validate_manifest(doc: dict[str, Any]) -> None:
    """Validate one manifest; raise AssertionError naming the path and message."""
    if not isinstance(doc, dict):
        raise AssertionError(f"manifest must be a mapping, got {type(doc).__name__}")
    api_version = doc.get("apiVersion")
    kind = doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise AssertionError(f"manifest lacks apiVersion/kind: {sorted(doc)}")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    if (group, kind) in _ROOTED:
        _schema_errors(_rooted_validator(_ROOTED[(group, kind)]), doc)
        return
    if group == "argoproj.io" and kind in _ARGO_WORKFLOWS_KINDS:
        _schema_errors(_argo_workflows_validator(kind), doc)
        return
    if group in _BUILTIN_GROUPS or group.endswith(".k8s.io"):
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.absolute_path) or "<root>"
            raise AssertionError(f"{_label(doc)} is invalid: {path}: {exc.message}") from None
        return
    raise AssertionError(f"no schema for apiVersion {api_version!r} kind {kind!r}")


def validate_all(docs: Iterable[dict[str, Any]]) -> int:
    """Validate every document; return how many were checked."""
    count = 0
    for doc in docs:
        validate_manifest(doc)
        count += 1
    return count


def assert_golden(path: pathlib.Path, text: str) -> None:
    """Compare ``text`` with the golden file; MLOPS_REGENERATE=1 rewrites it."""
    path = pathlib.Path(path)
    if os.environ.get("MLOPS_REGENERATE") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(
            f"golden file {path} is missing; run with MLOPS_REGENERATE=1 to create it"
        )
    expected = path.read_text()
    if expected != text:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=str(path),
                tofile="rendered",
            )
        )
        raise AssertionError(
            f"rendered text differs from {path} (MLOPS_REGENERATE=1 to accept):\n{diff}"
        )
