"""The controller's own manifests: ServiceAccount, minimal RBAC, Deployment, metrics Service.

At most two namespaced Roles: `get` on the serving Deployments (is a candidate ready)
and `get`/`patch` on the named Argo CD Applications (a refresh after a rollback); no
ClusterRole, no Secrets, no Pods. One replica, `Recreate`; the canary reports on a
claim (`reports_claim`); secrets arrive as environment variables, never as arguments.
Why: docs/inside-promotion.md; how to apply them: docs/cluster.md.
"""

from __future__ import annotations

from typing import Any, Sequence

from cogs.pods import container_security, pod_security
from contracts.names import model_name_problem
from gitops.git import TOKEN_ENV

__all__ = ["controller_manifests", "forge_token_env", "git_token_env"]

NAME = "mlops-controller"
METRICS_PORT = 9100
_RUN_AS = 1000
#: The env var each forge client reads its token from (gitops/forges/*).
FORGE_TOKEN_ENV = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}
#: A remote forge is asked for news every 15 s, not every pass (rate limits,
#: load): a decision is due once per canary interval (30 s by default).
CLUSTER_GIT_POLL = 15.0
#: Models analysed at once in a pass (`controller run --workers`): a cluster runs a
#: fleet, whose passes are I/O (git, Prometheus), not CPU (benchmarks/fleet.py).
CLUSTER_WORKERS = 8
#: Seconds the controller waits after a window ends before reading it (`--settle`): two
#: scrapes of Prometheus at Istio's addon's 15 s, so the window's last samples are stored.
CLUSTER_SETTLE = 30.0


#: Istio's per-pod injection label: "true" injects the sidecar even where the namespace has
#: no `istio-injection` label (Istio's "Installing the Sidecar", injection policy).
MESH_LABEL = "sidecar.istio.io/inject"


def git_token_env(git_secret: str) -> dict[str, Any]:
    """The GitOps repo's token as `MLOPS_GIT_TOKEN` from key `token` of `git_secret`.

    The one way a pod of ours that reads or writes the GitOps repo gets its
    credentials (the controller here, the web UI in `mlops.ui.manifests`):
    `gitops.git` hands the variable to git through an inline credential helper,
    so the token is never in argv, a file or a log line.
    """
    return {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {
        "name": git_secret, "key": "token"}}}


def forge_token_env(forge: str, forge_secret: str) -> dict[str, Any]:
    """The forge's API token from key `token` of `forge_secret`, as its client reads it."""
    if forge not in FORGE_TOKEN_ENV:
        raise ValueError(f"forge {forge!r}: choose one of {', '.join(sorted(FORGE_TOKEN_ENV))}")
    return {"name": FORGE_TOKEN_ENV[forge], "valueFrom": {"secretKeyRef": {
        "name": forge_secret, "key": "token"}}}


LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlops"}
"""The labels of every object the controller's manifests make."""


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


def _controller_args(gitops_url: str, prometheus_url: str, models_namespace: str,
                     git_poll: float, workers: int, argocd_namespace: str | None,
                     preset: str | None, forge: str | None, forge_repo: str | None,
                     forge_url: str | None) -> list[str]:
    """The `mlops controller run` arguments: no secret ever goes here (see `_controller_env`)."""
    args = ["controller", "run", "--gitops", gitops_url, "--prometheus", prometheus_url,
            "--workdir", "/work", "--metrics-port", str(METRICS_PORT), "--metrics-addr",
            "0.0.0.0", "--readiness", "kubernetes", "--readiness-namespace", models_namespace,
            "--git-poll", f"{git_poll:g}", "--workers", str(workers),
            # a window is read once Prometheus has scraped its end: Istio's addon scrapes
            # every 15 s, so two scrapes' worth (a settle of 0 judged the last 15 s unseen)
            "--settle", f"{CLUSTER_SETTLE:g}"]
    if argocd_namespace is not None:  # only with Applications to refresh
        args += ["--argocd-namespace", argocd_namespace]
    if preset:
        args += ["--preset", preset]
    if forge:
        args += ["--forge", forge]
        if forge_repo:
            args += ["--forge-repo", forge_repo]
        if forge_url:
            args += ["--forge-api", forge_url]
    return args


def _controller_env(forge: str | None, forge_secret: str, git_secret: str | None,
                    webhook_secret: str | None) -> list[dict[str, Any]]:
    """The container's environment: the secrets, each from its Secret."""
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if forge:
        env.append(forge_token_env(forge, forge_secret))
    if git_secret:
        env.append(git_token_env(git_secret))
    if webhook_secret:  # read from the environment by `controller run`: never in argv
        env.append({"name": "MLOPS_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {
            "name": webhook_secret, "key": "url"}}})
    return env


