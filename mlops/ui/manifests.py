"""`mlops ui manifests`: the UI as a Deployment + Service in a cluster.

Read-only unless `actions` is set; then every action needs the token from a Secret
(`token_secret`) or the person an auth proxy signed in (`proxy_user`: oauth2-proxy in
the same pod, the UI on 127.0.0.1 only). Credentials come from Secrets as environment
variables, never arguments: the GitOps token as `MLOPS_GIT_TOKEN` and, with
`argo_server`, `ARGO_TOKEN` of a ServiceAccount that may only read Workflows and their
logs. With actions, the pod's own token may only `get` Deployments in the models'
namespace: the rollback button's readiness check (make-before-break). Why: docs/cluster.md
(the web UI's section) and docs/security.md, boundary 6.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from cogs.pods import container_security, pod_security
from mlops.errors import UserError
from promotion.cluster.deploy import forge_token_env, git_token_env

NAME = "mlops-ui"
ARGO_READER = "mlops-ui-argo"
READINESS_READER = "mlops-ui"
ARGO_CA_DIR = "/etc/mlops/argo-ca"
PROXY_PORT = 4180
PROXY_HEADER = "X-Forwarded-User"
#: Where Kubernetes mounts a pod's ServiceAccount token in every container.
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
OAUTH2_PROXY_IMAGE = "quay.io/oauth2-proxy/oauth2-proxy:v7.15.3"



def _argo_reader(namespace: str, argo_namespace: str,
                 labels: dict[str, str]) -> list[dict[str, Any]]:
    """ServiceAccount, its token Secret (as argo's docs/access-token.md makes one) and a
    read-only Role on Workflows and their pods' logs where the Workflows run."""
    meta = {"name": ARGO_READER, "namespace": namespace, "labels": dict(labels)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": False},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {**meta, "name": f"{ARGO_READER}-token",
                      "annotations": {"kubernetes.io/service-account.name": ARGO_READER}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {**meta, "namespace": argo_namespace},
         # What argo-server's list and log calls do with the caller's token
         # (server/workflow/workflow_server.go, util/logs/workflow-logger.go).
         "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflows"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {**meta, "namespace": argo_namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": ARGO_READER},
         "subjects": [{"kind": "ServiceAccount", "name": ARGO_READER, "namespace": namespace}]},
    ]


def _readiness_reader(namespace: str, models_namespace: str,
                      labels: dict[str, str]) -> list[dict[str, Any]]:
    """The UI pod's ServiceAccount and a Role that may only read the serving Deployments
    and list their pods: what `KubernetesReadiness.check` asks before a rollback moves
    the traffic."""
    meta = {"name": READINESS_READER, "namespace": namespace, "labels": dict(labels)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {**meta, "namespace": models_namespace},
         # `promotion.cluster.readiness.CHECK_API_CALLS`
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {**meta, "namespace": models_namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": READINESS_READER},
         "subjects": [{"kind": "ServiceAccount", "name": READINESS_READER,
                       "namespace": namespace}]},
    ]


def _oauth2_proxy(port: int, image: str, env_secret: str) -> dict[str, Any]:
    """oauth2-proxy in front of the UI in the same pod (flags of oauth2-proxy v7.15)."""
    def probe() -> dict[str, Any]:
        return {"httpGet": {"path": "/ping", "port": "http"}, "periodSeconds": 10}

    return {
        "name": "oauth2-proxy", "image": image,
        "args": [f"--http-address=0.0.0.0:{PROXY_PORT}",
                 f"--upstream=http://127.0.0.1:{port}/",
                 "--pass-user-headers=true", "--skip-auth-strip-headers=true",
                 "--prefer-email-to-user=true",
                 # The UI, on loopback, answers only loopback Host names.
                 "--pass-host-header=false"],
        # Provider, client id and secret, cookie secret, email domains, redirect URL:
        # the Secret's OAUTH2_PROXY_* keys (oauth2-proxy reads each flag from its env).
        "envFrom": [{"secretRef": {"name": env_secret}}],
        "ports": [{"name": "http", "containerPort": PROXY_PORT}],
        "readinessProbe": probe(), "livenessProbe": probe(),
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}},
        "securityContext": container_security(),
    }


