"""The controller's own Kubernetes manifests and the cluster clients it calls."""

__all__ = [
    "applications",  # the controller's Argo CD Applications, read from the GitOps repo
    "argocd",        # ArgoRefresher: ask Argo CD to refresh an Application now
    "deploy",        # the controller's manifests and the token env names they carry
    "readiness",     # Readiness: is a version deployed and ready (the local one too)
]
