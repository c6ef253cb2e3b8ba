"""The controller's own manifests: ServiceAccount, minimal RBAC, Deployment, metrics Service.

What the controller needs from the cluster is small, so its RBAC is too: it
reads the GitOps repo and Prometheus over HTTP (no Kubernetes API for that),
and it talks to the API server only to ask Argo CD for a refresh after a
rollback, i.e. `get`/`patch` on `applications.argoproj.io` in the Argo CD
namespace. That is a namespaced Role in the Argo CD namespace bound to the
controller's ServiceAccount -- no ClusterRole, no access to Secrets or Pods.

One replica with the `Recreate` strategy: two controllers would not corrupt
anything (a decision is only written on top of the state it was computed
from), but they would race to make the same decision. The work dir is an
`emptyDir`: every durable fact lives in git.

The git token (to push decision commits) comes from a Secret as
`MLOPS_GIT_TOKEN`, which `gitops.git` hands to git through an inline credential
helper, so it never lands in a URL, an argument or a log line.
"""

from __future__ import annotations

from typing import Any

__all__ = ["controller_manifests"]

NAME = "mlops-controller"
METRICS_PORT = 9100
_RUN_AS = 1000


def controller_manifests(
    *,
    gitops_url: str,
    prometheus_url: str,
    image: str = "registry.example.com/mlops/paddle-serve:0.1.0",
    namespace: str = "mlops",
    argocd_namespace: str = "argocd",
    preset: str | None = None,
    git_secret: str | None = "mlops-gitops-token",
    webhook_secret: str | None = None,
    forge: str | None = None,
    forge_repo: str | None = None,
) -> list[dict[str, Any]]:
    """ServiceAccount, Role + RoleBinding (Argo CD namespace), Deployment and Service."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlops"}
    args = ["controller", "run", "--gitops", gitops_url, "--prometheus", prometheus_url,
            "--workdir", "/work", "--metrics-port", str(METRICS_PORT), "--metrics-addr",
            "0.0.0.0", "--argocd-namespace", argocd_namespace]
    if preset:
        args += ["--preset", preset]
    if forge:
        args += ["--forge", forge]
        if forge_repo:
            args += ["--forge-repo", forge_repo]
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if git_secret:
        env.append({"name": "MLOPS_GIT_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": git_secret, "key": "token"}}})
    if webhook_secret:
        env.append({"name": "MLOPS_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {
            "name": webhook_secret, "key": "url"}}})
        args += ["--webhook", "$(MLOPS_WEBHOOK_URL)"]
    service_account = {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": NAME, "namespace": argocd_namespace, "labels": dict(labels)},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["applications"],
                   "verbs": ["get", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": NAME, "namespace": argocd_namespace, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
    }
    container = {
        "name": "controller",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlops"],
        "args": args,
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"},
                          "periodSeconds": 20, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": _RUN_AS,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "work", "mountPath": "/work"},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": dict(labels), "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                    "prometheus.io/path": "/metrics"}},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": _RUN_AS,
                                        "runAsGroup": _RUN_AS, "fsGroup": _RUN_AS,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "2Gi"}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
                            "protocol": "TCP"}]},
    }
    return [service_account, role, binding, deployment, service]
