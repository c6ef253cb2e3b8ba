"""`mlops rollback MODEL [--to VERSION]`: an earlier version stable at 100 %, no analysis.

The decision is pure (`plan_rollback`, `plan_restore`, `choose_target`,
`stable_versions`) and is tested on folders built in memory, without git. The
end-to-end tests use real bare repositories: versions proposed through the
local forge's PRs (as the pipeline proposes them), a promotion committed by the
real controller on a human's promote request, then `mlops rollback` through the
CLI. The model directories hold a `model.yaml` and weights whose digest matches;
no Paddle program is needed because neither proposing nor rolling back loads
the model. Make-before-break in a cluster (two commits, the traffic moved once
the Deployment is ready) asks a stand-in Kubernetes API server
(`tests/fixtures/kubeapi.py`: no API server can run here) through the official
client and a kubeconfig, as a person's `mlops rollback --readiness kubernetes`
does; the local platform's half runs for real in
tests/local/test_platform_make_before_break.py.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from gitops import layout
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from gitops.writeback import Message, WriteBack
from mlops.cli import main as cli
from promotion.controller import Controller, ControllerConfig
from promotion.decision.policy import load_policy
from promotion.decision.state import CanaryState, Phase, dump_state
from promotion.errors import RollbackError, RollbackNotFound
from promotion.gitrepo import apply
from promotion.gitrepo import rollback as rollback_module
from promotion.gitrepo.propose import propose
from promotion.gitrepo.rollback import (
    PastVersion,
    choose_target,
    plan_restore,
    plan_rollback,
    stable_versions,
)
from serving import manifests
from tests.fixtures.common import ROOT
from tests.fixtures.kubeapi import api_stand_in
from tests.fixtures.production import fake_model_dir
from tests.fixtures.promotion_controller import RouterStub

MODEL = "shapes"
NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


# -- pure: folders in memory ---------------------------------------------------------------


def _deployment(version: str) -> dict:
    return manifests.deployment(MODEL, version, image="img:1",
                                model_uri=f"file:///models/{MODEL}/{version}",
                                weights_sha256=version[-1] * 64)


def _folder(stable: str, candidate: str | None = None, weight: int = 0,
            phase: Phase = Phase.PROMOTED) -> layout.ModelState:
    versions = [stable] + ([candidate] if candidate else [])
    state = CanaryState(model=MODEL, phase=phase, stable=stable, candidate=candidate,
                        weight=weight)
    return layout.ModelState(
        model=MODEL,
        deployments={v: _deployment(v) for v in versions},
        service=manifests.service(MODEL),
        destination_rule=manifests.destination_rule(MODEL, stable, candidate),
        virtual_service=manifests.virtual_service(MODEL, 100 - weight, weight,
                                                  canary=candidate is not None),
        extra={layout.PROMOTION: dump_state(state)},
    )


# A hand-formatted manifest (comment, key order, quoting): restored as text, not re-dumped.
V1_TEXT = "# served v1 until the 20th\n" + yaml.safe_dump(_deployment("v1"), sort_keys=True)


def _v1(**kw) -> PastVersion:
    return PastVersion("v1", "c" * 40, V1_TEXT, "d" * 40, **kw)


def _routes(vs: dict) -> list[tuple[str, int]]:
    return [(r["destination"]["subset"], r["weight"]) for r in vs["spec"]["http"][0]["route"]]


def _subsets(dr: dict) -> list[tuple[str, str]]:
    return [(s["name"], s["labels"]["version"]) for s in dr["spec"]["subsets"]]


def test_plan_makes_the_earlier_version_stable_at_100_with_its_manifest_verbatim():
    plan = plan_rollback(_folder("v2"), _v1(checked="/models/shapes/v1"), by="alice", now=NOW)
    assert plan is not None
    assert plan.restore == {"deployment-v1.yaml": V1_TEXT}
    assert plan.remove_versions == ["v2"]
    dr, vs = plan.documents
    assert _subsets(dr) == [("stable", "v1")]
    assert _routes(vs) == [("stable", 100)]
    state = plan.state
    assert (state.phase, state.stable, state.candidate, state.weight) == \
        (Phase.PROMOTED, "v1", None, 0)
    assert state.last_decision is not None
    assert (state.last_decision.kind, state.last_decision.cause, state.last_decision.at) == \
        ("rollback", "human", NOW)
    msg = plan.message
    assert msg.subject == "rollback(shapes): v1 is stable at 100% (was v2)"
    assert "Requested by alice" in msg.body and "No analysis was done" in msg.body
    assert "restored from dddddddddddd" in msg.body and "/models/shapes/v1" in msg.body
    trailers = dict(msg.trailers)
    assert trailers["Mlops-Decision"] == "rollback/human"
    assert trailers["Mlops-Requested-By"] == "alice"
    assert (trailers["Mlops-Stable"], trailers["Mlops-Rollback-To"]) == ("v2", "v1")
    assert trailers["Mlops-Restored-From"] == "d" * 40


def test_plan_ends_a_canary_in_flight_in_the_same_commit():
    folder = _folder("v2", "v3", weight=25, phase=Phase.PROGRESSING)
    plan = plan_rollback(folder, _v1(), by="bob", now=NOW)
    assert plan is not None
    assert plan.remove_versions == ["v2", "v3"]
    assert _routes(plan.documents[1]) == [("stable", 100)]  # no canary route left
    assert _subsets(plan.documents[0]) == [("stable", "v1")]
    assert plan.message.subject == \
        "rollback(shapes): v1 is stable at 100% (was v2; canary v3 at 25% ended)"
    assert dict(plan.message.trailers)["Mlops-Step"] == "25->0"
    assert plan.state.candidate is None and plan.state.phase is Phase.PROMOTED


def test_rolling_back_to_the_stable_version_ends_its_canary_and_keeps_its_deployment():
    folder = _folder("v1", "v2", weight=10, phase=Phase.PAUSED)
    plan = plan_rollback(folder, PastVersion("v1", "c" * 40), by="bob", now=NOW)
    assert plan is not None
    assert plan.restore == {}  # v1's Deployment is on the branch: nothing to recover
    assert plan.remove_versions == ["v2"]
    assert plan.message.subject == \
        "rollback(shapes): v1 is stable at 100% (was v1; canary v2 at 10% ended)"


def test_rolling_back_to_the_version_that_serves_alone_is_a_no_op():
    assert plan_rollback(_folder("v1"), PastVersion("v1", "c" * 40), by="x", now=NOW) is None


def test_a_recovered_manifest_of_another_version_is_refused():
    wrong = PastVersion("v1", "c" * 40, yaml.safe_dump(_deployment("v9")), "d" * 40)
    with pytest.raises(RollbackError, match="not the Deployment of shapes v1"):
        plan_rollback(_folder("v2"), wrong, by="x", now=NOW)


def test_plan_restore_brings_the_version_back_at_0_and_leaves_the_traffic_alone():
    """The first commit of a make-before-break rollback: only v1's Deployment, verbatim."""
    folder = _folder("v2")
    restore = plan_restore(folder, _v1(checked="/models/shapes/v1"), by="alice",
                           command="mlops rollback shapes --to v1")
    assert restore is not None
    assert restore.restore == {"deployment-v1.yaml": V1_TEXT}
    assert restore.documents == [] and restore.remove_versions == []  # VS and DR untouched
    assert restore.state == restore.before  # nothing in flight: the state stays
    msg = restore.message
    assert msg.subject == "rollback(shapes): bring v1 back before it takes traffic (v2 serves)"
    assert "make-before-break" in msg.body and "/models/shapes/v1" in msg.body
    trailers = dict(msg.trailers)
    assert trailers["Mlops-Decision"] == "restore/human"
    assert (trailers["Mlops-Rollback-To"], trailers["Mlops-Stable"]) == ("v1", "v2")
    assert trailers["Mlops-Restored-From"] == "d" * 40


