"""A model's canary policy as the GitOps repo holds it, read one way by every reader.

`apps/<model>/canary-policy.yaml` (written by `propose`), completed with the repo's own
settings (an unset `metrics.namespace` is the models' namespace of `mlops-gitops.yaml`)
and bounded again by the platform's policy, so the controller and `mlops ui` query the
same series and what reached git is judged, not trusted. Pure: the callers read the
folder and the repo's settings. Why: docs/inside-promotion.md.
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