def ui_manifests(*, gitops_url: str, prometheus_url: str | None = None,
                 image: str = "registry.example.com/mlops/controller:0.1.0",
                 namespace: str = "mlops", port: int = 8765, actions: bool = False,
                 token_secret: str | None = None, proxy_user: bool = False,
                 proxy_image: str = OAUTH2_PROXY_IMAGE,
                 proxy_env_secret: str = "mlops-ui-oauth2-proxy",
                 git_secret: str | None = "mlops-gitops-token",
                 argo_server: str | None = None, argo_namespace: str = "mlops",
                 argo_secret: str | None = None, argo_ca_configmap: str | None = None,
                 argo_insecure: bool = False, forge: str | None = None,
                 forge_secret: str = "mlops-forge",
                 image_pull_secrets: Sequence[str] = (),
                 token_identity: str = "ui-token",
                 models_namespace: str = "models") -> list[dict[str, Any]]:
    """Deployment and Service, plus the Argo Server reader when there is no `argo_secret`
    and, with `actions`, the readiness reader in `models_namespace`."""

    if actions and not (token_secret or proxy_user):
        raise UserError("actions in a cluster need --token-secret or --proxy-user (who may "
                        "commit, and as whom)")
    if argo_ca_configmap and argo_insecure:
        raise UserError("--argo-ca-configmap and --argo-insecure: choose one")
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlops"}
    host = "127.0.0.1" if proxy_user else "0.0.0.0"
    # `--runtime kubernetes`: a policy that names no preset reads with istio's, as the
    # controller in the cluster reads it (the UI read `model`'s).
    args = ["ui", "--gitops", gitops_url, "--host", host, "--port", str(port),
            "--prometheus", prometheus_url or "", "--runtime", "kubernetes"]
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if git_secret:
        env.append(git_token_env(git_secret))
    if forge:
        try:
            env.append(forge_token_env(forge, forge_secret))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        args += ["--forge", forge]
    docs: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if argo_server:
        args += ["--argo-server", argo_server, "--argo-namespace", argo_namespace]
        if not argo_secret:
            docs += _argo_reader(namespace, argo_namespace, labels)
        env.append({"name": "ARGO_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": argo_secret or f"{ARGO_READER}-token", "key": "token"}}})
        if argo_ca_configmap:
            args += ["--argo-ca", f"{ARGO_CA_DIR}/ca.crt"]
            mounts.append({"name": "argo-ca", "mountPath": ARGO_CA_DIR, "readOnly": True})
            volumes.append({"name": "argo-ca", "configMap": {
                "name": argo_ca_configmap, "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
        elif argo_insecure:
            args.append("--argo-insecure")
    if not actions:
        args.append("--read-only")
    else:
        args += ["--readiness-namespace", models_namespace]
        if token_secret and not proxy_user:
            # A shared token names no person: its actions sign as this identity.
            args += ["--by", token_identity]
        if token_secret:
            env.append({"name": "MLOPS_UI_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": token_secret, "key": "token"}}})
    if proxy_user:
        args += ["--proxy-user", "--proxy-header", PROXY_HEADER]
    ui: dict[str, Any] = {
        "name": "ui", "image": image, "command": ["mlops"], "args": args, "env": env,
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    if proxy_user:
        # On loopback the kubelet cannot reach it over HTTP: ask from inside the pod.
        check = (f"import urllib.request as u; "
                 f"u.urlopen('http://127.0.0.1:{port}/api/info', timeout=5)")
        probe: dict[str, Any] = {"exec": {"command": ["python3", "-c", check]},
                                 "periodSeconds": 10, "timeoutSeconds": 5}
        containers = [ui, _oauth2_proxy(port, proxy_image, proxy_env_secret)]
    else:
        probe = {"httpGet": {"path": "/api/info", "port": "http"}, "periodSeconds": 10}
        ui["ports"] = [{"name": "http", "containerPort": port}]
        containers = [ui]
    ui["readinessProbe"], ui["livenessProbe"] = probe, copy.deepcopy(probe)
    pod: dict[str, Any] = {
        # Read-only, the UI calls no Kubernetes API (the Argo token above goes to
        # argo-server only); with actions, its token may only read the serving Deployments.
        "automountServiceAccountToken": bool(actions),
        "securityContext": pod_security(65532),
        "containers": containers,
        "volumes": volumes,
    }
    if actions:
        docs += _readiness_reader(namespace, models_namespace, labels)
        pod["serviceAccountName"] = READINESS_READER
        if containers[1:]:  # the auth proxy calls no API: an empty dir hides the token
            volumes.append({"name": "no-api-token", "emptyDir": {}})
        for container in containers[1:]:
            container.setdefault("volumeMounts", []).append(
                {"name": "no-api-token", "mountPath": TOKEN_PATH, "readOnly": True})
    if image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in image_pull_secrets]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {"type": "ClusterIP", "selector": dict(labels),
                 "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }
    return [*docs, deployment, service]