def test_plan_restore_pauses_a_canary_in_flight_and_the_rollback_then_ends_it():
    folder = _folder("v2", "v3", weight=25, phase=Phase.PROGRESSING)
    restore = plan_restore(folder, _v1(), by="bob")
    assert restore is not None
    assert (restore.state.phase, restore.state.weight, restore.state.candidate) == \
        (Phase.PAUSED, 25, "v3")
    assert restore.state.pause_reason == "paused: rollback to v1 under way (requested by bob)"
    assert restore.message.subject == ("rollback(shapes): bring v1 back before it takes "
                                       "traffic (v2 serves; canary v3 paused at 25%)")
    # The second commit, planned from the branch after the first and once v1 is ready.
    after = _folder("v2", "v3", weight=25, phase=Phase.PAUSED)
    after.deployments["v1"] = yaml.safe_load(V1_TEXT)
    plan = plan_rollback(after, _v1(), by="bob", now=NOW, ready="deployment shapes-v1: 1/1")
    assert plan is not None
    assert plan.restore == {}  # back already: not restored twice
    assert plan.remove_versions == ["v2", "v3"]
    assert "- v1 was ready before it took the traffic: deployment shapes-v1: 1/1" in \
        plan.message.body
    assert plan.message.subject == \
        "rollback(shapes): v1 is stable at 100% (was v2; canary v3 at 25% ended)"


