"""The controller's own manifests: ServiceAccount, minimal RBAC, Deployment, metrics Service.

What the controller needs from the cluster is small, so its RBAC is too: it
reads the GitOps repo and Prometheus over HTTP, and talks to the API server
only to (1) read the serving Deployments, to give a merged canary traffic
only once it is deployed and ready (`get` on `deployments` in the models
namespace, `promotion.cluster.readiness`), and (2) ask Argo CD for a refresh after a
rollback (`get`/`patch` on the named `applications.argoproj.io` in the Argo
CD namespace: `resourceNames`, one per model, so the controller cannot touch
another team's Application; without names, no grant and no refresh -- a
rollback then waits for Argo CD's poll or a forge webhook to Argo CD). At
most two namespaced Roles bound to the controller's ServiceAccount -- no
ClusterRole, no access to Secrets or Pods.

One replica with the `Recreate` strategy: two controllers would not corrupt
anything (a decision is only written on top of the state it was computed
from), but they would race to make the same decision. Every durable fact
lives in git; the canary reports (Markdown, plots, timelines) are kept on a
PersistentVolumeClaim mounted at the work dir (`reports_claim`), so they
survive a restart; the git mirror beside them is a cache.

Secrets reach the process as environment variables from Secrets, never as
arguments: the git token as `MLOPS_GIT_TOKEN` (`gitops.git` hands it to git
through an inline credential helper), the forge token as the variable that
forge's client reads (`GITHUB_TOKEN`, `GITLAB_TOKEN`, `GITEA_TOKEN`), the
notification webhook URL as `MLOPS_WEBHOOK_URL`.
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
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlops"}
    args = ["controller", "run", "--gitops", gitops_url, "--prometheus", prometheus_url,
            "--workdir", "/work", "--metrics-port", str(METRICS_PORT), "--metrics-addr",
            "0.0.0.0", "--readiness", "kubernetes", "--readiness-namespace", models_namespace,
            "--git-poll", f"{git_poll:g}", "--workers", str(workers),
            # a window is read once Prometheus has scraped its end: Istio's addon scrapes
            # every 15 s, so two scrapes' worth (a settle of 0 judged the last 15 s unseen)
            "--settle", f"{CLUSTER_SETTLE:g}"]
    if applications:
        args += ["--argocd-namespace", argocd_namespace]
    if preset:
        args += ["--preset", preset]
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if forge:
        env.append(forge_token_env(forge, forge_secret))
        args += ["--forge", forge]
        if forge_repo:
            args += ["--forge-repo", forge_repo]
        if forge_url:
            args += ["--forge-api", forge_url]
    if git_secret:
        env.append(git_token_env(git_secret))
    if webhook_secret:  # read from the environment by `controller run`: never in argv
        env.append({"name": "MLOPS_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {
            "name": webhook_secret, "key": "url"}}})
    service_account = {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": NAME, "namespace": argocd_namespace, "labels": dict(labels)},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["applications"],
                   "resourceNames": list(dict.fromkeys(applications)),
                   "verbs": ["get", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": NAME, "namespace": argocd_namespace, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
    }
    readiness_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": f"{NAME}-readiness", "namespace": models_namespace,
                     "labels": dict(labels)},
        # Deployments: is the candidate ready; the Istio routing: is a step's split live.
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
                  {"apiGroups": ["networking.istio.io"],
                   "resources": ["destinationrules", "virtualservices"], "verbs": ["get"]}],
    }
    readiness_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{NAME}-readiness", "namespace": models_namespace,
                     "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": f"{NAME}-readiness"},
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
        "securityContext": container_security(uid=_RUN_AS),
        "volumeMounts": [{"name": "work", "mountPath": "/work"},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    work_volume: dict[str, Any] = (
        {"name": "work", "persistentVolumeClaim": {"claimName": reports_claim}} if reports_claim
        else {"name": "work", "emptyDir": {"sizeLimit": "2Gi"}})
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                # In the mesh: the answers probe reaches each version through the model's
                # VirtualService, which only a sidecar applies (contracts.traffic.SUBSET_HEADER).
                "metadata": {"labels": {**labels, MESH_LABEL: "true"}, "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                    "prometheus.io/path": "/metrics"}},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": pod_security(_RUN_AS),
                    "containers": [container],
                    "volumes": [work_volume, {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
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
    pod_spec = deployment["spec"]["template"]["spec"]  # type: ignore[index]
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in image_pull_secrets]
    docs: list[dict[str, Any]] = [service_account, *([role, binding] if applications else []),
            readiness_role, readiness_binding]
    if reports_claim:
        docs.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": reports_claim, "namespace": namespace, "labels": dict(labels)},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "2Gi"}}},
        })
    return [*docs, deployment, service]
