"""The sync re-reads only the model folders a commit changed (issue 31: a fleet in one repo).

Real parts: a bare GitOps repo, commits through the write-back, the sync's
`GitSource` (git ls-remote, fetch, ls-tree, archive) and `poll_git`. No
Prometheus, HAProxy or model server is needed for what is read from git, so
none is started.
"""

from __future__ import annotations

import pathlib

from gitops import layout
from gitops.writeback import Message, WriteBack
from local.platform import reposync as sync_mod
from local.platform.reposync import RepoSync
from local.platform.workdir import PlatformConfig, Workdir
from serving import manifests


def _docs(model: str, folder: pathlib.Path, weight: int) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [manifests.service(model), manifests.destination_rule(model, "v1", "v2"),
            manifests.virtual_service(model, 100 - weight, weight)]
    for version in ("v1", "v2"):
        docs.append(manifests.deployment(model, version, image="img:1",
                                         model_uri=folder.as_uri(), weights_sha256="0" * 64))
    return docs


def _commit(repo, change, subject: str) -> None:
    WriteBack(repo).commit("main", change, Message(subject))


def test_a_commit_to_one_model_parses_only_that_model(platform_gitops, tmp_path, monkeypatch):
    repo = platform_gitops
    _commit(repo, lambda root: [layout.write_model(root, m, _docs(m, tmp_path / m, 10))
                                for m in ("a", "b", "c")], "three models")
    parsed: list[list[str]] = []
    read = sync_mod.read_checkout

    def spy(root: pathlib.Path):
        parsed.append(layout.list_models(root))
        return read(root)

    monkeypatch.setattr(sync_mod, "read_checkout", spy)
    sync = RepoSync(Workdir(tmp_path / "platform"), PlatformConfig(gitops=str(repo)))
    sync.poll()
    assert parsed == [["a", "b", "c"]]
    assert {m: dict(s.weights) for m, s in sync.desired.items()} == {
        m: {"v1": 90, "v2": 10} for m in ("a", "b", "c")}
    b_spec = sync.desired["b"]

    _commit(repo, lambda root: layout.write_model(root, "a", _docs("a", tmp_path / "a", 25)),
            "canary(a): 10% -> 25%")
    sync.poll()
    assert parsed[1:] == [["a"]]  # b and c are not read again
    assert dict(sync.desired["a"].weights) == {"v1": 75, "v2": 25}
    assert sync.desired["b"] is b_spec

    # A broken folder keeps its last good spec and its error, until it is fixed.
    _commit(repo, lambda root: (root / "apps/b/virtualservice.yaml").write_text("kind: [\n"),
            "break b")
    sync.poll()
    assert sync.desired["b"] is b_spec and [e.model for e in sync.errors] == ["b"]
    _commit(repo, lambda root: layout.write_model(root, "c", _docs("c", tmp_path / "c", 50)),
            "canary(c): 10% -> 50%")
    sync.poll()
    assert parsed[-1] == ["c"] and [e.model for e in sync.errors] == ["b"]

    # A model folder removed from main is no longer desired.
    _commit(repo, lambda root: __import__("shutil").rmtree(root / "apps" / "a"), "remove a")
    sync.poll()
    assert sorted(sync.desired) == ["b", "c"] and sync.applied_commit != sync.seen_commit
