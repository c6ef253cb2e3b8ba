"""Forges: pull requests as approvals, one module per backend behind one Protocol.

Other rooms use the interface, the registry that picks a backend by name, and the
local forge (a branch in the bare repo plus a record) that the local runtime serves;
the hosted backends (``github``, ``gitlab``, ``gitea``) are reached through the registry.
"""

__all__ = [
    "base",      # the Forge protocol and PullRequest
    "local",     # the local forge, read by the local platform and the demo
    "registry",  # for_gitops(): a backend by name; unknown names list the choices
]