def test_plan_restore_has_nothing_to_do_for_a_version_with_its_deployment():
    folder = _folder("v1", "v2", weight=10, phase=Phase.PROGRESSING)
    assert plan_restore(folder, PastVersion("v1", "c" * 40), by="x") is None


def test_stable_versions_newest_first_from_the_promotion_history():
    def st(stable: str | None, candidate: str | None = None) -> CanaryState:
        return CanaryState(model=MODEL, stable=stable, candidate=candidate,
                           phase=Phase.PROGRESSING if candidate else Phase.PROMOTED)

    history = [("c6", st("v1")), ("c5", st("v3")), ("c4", None), ("c3", st("v2", "v3")),
               ("c2", st("v2")), ("c1", st("v1", "v2")), ("c0", st("v1"))]
    assert stable_versions(history) == [("v1", "c6"), ("v3", "c5"), ("v2", "c3")]


def _past(*versions: str, missing: dict[str, str] | None = None) -> list[PastVersion]:
    return [PastVersion(v, f"c-{v}", "text", f"m-{v}", (missing or {}).get(v))
            for v in versions]


def test_default_target_is_the_previous_stable_version():
    state = CanaryState(model=MODEL, phase=Phase.PROMOTED, stable="v3")
    assert choose_target(MODEL, state, "v3", _past("v3", "v2", "v1"), None).version == "v2"


def test_unknown_version_is_not_found_and_lists_the_choices():
    state = CanaryState(model=MODEL, phase=Phase.PROMOTED, stable="v3")
    past = _past("v3", "v2", "v1", missing={"v1": "its model files are no longer published"})
    with pytest.raises(RollbackNotFound) as raised:
        choose_target(MODEL, state, "v3", past, "v9")
    assert raised.value.exit_code == 7
    assert "cannot roll back to v9" in str(raised.value)
    assert str(raised.value).endswith("versions you can roll back to: v2")


def test_a_version_whose_files_are_gone_is_not_found_naming_what_is_missing():
    state = CanaryState(model=MODEL, phase=Phase.PROMOTED, stable="v3")
    past = _past("v3", "v2", "v1", missing={"v2": "/models/shapes/v2/model.yaml not found"})
    with pytest.raises(RollbackNotFound, match=r"cannot roll back to v2: /models/shapes/v2/"
                                               r"model.yaml not found; versions you can roll "
                                               r"back to: v1$"):
        choose_target(MODEL, state, "v3", past, None)


def test_no_earlier_version_and_the_candidate_are_refused():
    state = CanaryState(model=MODEL, phase=Phase.PROGRESSING, stable="v1", candidate="v2",
                        weight=10)
    with pytest.raises(RollbackNotFound, match="no earlier stable version"):
        choose_target(MODEL, state, "v1", _past("v1"), None)
    with pytest.raises(RollbackError, match="v2 is the candidate of the canary") as raised:
        choose_target(MODEL, state, "v1", _past("v1"), "v2")
    assert raised.value.exit_code == 2


# -- end to end: real git, the local forge, the CLI ---------------------------------------


def _git(repo: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def _blob(repo: pathlib.Path, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], check=True,
                          capture_output=True).stdout


def _refs(repo: pathlib.Path) -> str:
    return _git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def _state(repo: pathlib.Path, rev: str = "main") -> dict:
    return yaml.safe_load(_git(repo, "show", f"{rev}:apps/{MODEL}/promotion.yaml"))


