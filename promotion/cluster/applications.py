"""The controller's Argo CD Applications, read from the GitOps repo it steers.

The controller's Role in the Argo CD namespace names the Applications it may
refresh (`resourceNames`, one per model: `promotion.cluster.deploy`). A list typed by
hand goes stale the day a model is added, and the new model's rollbacks then
wait for Argo CD's poll. So `mlops controller manifests --applications-from
REPO` renders the list from the repo itself: one Application per model
folder under `apps/` on the branch's tip (each folder's Application is named
after its model, `gitops.layout.application`). Re-rendering on every change
to `apps/` (docs/cluster.md, section 7) keeps the grant exactly as wide as the
fleet. `application_names` is pure; `applications_in` reads git.
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Iterable

from contracts.names import is_model_name
from gitops import layout
from gitops.errors import GitOpsError
from gitops.git import remote
from gitops.repo import Mirror

__all__ = ["application_names", "applications_in"]


def application_names(entries: Iterable[str]) -> list[str]:
    """Model folder names (entries of `apps/`) as Application names: valid ones, sorted, once."""
    return sorted({name for name in entries if is_model_name(name)})


def applications_in(repo: str, branch: str = "main") -> list[str]:
    """The Applications of every model on `branch` of the GitOps repo `repo` (path or URL)."""
    where = remote(repo).display
    with tempfile.TemporaryDirectory(prefix="mlops-apps-") as tmp:
        with Mirror(repo, path=pathlib.Path(tmp) / "mirror.git") as mirror:
            tip = mirror.sha(branch)
            if tip is None:
                raise GitOpsError(f"GitOps repo {where} has no branch {branch!r}")
            proc = mirror.git.run("ls-tree", "-d", "--name-only", f"{tip}:{layout.APPS}",
                                  check=False)
    return application_names(proc.stdout.split()) if proc.returncode == 0 else []