def service_account(namespace: str) -> dict[str, Any]:
    """The controller's ServiceAccount, which its Roles are bound to."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(NAME, namespace)}


def _role_binding(name: str, role_namespace: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": _metadata(name, role_namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
    }


def argocd_rbac(namespace: str, argocd_namespace: str,
                applications: Sequence[str]) -> list[dict[str, Any]]:
    """Role + RoleBinding: `get`/`patch` on the named Argo CD Applications only; none
    without names (the controller then refreshes none)."""
    if not applications:
        return []
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": _metadata(NAME, argocd_namespace),
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["applications"],
                   "resourceNames": list(dict.fromkeys(applications)),
                   "verbs": ["get", "patch"]}],
    }
    return [role, _role_binding(NAME, argocd_namespace, namespace)]


def readiness_rbac(namespace: str, models_namespace: str) -> list[dict[str, Any]]:
    """Role + RoleBinding: `get` on the models' Deployments and Istio routing, `list` on
    their pods."""
    name = f"{NAME}-readiness"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": _metadata(name, models_namespace),
        # Deployments: is the candidate ready; its pods: did its server give up (exit 9);
        # the Istio routing: is a step's split live.
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                  {"apiGroups": ["networking.istio.io"],
                   "resources": ["destinationrules", "virtualservices"], "verbs": ["get"]}],
    }
    return [role, _role_binding(name, models_namespace, namespace)]


def reports_pvc(namespace: str, claim: str) -> dict[str, Any]:
    """The PersistentVolumeClaim that keeps the canary reports across restarts."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": _metadata(claim, namespace),
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "2Gi"}}},
    }


def _container(image: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
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
        "securityContext": container_security(uid=_RUN_AS),
        "volumeMounts": [{"name": "work", "mountPath": "/work"},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }


def deployment(namespace: str, container: dict[str, Any], reports_claim: str | None,
               image_pull_secrets: Sequence[str] = ()) -> dict[str, Any]:
    """One replica, `Recreate`, in the mesh; the work dir on the reports claim (or an
    emptyDir without one)."""
    work_volume: dict[str, Any] = (
        {"name": "work", "persistentVolumeClaim": {"claimName": reports_claim}} if reports_claim
        else {"name": "work", "emptyDir": {"sizeLimit": "2Gi"}})
    pod_spec: dict[str, Any] = {
        "serviceAccountName": NAME,
        "securityContext": pod_security(_RUN_AS),
        "containers": [container],
        "volumes": [work_volume, {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in image_pull_secrets]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _metadata(NAME, namespace),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                # In the mesh: the answers probe reaches each version through the model's
                # VirtualService, which only a sidecar applies (contracts.traffic.SUBSET_HEADER).
                "metadata": {"labels": {**LABELS, MESH_LABEL: "true"}, "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                    "prometheus.io/path": "/metrics"}},
                "spec": pod_spec,
            },
        },
    }


def metrics_service(namespace: str) -> dict[str, Any]:
    """The Service in front of the controller's `/metrics`."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(NAME, namespace),
        "spec": {"selector": {"app.kubernetes.io/name": NAME},
                 "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
                            "protocol": "TCP"}]},
    }


def controller_manifests(
    *,
    gitops_url: str,
    prometheus_url: str,
    image: str = "registry.example.com/mlops/controller:0.1.0",
    namespace: str = "mlops",
    argocd_namespace: str = "argocd",
    preset: str | None = None,
    git_secret: str | None = "mlops-gitops-token",
    webhook_secret: str | None = None,
    forge: str | None = None,
    forge_repo: str | None = None,
    forge_url: str | None = None,
    forge_secret: str = "mlops-forge",
    models_namespace: str = "models",
    reports_claim: str | None = "mlops-controller",
    image_pull_secrets: Sequence[str] = (),
    git_poll: float = CLUSTER_GIT_POLL,
    applications: Sequence[str] = (),
    workers: int = CLUSTER_WORKERS,
) -> list[dict[str, Any]]:
    """ServiceAccount, Roles + RoleBindings, the reports claim, Deployment and Service.

    `applications`: the Argo CD Applications (one per model, named after it)
    the controller may refresh after a decision; empty: it refreshes none.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    for application in applications:
        problem = model_name_problem(application)
        if problem:
            raise ValueError(f"application {application!r}: {problem}")
    args = _controller_args(gitops_url, prometheus_url, models_namespace, git_poll, workers,
                            argocd_namespace if applications else None, preset, forge,
                            forge_repo, forge_url)
    env = _controller_env(forge, forge_secret, git_secret, webhook_secret)
    return [
        service_account(namespace),
        *argocd_rbac(namespace, argocd_namespace, applications),
        *readiness_rbac(namespace, models_namespace),
        *([reports_pvc(namespace, reports_claim)] if reports_claim else []),
        deployment(namespace, _container(image, args, env), reports_claim, image_pull_secrets),
        metrics_service(namespace),
    ]
