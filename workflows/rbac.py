"""The least RBAC the pipeline and its trigger need, as plain manifests.

Four accounts, each with one job: the step pods' (no rights and no token:
the image build with unconfined seccomp and registry credentials, the
training code and every tool step can reach no API), Argo's executor's
(reports results through `workflowtaskresults`), the PaddleJob resource
templates' (applies and polls PaddleJobs) and the Sensor's (submits
Workflows, reads the template).
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
    """ServiceAccounts, Roles and RoleBindings: the step pods', the executor's, the
    PaddleJob templates', the Sensor's."""
    # Argo >= 3.4's executor needs only this (docs/workflow-rbac.md, v3.7.9). Its token
    # reaches the init/wait containers through the Secret below; step containers get
    # none (`automountServiceAccountToken: false`, docs/security.md).
    executor_rules = [
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
         "verbs": ["create", "patch"]},
    ]
    # Resource templates: `apply` gets, then creates or patches; the success and failure
    # conditions poll with GET (workflow/executor/resource.go checkResourceState). The
    # workflow owns the job, so garbage collection deletes it, not this account.
    paddlejob_rules = [
        {"apiGroups": ["batch.paddlepaddle.org"], "resources": ["paddlejobs"],
         "verbs": ["create", "get", "patch"]},
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
    token = {
        # Kubernetes >= 1.24 no longer creates token Secrets; Argo mounts the executor's
        # from `<account>.service-account-token` (util/secrets TokenNameForServiceAccount).
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {**_meta(f"{settings.executor_service_account}.service-account-token",
                             settings),
                     "annotations": {"kubernetes.io/service-account.name":
                                     settings.executor_service_account}},
        "type": "kubernetes.io/service-account-token",
    }
    steps = {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": _meta(settings.service_account, settings),
             "automountServiceAccountToken": False}  # no API rights, no token
    return [
        steps,
        *_account(settings.executor_service_account, executor_rules, settings),
        token,
        *_account(settings.paddlejob_service_account, paddlejob_rules, settings),
        *_account(settings.sensor_service_account, sensor_rules, settings),
    ]