def _propose(repo: pathlib.Path, folder: pathlib.Path, approval: str = "auto"):
    return propose(folder, str(repo), LocalForge(repo), load_policy({}),
                   approval=approval)  # type: ignore[arg-type]


def _promote_candidate(repo: pathlib.Path, work: pathlib.Path) -> None:
    """The real controller: the merged candidate's first step once ready, then a human's
    promote request carried out (`mlops canary promote`), as in production."""
    now = [float(_git(repo, "log", "-1", "--format=%ct", "main").strip())]
    controller = Controller(ControllerConfig(repo=str(repo), workdir=work),
                            RouterStub(repo, rate=1), clock=lambda: now[0])
    try:
        controller.tick()
        apply.human_commit(WriteBack(str(repo)), "main", MODEL, "promote", "carol",
                           dt.datetime.now(dt.timezone.utc))
        now[0] += 1
        controller.tick()
    finally:
        controller.close()
    assert (_state(repo)["phase"], _state(repo)["stable"]) == ("promoted", "v2")


@pytest.fixture(scope="module")
def promoted_once(tmp_path_factory) -> tuple[pathlib.Path, dict[str, pathlib.Path], bytes]:
    """v1 was stable (via PR #1), v2 was proposed (PR #2), merged and promoted.
    Built once for the module (a minute of git on a busy machine); each test gets a copy."""

    base = tmp_path_factory.mktemp("rollback")
    repo = base / "gitops.git"
    init_repo(repo)
    dirs = {v: fake_model_dir(base / "models", MODEL, v, {"map50": 0.9, "map": 0.6})
            for v in ("v1", "v2")}
    _propose(repo, dirs["v1"])
    # A human tuned v1's Deployment while it served: the rollback must bring back this text,
    # not a Deployment rebuilt from the model.
    def tune(root: pathlib.Path) -> None:
        path = root / layout.APPS / MODEL / "deployment-v1.yaml"
        path.write_text("# tuned by ops: 3 replicas\n"
                        + path.read_text().replace("replicas: 1\n", "replicas: 3\n"))

    WriteBack(str(repo)).commit("main", tune, Message("ops(shapes): v1 on 3 replicas"))
    v1_manifest = _blob(repo, "main", f"apps/{MODEL}/deployment-v1.yaml")
    assert v1_manifest.startswith(b"# tuned by ops") and b"replicas: 3\n" in v1_manifest
    _propose(repo, dirs["v2"])
    _promote_candidate(repo, base / "controller")
    assert "deployment-v1.yaml" not in _git(repo, "ls-tree", "--name-only", f"main:apps/{MODEL}")
    return repo, dirs, v1_manifest


@pytest.fixture
def promoted(promoted_once, tmp_path) -> tuple[pathlib.Path, dict[str, pathlib.Path], bytes]:
    """A copy of the module's repo (the model dirs are shared: a test that removes one puts
    it back)."""
    repo, dirs, v1_manifest = promoted_once
    copy = tmp_path / "gitops.git"
    shutil.copytree(repo, copy)
    return copy, dirs, v1_manifest


