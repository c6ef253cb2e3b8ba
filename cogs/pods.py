"""The restricted security context every pod the project renders runs under.

Kubernetes' Pod Security Standards, profile "restricted"
(kubernetes/website `content/en/docs/concepts/security/pod-security-standards.md`):
non-root, the RuntimeDefault seccomp profile, no privilege escalation, every
capability dropped. The step pods, the PaddleJob workers, the model server,
the controller and the UI take it from here, so widening it is one visible
edit (tests/workflows/test_pod_security.py lists the exceptions and why).
"""

from __future__ import annotations

from typing import Any


def pod_security(uid: int) -> dict[str, Any]:
    """The pod-level context: user, group and volume group `uid`, RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security(*, read_only_root: bool = True, uid: int | None = None) -> dict[str, Any]:
    """The container-level context: no escalation, no capabilities, a read-only root.

    `read_only_root=False` where the image's own code decides where it writes
    (a model repo's training image); `uid` repeats the pod's user on the
    container too (a container moved to another pod keeps it). A new dict each
    call: a shared one prints as a YAML anchor and alias.
    """
    context: dict[str, Any] = {}
    if uid is not None:
        context.update({"runAsNonRoot": True, "runAsUser": uid})
    context["allowPrivilegeEscalation"] = False
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    context["capabilities"] = {"drop": ["ALL"]}
    return context
