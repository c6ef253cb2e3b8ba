"""Validate rendered manifests against the official schemas, offline.

The schemas ship in `workflows/schemas/` (provenance in the README there), so
`mlops workflows lint DIR` and `mlops gitops lint` work from an installed wheel: Argo
Workflows kinds (IntOrString widened), PaddleJobs inside resource templates (placeholders
replaced by sample values), Argo Events, Istio and Argo CD kinds, core kinds through
kubernetes-validate when installed (else reported as not checked), then the identities
(`workflows.identity`). Why: docs/inside-workflows.md.
"""

import functools
import json
import pathlib
import re
from collections.abc import Iterable
from typing import Any

import jsonschema
import yaml

SCHEMA_DIR = pathlib.Path(__file__).resolve().parent / "schemas"
SCHEMA_FILES = (
    "argo-workflows.schema.json",
    "paddlejob.schema.json",
    "argo-events-eventsource.schema.json",
    "argo-events-sensor.schema.json",
    "istio-virtualservice.schema.json",
    "istio-destinationrule.schema.json",
    "argocd-application.schema.json",
)
K8S_VERSION = "1.37.0"
_ARGO_KINDS = {"Workflow", "WorkflowTemplate", "CronWorkflow", "ClusterWorkflowTemplate"}
_ROOTED = {
    ("batch.paddlepaddle.org", "PaddleJob"): "paddlejob.schema.json",
    ("argoproj.io", "EventSource"): "argo-events-eventsource.schema.json",
    ("argoproj.io", "Sensor"): "argo-events-sensor.schema.json",
    ("networking.istio.io", "VirtualService"): "istio-virtualservice.schema.json",
    ("networking.istio.io", "DestinationRule"): "istio-destinationrule.schema.json",
    ("argoproj.io", "Application"): "argocd-application.schema.json",
}
_PLACEHOLDER = re.compile(r"\{\{\s*([^}]*?)\s*\}\}")


@functools.cache
def _validator(key: str) -> jsonschema.Draft202012Validator:
    if key in _ARGO_KINDS:
        full = json.loads((SCHEMA_DIR / "argo-workflows.schema.json").read_text())
        defs = {
            **full["definitions"],
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": ["integer", "string"]},
        }
        schema = {
            "$schema": full["$schema"],
            "definitions": defs,
            "$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{key}",
        }
    else:
        schema = json.loads((SCHEMA_DIR / key).read_text())
    return jsonschema.Draft202012Validator(schema)


def fill_placeholders(text: str) -> str:
    """Replace `{{a.b-c}}` by a DNS-safe sample value (`a-b-c`)."""
    return _PLACEHOLDER.sub(
        lambda mt: re.sub(r"[^a-z0-9]+", "-", mt.group(1).lower()).strip("-") or "x", text
    )


def _errors(validator: jsonschema.Draft202012Validator, doc: Any, where: str) -> list[str]:
    found = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [
        f"{where}: {'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in found
    ]


def validate_doc(doc: Any) -> list[str]:
    """Problems of one manifest (empty list = valid)."""
    if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
        return ["not a Kubernetes object (needs apiVersion and kind)"]
    kind = doc["kind"]
    group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
    name = (doc.get("metadata") or {}).get("name") or (doc.get("metadata") or {}).get(
        "generateName"
    )
    where = f"{kind} {name}"
    if group == "argoproj.io" and kind in _ARGO_KINDS:
        problems = _errors(_validator(kind), doc, where)
        for tmpl in (doc.get("spec") or {}).get("templates") or []:
            manifest = (tmpl.get("resource") or {}).get("manifest")
            if manifest:
                try:
                    embedded = yaml.safe_load(fill_placeholders(manifest))
                except yaml.YAMLError as exc:
                    problems.append(
                        f"{where}: template {tmpl.get('name')}: manifest is not YAML: {exc}"
                    )
                    continue
                problems += [
                    f"{where}: template {tmpl.get('name')}: {p}" for p in validate_doc(embedded)
                ]
        return problems
    if (group, kind) in _ROOTED:
        return _errors(_validator(_ROOTED[(group, kind)]), doc, where)
    if "." in group and not group.endswith(".k8s.io"):
        return [f"{where}: no schema for {doc['apiVersion']} {kind}"]
    try:  # lazy: optional (the train extra); without it core kinds go unchecked, said so
        import kubernetes_validate
    except ImportError:
        return [f"{where}: not checked (install kubernetes-validate to check core kinds)"]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [
            f"{where}: {'.'.join(str(p) for p in exc.absolute_path) or '(root)'}: {exc.message}"
        ]
    return []


def lint_paths(paths: Iterable[pathlib.Path]) -> tuple[int, list[str]]:
    """(documents checked, problems) over YAML files."""
    count, problems = 0, []
    for path in paths:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as exc:
            problems.append(f"{path}: not valid YAML: {exc}")
            continue
        for doc in docs:
            count += 1
            problems += [f"{path}: {p}" for p in validate_doc(doc)]
    return count, problems


def identity_problems(paths: Iterable[pathlib.Path]) -> list[str]:
    """Every pod's API calls against the Roles, over all the files (`workflows.identity`)."""
    from workflows.identity import identity_problems as problems

    docs = [d for path in paths for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict)]
    return [f"identity: {p}" for p in problems(docs)]


def yaml_files(target: pathlib.Path) -> list[pathlib.Path]:
    """The YAML files of a directory (recursively), or the file itself."""
    if target.is_file():
        return [target]
    return sorted(p for p in target.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