def test_rollback_serves_the_previous_version_from_its_original_manifest(promoted, capsys):
    repo, dirs, v1_manifest = promoted
    before = _git(repo, "rev-parse", "main").strip()

    assert cli(["rollback", MODEL, "--gitops", str(repo), "--by", "alice"]) == 0
    note, out = capsys.readouterr().out.split("\n", 1)
    # No runtime to ask (no platform work dir, no --readiness): one commit, and it says so.
    assert note.startswith("note: readiness not checked: the version rolled back to takes "
                           "the traffic in the commit that brings it back")
    assert out.startswith("rollback(shapes): v1 is stable at 100% (was v2); commit ")
    assert f"model files: {dirs['v1']} (weights sha256 checked)" in out

    assert _git(repo, "rev-list", "--count", f"{before}..main").strip() == "1"
    assert _git(repo, "rev-parse", "main^").strip() == before  # one commit, on top of main
    assert _blob(repo, "main", f"apps/{MODEL}/deployment-v1.yaml") == v1_manifest
    assert _git(repo, "ls-tree", "--name-only", f"main:apps/{MODEL}").split() == [
        "canary-policy.yaml", "deployment-v1.yaml", "destinationrule.yaml",
        "kustomization.yaml", "promotion.yaml", "service.yaml", "virtualservice.yaml"]
    vs = yaml.safe_load(_blob(repo, "main", f"apps/{MODEL}/virtualservice.yaml"))
    dr = yaml.safe_load(_blob(repo, "main", f"apps/{MODEL}/destinationrule.yaml"))
    kust = yaml.safe_load(_blob(repo, "main", f"apps/{MODEL}/kustomization.yaml"))
    assert _routes(vs) == [("stable", 100)] and _subsets(dr) == [("stable", "v1")]
    assert "deployment-v1.yaml" in kust["resources"]
    assert "deployment-v2.yaml" not in kust["resources"]
    state = _state(repo)
    assert (state["phase"], state["stable"], state["candidate"], state["weight"]) == \
        ("promoted", "v1", None, 0)
    assert state["last_decision"]["kind"] == "rollback"

    message = _git(repo, "log", "-1", "--format=%B", "main")
    assert message.splitlines()[0] == "rollback(shapes): v1 is stable at 100% (was v2)"
    assert "Requested by alice" in message and "No analysis was done" in message
    trailers = _git(repo, "log", "-1", "--format=%(trailers:only,unfold)", "main")
    assert "Mlops-Decision: rollback/human" in trailers
    assert "Mlops-Requested-By: alice" in trailers
    assert _git(repo, "log", "-1", "--format=%an", "main").strip() == "mlops-bot"

    assert cli(["gitops", "lint", "--repo", str(repo)]) == 0, capsys.readouterr()
    capsys.readouterr()

    # Asking again for the version that serves is a no-op that says so.
    tip = _git(repo, "rev-parse", "main").strip()
    assert cli(["rollback", MODEL, "--to", "v1", "--gitops", str(repo)]) == 0
    assert "v1 already serves 100%" in capsys.readouterr().out
    assert _git(repo, "rev-parse", "main").strip() == tip


def test_rollback_to_an_unknown_version_is_not_found_and_changes_nothing(promoted, capsys):
    repo, _, _ = promoted
    refs = _refs(repo)
    assert cli(["rollback", MODEL, "--to", "v9", "--gitops", str(repo)]) == 7
    err = capsys.readouterr().err
    assert err.startswith("error: shapes: cannot roll back to v9")
    assert "versions you can roll back to: v1" in err
    assert _refs(repo) == refs


def test_rollback_refuses_a_version_whose_model_files_are_gone(promoted, capsys):
    repo, dirs, _ = promoted
    gone = dirs["v1"].with_name("moved-away")
    dirs["v1"].rename(gone)
    try:
        refs = _refs(repo)
        assert cli(["rollback", MODEL, "--gitops", str(repo)]) == 7
        err = capsys.readouterr().err
    finally:
        gone.rename(dirs["v1"])
    assert "cannot roll back to v1: its model files are no longer published" in err
    assert str(dirs["v1"] / "model.yaml") in err and "versions you can roll back to: none" in err
    assert _refs(repo) == refs


def test_rollback_refuses_weights_other_than_the_approved_ones(promoted, capsys):
    repo, dirs, _ = promoted
    weights = dirs["v1"] / "inference.pdiparams"
    original = weights.read_bytes()
    weights.write_bytes(b"retrained in place")
    try:
        refs = _refs(repo)
        assert cli(["rollback", MODEL, "--gitops", str(repo)]) == 5
    finally:
        weights.write_bytes(original)
    err = capsys.readouterr().err
    assert "cannot roll back to v1" in err and "not the evaluated weights_sha256" in err
    assert _refs(repo) == refs


def test_rollback_checks_the_models_root_when_given(promoted, capsys, tmp_path):
    repo, _, _ = promoted
    elsewhere = tmp_path / "volume"
    elsewhere.mkdir()
    assert cli(["rollback", MODEL, "--gitops", str(repo), "--models-root", str(elsewhere)]) == 7
    assert str(elsewhere / MODEL / "v1" / "model.yaml") in capsys.readouterr().err


