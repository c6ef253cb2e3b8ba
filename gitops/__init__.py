"""The GitOps room: the desired state in git, written back safely, approved by PRs.

It drives the real ``git`` CLI (2.38 or newer) and imports neither ``workflows`` nor
``promotion``. The doors below are what other rooms may import; the rest is its own.
"""

__all__ = [
    "approval",   # approve(): merge a proposal's PR only if it deploys the evaluated weights;
                  # approve_as(): a person approves (`mlops pr approve`, the UI's button)
    "archive",    # extract a `git archive` tar safely (the local sync reads a commit so)
    "batch",      # commit_batch(): several decisions, one push (the controller's tick)
    "errors",     # GitOpsError and its kinds, each with an exit code
    "forges",     # pull requests as approvals: the Forge protocol, a backend by name
    "git",        # Git: the one runner of the git CLI (environment, credentials, redaction)
    "layout",     # where files live (apps/<model>/, argocd/); write_model, read_model
    "people",     # current_user(): who acts, and their git identity
    "proposal",   # propose(): branch + PR, once; the proposal's record
    "protect",    # protect a bare repo's main branch: no rewrite, no deletion
    "repo",       # init_repo() and Mirror: read any commit without a work tree
    "writeback",  # WriteBack: one decision, one commit; retry only a moved remote
    "yamlio",     # YAML in and out of the GitOps repo, one format for every file
]
