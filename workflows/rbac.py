"""The least RBAC the pipeline and its trigger need, as plain manifests.

Six accounts, each with one job: the step pods' (no rights and no token:
the image build with unconfined seccomp, the push with the registry's
credentials, the training code and every tool step can reach no API), Argo's executor's
(argoexec reports results through `workflowtaskresults`), the PaddleJob
resource templates' executor's (argoexec runs kubectl with it: applies and
polls PaddleJobs, and reports results), the Sensor's (submits the push
Workflow, reads its template), the push submitter's (creates the commit's
pipeline Workflow) and the EventSource's (no rights and no token). The two
executor accounts are never a pod's own account, so they mount no token
themselves; Argo mounts their token Secrets into argoexec only.
`workflows.identity` checks every call of every pod against these Roles.
"""

from typing import Any

from workflows.settings import PipelineSettings


def _meta(name: str, settings: PipelineSettings) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": {"app.kubernetes.io/part-of": "mlops"},
    }


def _service_account(name: str, settings: PipelineSettings, *, token: bool
                     ) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": _meta(name, settings)}
    if not token:
        doc["automountServiceAccountToken"] = False
    return doc


def _token_secret(account: str, settings: PipelineSettings) -> dict[str, Any]:
    # Kubernetes >= 1.24 no longer creates token Secrets; Argo mounts an executor's
    # from `<account>.service-account-token` (util/secrets/secret_name.go
    # TokenNameForServiceAccount, v3.7.9).
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {**_meta(f"{account}.service-account-token", settings),
                     "annotations": {"kubernetes.io/service-account.name": account}},
        "type": "kubernetes.io/service-account-token",
    }


def _account(
    name: str, rules: list[dict[str, Any]], settings: PipelineSettings, *, token: bool = True
) -> list[dict[str, Any]]:
    return [
        _service_account(name, settings, token=token),
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
    PaddleJob templates' executor's, the Sensor's, the EventSource's."""
    # Argo >= 3.4's executor needs only this (docs/workflow-rbac.md, v3.7.9). Its token
    # reaches the argoexec containers through its Secret; step containers get none
    # (`automountServiceAccountToken: false`, docs/security.md).
    executor_rules = [
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
         "verbs": ["create", "patch"]},
    ]
    # Resource templates: `kubectl apply` gets, then creates or patches; the success and
    # failure conditions and the `job` output poll with GET (workflow/executor/resource.go).
    # The workflow owns the job, so garbage collection deletes it, not this account. As the
    # template's executor, argoexec also reports the outputs with this token.
    paddlejob_rules = [
        {"apiGroups": ["batch.paddlepaddle.org"], "resources": ["paddlejobs"],
         "verbs": ["create", "get", "patch"]},
        # setOwnerReference: Argo names the Workflow as owner with blockOwnerDeletion, which
        # the OwnerReferencesPermissionEnforcement admission plugin (OpenShift's default)
        # allows only to who may update the owner's finalizers (workflows.identity)
        {"apiGroups": ["argoproj.io"], "resources": ["workflows/finalizers"],
         "verbs": ["update"]},
        *executor_rules,
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
    # The push Workflow's submit step (workflows/steps/submit_pipeline.py API_CALLS): it
    # creates the commit's Workflow, nothing else; it reads the commit from its workspace.
    submitter_rules = [
        {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create"]},
    ]
    return [
        _service_account(settings.service_account, settings, token=False),  # no API rights
        *_account(settings.executor_service_account, executor_rules, settings, token=False),
        _token_secret(settings.executor_service_account, settings),
        *_account(settings.paddlejob_service_account, paddlejob_rules, settings, token=False),
        _token_secret(settings.paddlejob_service_account, settings),
        *_account(settings.sensor_service_account, sensor_rules, settings),
        *_account(settings.submitter_service_account, submitter_rules, settings),
        _service_account(settings.eventsource_service_account, settings, token=False),
    ]