def test_reproposing_a_rolled_back_version_opens_a_new_pr(promoted, capsys):
    repo, dirs, _ = promoted
    forge = LocalForge(repo)
    old = forge.find_pr(f"mlops/propose/{MODEL}/v2")
    assert old is not None and old.state == "merged"
    assert cli(["rollback", MODEL, "--gitops", str(repo)]) == 0
    main_after_rollback = _git(repo, "rev-parse", "main").strip()

    again = _propose(repo, dirs["v2"], approval="pr")
    assert (again.status, again.branch, again.merged) == \
        ("opened", f"mlops/propose/{MODEL}/v2-2", False)
    assert again.pr_number is not None and again.pr_number > old.number
    assert "was merged earlier" in again.message
    pr = forge.get_pr(again.pr_number)
    assert (pr.state, pr.branch) == ("open", f"mlops/propose/{MODEL}/v2-2")
    branch_state = _state(repo, f"mlops/propose/{MODEL}/v2-2")
    assert (branch_state["phase"], branch_state["stable"], branch_state["candidate"]) == \
        ("waiting", "v1", "v2")
    assert _git(repo, "rev-parse", "main").strip() == main_after_rollback  # a PR waits

    # Idempotent: the same re-proposal finds the same branch and PR.
    twice = _propose(repo, dirs["v2"], approval="pr")
    assert (twice.status, twice.pr_number) == ("unchanged", again.pr_number)
    # The stable version is not proposed at all.
    stable = _propose(repo, dirs["v1"], approval="pr")
    assert stable.status == "serving" and stable.pr_number is None
    assert "already the stable version" in stable.message
    assert len(forge.list_prs(None)) == 3


def test_rollback_ends_a_canary_in_flight_and_the_candidate_stays_a_no_op(promoted, tmp_path):
    repo, _, _ = promoted
    v3 = fake_model_dir(tmp_path / "models", MODEL, "v3", {"map50": 0.9, "map": 0.6})
    _propose(repo, v3)
    assert _state(repo)["candidate"] == "v3"
    again = _propose(repo, v3)  # the candidate in flight: its merged PR, nothing new
    assert again.status == "merged" and again.branch == f"mlops/propose/{MODEL}/v3"
    before = _git(repo, "rev-parse", "main").strip()

    assert cli(["rollback", MODEL, "--to", "v1", "--gitops", str(repo), "--by", "dan"]) == 0
    assert _git(repo, "rev-list", "--count", f"{before}..main").strip() == "1"
    subject = _git(repo, "log", "-1", "--format=%s", "main").strip()
    assert subject == "rollback(shapes): v1 is stable at 100% (was v2; canary v3 at 0% ended)"
    files = _git(repo, "ls-tree", "--name-only", f"main:apps/{MODEL}").split()
    assert [f for f in files if f.startswith("deployment-")] == ["deployment-v1.yaml"]
    assert (_state(repo)["phase"], _state(repo)["candidate"]) == ("promoted", None)
    assert cli(["gitops", "lint", "--repo", str(repo)]) == 0


def test_a_concurrent_push_is_rebased_over_and_not_lost(promoted, monkeypatch, tmp_path):
    """Someone pushes to main between the rollback's checkout and its push: the write-back
    rebases the rollback on top and retries; both commits are on main, nothing forced."""

    repo, _, v1_manifest = promoted
    before = _git(repo, "rev-parse", "main").strip()
    real_write = rollback_module.RollbackPlan.write
    pushed = []

    def write_after_a_concurrent_push(self, root):
        if not pushed:  # a human's plain git push (the bot's own writers share a lock)
            clone = tmp_path / "human"
            subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
            (clone / "NOTES.md").write_text("on call: dan\n")
            env = {**os.environ, "GIT_AUTHOR_NAME": "Dan", "GIT_AUTHOR_EMAIL": "dan@example.com",
                   "GIT_COMMITTER_NAME": "Dan", "GIT_COMMITTER_EMAIL": "dan@example.com"}
            for args in (["add", "NOTES.md"], ["commit", "-qm", "docs: on call"],
                         ["push", "-q", "origin", "HEAD:main"]):
                subprocess.run(["git", "-C", str(clone), *args], check=True, env=env)
            pushed.append(True)
        real_write(self, root)

    monkeypatch.setattr(rollback_module.RollbackPlan, "write", write_after_a_concurrent_push)
    result = rollback_module.rollback(str(repo), MODEL, by="erin",
                                      backoff=rollback_module.Backoff(tries=3, first=0.01))
    assert result.status == "committed"
    assert _git(repo, "log", "--format=%s", f"{before}..main").splitlines() == [
        "rollback(shapes): v1 is stable at 100% (was v2)", "docs: on call"]
    assert _blob(repo, "main", "NOTES.md") == b"on call: dan\n"
    assert _blob(repo, "main", f"apps/{MODEL}/deployment-v1.yaml") == v1_manifest


