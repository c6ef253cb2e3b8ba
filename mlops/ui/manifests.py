"""`mlops ui manifests`: the UI as a Deployment + Service in a cluster.

Read-only unless `actions` is set; then every action needs the token from a
Secret (`--token-secret`) or the person the auth proxy in front signed in
(`--proxy-user`), and the pod gets the GitOps push token the controller uses.
It binds 0.0.0.0 inside the pod (the Service is ClusterIP: reach it through
`kubectl port-forward` or the auth proxy's Ingress).
"""

from __future__ import annotations

from typing import Any

NAME = "mlops-ui"


def ui_manifests(*, gitops_url: str, prometheus_url: str | None = None,
                 image: str = "registry.example.com/mlops/controller:0.1.0",
                 namespace: str = "mlops", port: int = 8765, actions: bool = False,
                 token_secret: str | None = None, proxy_user: bool = False,
                 git_secret: str | None = "mlops-gitops-token",
                 argo_server: str | None = None, argo_namespace: str = "argo",
                 argo_secret: str | None = None, forge: str | None = None,
                 forge_secret: str = "mlops-forge") -> list[dict[str, Any]]:
    """Deployment and Service (no RBAC: the UI talks to git, the forge and Prometheus)."""
    if actions and not (token_secret or proxy_user):
        from mlops.errors import UserError

        raise UserError("actions in a cluster need --token-secret or --proxy-user (who may "
                        "commit, and as whom)")
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlops"}
    args = ["ui", "--gitops", gitops_url, "--host", "0.0.0.0", "--port", str(port),
            "--prometheus", prometheus_url or ""]
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    if forge:
        tokens = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}
        if forge not in tokens:
            from mlops.errors import UserError

            raise UserError(f"forge {forge!r}: choose one of {', '.join(sorted(tokens))}")
        args += ["--forge", forge]
        env.append({"name": tokens[forge], "valueFrom": {"secretKeyRef": {
            "name": forge_secret, "key": "token"}}})
    if argo_server:
        args += ["--argo-server", argo_server, "--argo-namespace", argo_namespace]
        if argo_secret:
            env.append({"name": "ARGO_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": argo_secret, "key": "token"}}})
    if not actions:
        args.append("--read-only")
    else:
        if proxy_user:
            args.append("--proxy-user")
        if token_secret:
            env.append({"name": "MLOPS_UI_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": token_secret, "key": "token"}}})
        if git_secret:
            env.append({"name": "MLOPS_GIT_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": git_secret, "key": "token"}}})
    probe = {"httpGet": {"path": "/api/info", "port": "http"}, "periodSeconds": 10}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "ui", "image": image, "command": ["mlops"], "args": args,
                        "env": env,
                        "ports": [{"name": "http", "containerPort": port}],
                        "readinessProbe": probe, "livenessProbe": probe,
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                      "limits": {"memory": "512Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {"type": "ClusterIP", "selector": dict(labels),
                 "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }
    return [deployment, service]
