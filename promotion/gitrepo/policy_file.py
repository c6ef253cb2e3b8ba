"""A model's canary policy as the GitOps repo holds it, read one way by every reader.

`apps/<model>/canary-policy.yaml` (written by `propose`) completed with the repo's
own settings: a policy whose `metrics.namespace` is unset reads the models'
namespace from `mlops-gitops.yaml`, where Argo CD deploys them. The controller
decides with it and `mlops ui` queries Prometheus with it, so both read the same
series (issue 42, B2: the UI read `default` while the controller read `models`, and
the istio preset's `destination_workload_namespace` matched nothing on the page).
Pure: the callers read the folder and the repo's settings.
"""

from __future__ import annotations

from typing import Mapping

from gitops import layout
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.gitrepo.apply import POLICY_FILE

__all__ = ["folder_policy"]


def folder_policy(folder: layout.ModelState, config: layout.RepoConfig) -> CanaryPolicy:
    """The model's policy as the controller reads it (PolicyError when it is broken)."""
    raw = folder.extra.get(POLICY_FILE)
    policy = load_policy(raw if isinstance(raw, Mapping) else {},
                         f"apps/{folder.model}/{POLICY_FILE}")
    if policy.metrics.namespace is None:  # the models live where the repo deploys them
        policy = policy.model_copy(update={
            "metrics": policy.metrics.model_copy(update={"namespace": config.namespace})})
    return policy
