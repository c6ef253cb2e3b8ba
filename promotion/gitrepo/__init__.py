"""What promotion reads from and writes to the GitOps repo: decisions as commits, proposals."""

__all__ = [
    "lint",             # cross-file rules of a GitOps repo (`mlops gitops lint`)
    "platform_policy",  # the platform's policy a model repo may only tighten
    "policy_file",      # a model's canary policy as the GitOps repo holds it
    "production",       # the model in production, read back (what the gate compares with)
    "propose",          # propose a candidate: manifests on a branch, and a PR
    "rollback",         # roll back to an earlier stable version (its default wait)
    "steering",         # a person steers a rollout: canary actions, rollback_to
]
