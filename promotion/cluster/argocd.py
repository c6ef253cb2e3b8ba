"""Ask Argo CD to refresh an Application now, so a rollback does not wait for a poll.

Argo CD polls its repositories every three minutes by default; a rollback
commit must reach the cluster faster than that. Setting the annotation
`argocd.argoproj.io/refresh: hard` on the Application makes the application
controller re-read the repository and sync at once (and it removes the
annotation when done). We patch it with a JSON merge patch through the
official Kubernetes client, which needs only `get`/`patch` on the model's
own Application in the Argo CD namespace (`resourceNames`, see `promotion/cluster/deploy.py`).

Off by default: only a controller started with `--argocd-namespace` (in a
cluster) does this. A failed refresh is logged and reported, never raised:
the commit is already the decision, and Argo CD's next poll applies it anyway.
"""

from __future__ import annotations

import logging
from typing import Any

from contracts.kubeapi import ApiCall

__all__ = ["API_CALLS", "ArgoRefresher", "REFRESH_ANNOTATION"]

log = logging.getLogger("mlops.controller.argocd")

REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
#: Every Kubernetes API call this module makes (`workflows.identity` holds it against the
#: controller's Role; tests/promotion/test_promotion_api_calls.py records what `refresh` sends).
API_CALLS = (
    ApiCall("patch", "applications", "argoproj.io", name="{model}",
            namespace="{argocd_namespace}"),
)


class ArgoRefresher:
    """Patches `argocd.argoproj.io/refresh: hard` onto an Application."""

    def __init__(self, namespace: str = "argocd", *, api_client: Any = None,
                 host: str | None = None) -> None:
        # Here, not at the top: kubernetes is the controller extra's; API_CALLS are read
        # (workflows.identity) where it is not installed.
        from kubernetes import client, config

        self.namespace = namespace
        if api_client is None:
            if host is not None:
                configuration = client.Configuration()
                configuration.host = host
                api_client = client.ApiClient(configuration)
            else:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
                api_client = client.ApiClient()
        self.api = client.CustomObjectsApi(api_client)

    def refresh(self, application: str) -> bool:
        """Request a hard refresh of `application`; True when the API server accepted it."""
        body = {"metadata": {"annotations": {REFRESH_ANNOTATION: "hard"}}}
        try:
            self.api.patch_namespaced_custom_object(
                group="argoproj.io", version="v1alpha1", namespace=self.namespace,
                plural="applications", name=application, body=body,
            )
        except Exception as exc:  # the API server's answer, a timeout, TLS...
            if getattr(exc, "status", None) == 403:  # the Role names each Application it grants
                log.warning("argo cd refresh of %s/%s is not granted: add `--application %s` to "
                            "`mlops controller manifests` and apply them again",
                            self.namespace, application, application)
            else:
                log.warning("argo cd refresh of %s/%s failed: %s",
                            self.namespace, application, exc)
            return False
        return True