# -- make-before-break against a stand-in Kubernetes API ------------------------------------


def _kubeconfig(tmp_path: pathlib.Path, url: str) -> pathlib.Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "stand-in", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {}}],
        "contexts": [{"name": "here", "context": {"cluster": "stand-in", "user": "me"}}]}))
    return path


def _live(manifest: bytes, available: int, **status) -> dict:
    """The apps/v1 Deployment as the API server returns it, from the restored manifest."""
    doc = yaml.safe_load(manifest)
    replicas = doc["spec"]["replicas"]
    return {"metadata": {"name": f"{MODEL}-v1", "generation": 1},
            "spec": {"replicas": replicas, "template": doc["spec"]["template"]},
            "status": {"observedGeneration": 1, "replicas": replicas,
                       "updatedReplicas": replicas, "availableReplicas": available, **status}}


def _rollback_cli(tmp_path: pathlib.Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """`mlops rollback` in its own process, with a kubeconfig naming the stand-in (the
    Kubernetes client reads $KUBECONFIG once, when it is imported)."""
    env = {**os.environ, "KUBECONFIG": str(_kubeconfig(tmp_path, url))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("MLOPS_WORKDIR", None)
    return subprocess.run([sys.executable, "-m", "mlops", "rollback", MODEL, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _main_split(repo: pathlib.Path) -> tuple[list, list, list]:
    files = _git(repo, "ls-tree", "--name-only", f"main:apps/{MODEL}").split()
    vs = yaml.safe_load(_blob(repo, "main", f"apps/{MODEL}/virtualservice.yaml"))
    dr = yaml.safe_load(_blob(repo, "main", f"apps/{MODEL}/destinationrule.yaml"))
    return [f for f in files if f.startswith("deployment-")], _routes(vs), _subsets(dr)


DEPLOYMENT_V1 = f"/apis/apps/v1/namespaces/models/deployments/{MODEL}-v1"
PODS = "/api/v1/namespaces/models/pods"


def test_rollback_in_a_cluster_moves_the_traffic_only_once_the_deployment_is_ready(
        promoted, tmp_path):
    """Issue 43: the one commit moved the VirtualService to a subset whose pods were still
    starting ("no healthy upstream"). Now the first commit brings v1's Deployment back
    with the traffic where it was, and the second moves it once the API server says the
    Deployment is available (`KubernetesReadiness`, the controller's own check)."""
    repo, _, v1_manifest = promoted
    before = _git(repo, "rev-parse", "main").strip()
    seen_while_starting = []

    def answer(method, path, body, earlier):
        if path.startswith(PODS):  # none has given up (a server exits 9 when it does)
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": []}
        if path != DEPLOYMENT_V1:
            return 404, {"kind": "Status", "code": 404}
        asked = sum(1 for _, p, _ in earlier if p == DEPLOYMENT_V1)
        if asked < 2:  # its pods start: what main says meanwhile is recorded
            seen_while_starting.append(_main_split(repo))
            return 200, _live(v1_manifest, available=0)
        return 200, _live(v1_manifest, available=3)

    with api_stand_in(answer) as (url, requests_seen):
        done = _rollback_cli(tmp_path, url, "--gitops", str(repo), "--by", "alice",
                             "--readiness", "kubernetes")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # While v1 started, main had its Deployment back and v2 kept all the traffic.
    assert seen_while_starting == [(["deployment-v1.yaml", "deployment-v2.yaml"],
                                    [("stable", 100)], [("stable", "v2")])] * 2
    # The Deployment until it is ready; while it is not, its pods (gave up for good?).
    assert [p.split("?")[0] for _, p, _ in requests_seen] == [DEPLOYMENT_V1, PODS] * 2 + \
        [DEPLOYMENT_V1]
    assert _git(repo, "log", "--format=%s", f"{before}..main").splitlines() == [
        "rollback(shapes): v1 is stable at 100% (was v2)",
        "rollback(shapes): bring v1 back before it takes traffic (v2 serves)"]
    assert _main_split(repo) == (["deployment-v1.yaml"], [("stable", 100)], [("stable", "v1")])
    assert _blob(repo, "main", f"apps/{MODEL}/deployment-v1.yaml") == v1_manifest
    first = _git(repo, "log", "-1", "--format=%(trailers:only,unfold)", "main^")
    assert "Mlops-Decision: restore/human" in first and "Mlops-Requested-By: alice" in first
    message = _git(repo, "log", "-1", "--format=%B", "main")
    assert f"- v1 was ready before it took the traffic: deployment {MODEL}-v1: 3/3 replicas " \
        "ready" in message
    assert "Mlops-Decision: rollback/human" in message
    lines = out.splitlines()
    assert lines[0] == "readiness: kubernetes"
    assert lines[1].startswith("rollback(shapes): bring v1 back before it takes traffic")
    assert lines[2] == (f"  waiting for v1 to be ready (up to 300s): deployment {MODEL}-v1: "
                        "0 of 3 replicas ready")
    assert lines[3].startswith("rollback(shapes): v1 is stable at 100% (was v2); commit ")
    assert cli(["gitops", "lint", "--repo", str(repo)]) == 0


@pytest.mark.parametrize("live, wait, words", [
    ({"conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded",
                      "message": 'ReplicaSet "shapes-v1-5d8" has timed out progressing.'}]},
     "300", "v1 cannot become ready: deployment shapes-v1 exceeded its progress deadline: "
            'ReplicaSet "shapes-v1-5d8" has timed out progressing.'),
    ({}, "0", "v1 is not ready after 0s: deployment shapes-v1: 0 of 3 replicas ready"),
], ids=["progress-deadline-exceeded", "wait-over"])
def test_a_version_that_does_not_become_ready_leaves_the_traffic_where_it_was(
        promoted, tmp_path, live, wait, words):
    """Not ready within --wait, or never (Kubernetes gave up on its rollout): exit 1 with
    the reason and what to do; only the first commit is on main, v2 still serves."""
    repo, _, v1_manifest = promoted
    before = _git(repo, "rev-parse", "main").strip()

    def answer(method, path, body, earlier):
        return 200, _live(v1_manifest, available=0, **live)

    with api_stand_in(answer) as (url, _):
        done = _rollback_cli(tmp_path, url, "--gitops", str(repo), "--readiness", "kubernetes",
                             "--wait", wait)
    err = done.stderr
    assert done.returncode == 1, (done.stdout, err)
    first = _git(repo, "rev-parse", "main").strip()
    assert _git(repo, "rev-parse", "main^").strip() == before  # one commit: the restore
    assert err.startswith(f"error: {MODEL}: {words}; the traffic did not move, v2 still serves.")
    assert f"`mlops rollback {MODEL} --to v1` again once it is ready" in err
    assert f"`git revert {first[:12]}`" in err
    assert _main_split(repo) == (["deployment-v1.yaml", "deployment-v2.yaml"], [("stable", 100)],
                                 [("stable", "v2")])


def test_a_platform_that_syncs_another_repo_is_not_asked(promoted, tmp_path):
    """$MLOPS_WORKDIR names a local platform serving some other GitOps repo: it would never
    report v1 ready, so the rollback does not wait on it (and says why)."""
    repo, _, _ = promoted
    platform = tmp_path / "platform"
    platform.mkdir()
    (platform / "platform.json").write_text('{"gitops": "/elsewhere/gitops.git"}')
    env = {**os.environ, "MLOPS_WORKDIR": str(platform)}
    done = subprocess.run([sys.executable, "-m", "mlops", "rollback", MODEL, "--gitops",
                           str(repo)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (f"note: the local platform in {platform} syncs /elsewhere/gitops.git, "
                        f"not {repo}; readiness not asked there")
    assert lines[1].startswith("note: readiness not checked")
    assert lines[2].startswith("rollback(shapes): v1 is stable at 100% (was v2); commit ")
