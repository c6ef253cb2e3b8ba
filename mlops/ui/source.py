"""The GitOps repo as the UI reads it: one cached mirror, parsed by `gitops.layout`.

A snapshot is the tip of the branch exported and read with `layout.read_repo`
(the parser the sync and the controller use) and `layout.load_config` (the repo's
settings: the models' namespace the controller's queries use), cached by the tip's
sha so a page polling every second costs one `git fetch`. The decision timeline is
`Mirror.log` of the model's folder: each commit's `Mlops-*` trailers, as the
controller writes them (`promotion.gitrepo.apply.message`).
"""

from __future__ import annotations

import json
import pathlib
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import yaml

from contracts.errors import MlopsError
from contracts.traffic import weights_by_version
from gitops import layout
from gitops.repo import CommitInfo, Mirror


@dataclass(frozen=True)
class Snapshot:
    """The branch's tip and every model folder on it."""

    tip: str | None
    models: dict[str, layout.ModelState]
    config: layout.RepoConfig | None = None
    """`mlops-gitops.yaml` (None: missing or broken; the controller reports it)."""


class GitopsSource:
    """Read-only access to one GitOps repo branch, safe to share between requests."""

    def __init__(self, repo: str, branch: str = "main", cache: pathlib.Path | None = None) -> None:
        self.repo = repo
        self.branch = branch
        self._tmp = tempfile.TemporaryDirectory(prefix="mlops-ui-") if cache is None else None
        self._cache = cache or pathlib.Path(self._tmp.name if self._tmp else ".")
        self._lock = threading.Lock()
        self._mirror: Mirror | None = None
        self._snapshot: Snapshot | None = None
        self._weights: dict[tuple[str, str], dict[str, int]] = {}

    def _open(self) -> Mirror:
        if self._mirror is None:
            self._mirror = Mirror(self.repo, path=self._cache / "mirror.git")
        return self._mirror

    def close(self) -> None:
        with self._lock:
            if self._mirror is not None:
                self._mirror.close()
                self._mirror = None
            if self._tmp is not None:
                self._tmp.cleanup()

    def snapshot(self, fetch: bool = True) -> Snapshot:
        """The branch's models now (fetches first unless told not to)."""
        with self._lock:
            mirror = self._open()
            if fetch:
                mirror.fetch()
            tip = mirror.sha(self.branch)
            if self._snapshot is not None and self._snapshot.tip == tip:
                return self._snapshot
            models: dict[str, layout.ModelState] = {}
            config = None
            if tip is not None:
                with tempfile.TemporaryDirectory(prefix="tree-", dir=self._cache) as tmp:
                    root = pathlib.Path(tmp)
                    mirror.export(tip, root)
                    if (root / layout.APPS).is_dir():
                        models = layout.read_repo(root)
                    try:
                        config = layout.load_config(root)
                    except MlopsError:
                        config = None
            self._snapshot = Snapshot(tip, models, config)
            return self._snapshot

    def history(self, model: str, limit: int = 60) -> list[CommitInfo]:
        """Commits that changed `apps/<model>/`, newest first (no fetch: take a snapshot first)."""
        with self._lock:
            mirror = self._open()
            tip = mirror.sha(self.branch)
            if tip is None:
                return []
            commits = mirror.log(tip, paths=[f"{layout.APPS}/{model}/"], first_parent=True)
            return commits[:limit]

    def weight_history(self, model: str, since: float,
                       limit: int = 200) -> list[tuple[str, float, dict[str, int]]]:
        """(commit, commit time, weight per version in git) for each commit of the model's
        folder since `since` (unix time), oldest first, plus the last one before it (the
        weights the window starts with). A commit never changes, so each is read once."""
        with self._lock:
            mirror = self._open()
            tip = mirror.sha(self.branch)
            if tip is None:
                return []
            out = mirror.git.run("log", "--first-parent", f"-{limit}", "--format=%H %ct", tip,
                                 "--", f"{layout.APPS}/{model}/").stdout.split()
            found = []
            for sha, at in zip(out[0::2], out[1::2]):
                key = (model, sha)
                if key not in self._weights:
                    self._weights[key] = self._weights_at(mirror, model, sha)
                found.append((sha, float(at), self._weights[key]))
                if float(at) < since:
                    break
            return list(reversed(found))

    @staticmethod
    def _weights_at(mirror: Mirror, model: str, sha: str) -> dict[str, int]:
        docs = []
        for name in ("destinationrule.yaml", "virtualservice.yaml"):
            text = mirror.show(sha, f"{layout.APPS}/{model}/{name}")
            try:
                docs.append(yaml.safe_load(text) if text else None)
            except yaml.YAMLError:
                return {}
        try:
            return weights_by_version(docs[0], docs[1]) if docs[0] and docs[1] else {}
        except (TypeError, ValueError, AttributeError):  # a hand edit this lenient read skips
            return {}


def evidence(trailers: dict[str, str]) -> dict[str, Any]:
    """The `Mlops-Evidence` trailer (JSON written by `promotion.gitrepo.apply.message`), or {}."""
    text = trailers.get("Mlops-Evidence")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
