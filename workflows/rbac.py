"""The least RBAC the pipeline and its trigger need, as plain manifests.

The workflow's service account runs the pods (Argo's emissary executor
reports results through `workflowtaskresults`) and, through resource
templates, applies and watches PaddleJobs; it needs nothing else. The
Sensor's service account may only submit Workflows and read the template.
"""

from typing import Any

from workflows.settings import PipelineSettings


def _meta(name: str, settings: PipelineSettings) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": {"app.kubernetes.io/part-of": "mlops"},
    }


def _account(
    name: str, rules: list[dict[str, Any]], settings: PipelineSettings
) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, settings)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, settings),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(name, settings),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": settings.namespace}],
        },
    ]


def build_rbac(settings: PipelineSettings) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding for the workflow and for the Sensor."""
    workflow_rules = [
        # Argo's executor: results of each step, and its own pod.
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "watch"]},
        # Resource templates: `apply` reads then creates/patches; the success
        # and failure conditions watch; cleanup deletes.
        {
            "apiGroups": ["batch.paddlepaddle.org"],
            "resources": ["paddlejobs"],
            "verbs": ["create", "get", "list", "watch", "patch", "delete"],
        },
    ]
    sensor_rules = [
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflows"],
            "verbs": ["create", "get", "list", "watch"],
        },
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtemplates"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return _account(settings.service_account, workflow_rules, settings) + _account(
        settings.sensor_service_account, sensor_rules, settings
    )
