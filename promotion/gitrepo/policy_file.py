"""A model's canary policy as the GitOps repo holds it, read one way by every reader.

`apps/<model>/canary-policy.yaml` (written by `propose`) completed with the repo's
own settings: a policy whose `metrics.namespace` is unset reads the models'
namespace from `mlops-gitops.yaml`, where Argo CD deploys them. The controller
decides with it and `mlops ui` queries Prometheus with it, so both read the same
series (issue 42, B2: the UI read `default` while the controller read `models`, and
the istio preset's `destination_workload_namespace` matched nothing on the page).
The platform's bounds (`mlops-gitops.yaml`'s `policy:`) are applied again to what the
file says: it came through a proposal, but what reached git is judged here, not
trusted (issue 41, finding 4: another namespace in it was queried as written).
Pure: the callers read the folder and the repo's settings.
"""

from __future__ import annotations

from typing import Mapping

from gitops import layout
from promotion.decision.policy import CanaryPolicy
from promotion.gitrepo.apply import POLICY_FILE
from promotion.gitrepo.platform_policy import load_platform_policy

__all__ = ["bounded_folder_policy", "folder_policy"]


def bounded_folder_policy(folder: layout.ModelState,
                          config: layout.RepoConfig) -> tuple[CanaryPolicy, list[str]]:
    """The model's policy within the platform's bounds, and the fields the file loosened
    (judged with the platform's values instead; PolicyError when it is broken)."""
    raw = folder.extra.get(POLICY_FILE)
    policy, loosened = load_platform_policy(config.policy).bounded(
        raw if isinstance(raw, Mapping) else {}, f"apps/{folder.model}/{POLICY_FILE}")
    if policy.metrics.namespace is None:  # the models live where the repo deploys them
        policy = policy.model_copy(update={
            "metrics": policy.metrics.model_copy(update={"namespace": config.namespace})})
    return policy, loosened


def folder_policy(folder: layout.ModelState, config: layout.RepoConfig) -> CanaryPolicy:
    """The model's policy as the controller reads it (PolicyError when it is broken)."""
    return bounded_folder_policy(folder, config)[0]
