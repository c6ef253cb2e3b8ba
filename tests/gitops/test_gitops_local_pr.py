"""Pull requests as approvals on the local forge, with real bare repos and real git.

A PR is a branch in the bare GitOps repo plus a record on the `mlops-prs` side
branch. The repo carries the no-force guard (tests/fixtures/gitops.py).
"""

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from gitops import layout
from gitops.approval import approve
from gitops.errors import (
    BrokenManifestError,
    ConflictError,
    DigestMismatchError,
    PullRequestNotFound,
)
from gitops.forges.local import LocalForge
from gitops.proposal import parse_record, propose
from gitops.repo import Mirror, init_repo
from gitops.writeback import Message, WriteBack
from mlops.cli import main as cli
from serving import manifests
from tests.fixtures.gitops import FAST, Human, git, guard, head

V1_SHA = "11" * 32
V2_SHA = "22" * 32
BRANCH = "mlops/det-v2"


def deployment(version, sha):
    return manifests.deployment(
        "det", version, image="img", model_uri=f"file:///models/det/{version}", weights_sha256=sha
    )


def stable_v1(root):
    layout.write_model(
        root,
        "det",
        [
            manifests.service("det"),
            manifests.destination_rule("det", "v1"),
            manifests.virtual_service("det", 100, 0, canary=False),
            deployment("v1", V1_SHA),
        ],
        extra={"promotion.yaml": {"phase": "stable", "stable": "v1"}},
    )


def candidate_files(body_note=""):
    return {
        "apps/det/deployment-v2.yaml": deployment("v2", V2_SHA),
        "apps/det/destinationrule.yaml": manifests.destination_rule("det", "v1", "v2"),
        "apps/det/virtualservice.yaml": manifests.virtual_service("det", 90, 10),
        "apps/det/promotion.yaml": {"phase": "canary", "candidate": "v2", "weight": 10},
    }


REPORT = """## det v2 vs production v1

| metric | v2 | v1 (prod) |
|---|---|---|
| mAP@0.5 | 0.71 | 0.69 |
"""


# Module-local names (plugin fixture names are global across the suite).
@pytest.fixture(scope="module")
def stable_template(tmp_path_factory):
    """A guarded GitOps bare repo with det v1 stable, made once per module."""
    repo = tmp_path_factory.mktemp("stable") / "gitops.git"
    init_repo(repo)
    guard(repo)
    WriteBack(repo, backoff=FAST).commit("main", stable_v1, Message("deploy(det): v1"))
    return repo


@pytest.fixture(scope="module")
def opened_template(stable_template, tmp_path_factory):
    """The same with det v2 proposed (PR #1 open), as `do_propose` leaves it."""
    repo = tmp_path_factory.mktemp("opened") / "gitops.git"
    shutil.copytree(stable_template, repo, symlinks=True)
    forge = LocalForge(repo, backoff=FAST)
    try:
        assert do_propose(repo, forge).status == "opened"
    finally:
        forge.close()
    return repo


@pytest.fixture
def opened():
    """Asks `repo` to start with PR #1 (det v2) open: the state most tests begin from."""
    return 1


@pytest.fixture
def repo(request, tmp_path):
    """The test's own copy of a template (a bare repo is plain files: the copy is a clone,
    hooks and config included); git repos built once per module instead of per test."""
    which = "opened_template" if "opened" in request.fixturenames else "stable_template"
    return pathlib.Path(shutil.copytree(request.getfixturevalue(which), tmp_path / "gitops.git",
                                        symlinks=True))


@pytest.fixture
def human(repo, tmp_path):
    return Human(repo, tmp_path / "ada")


@pytest.fixture
def forge(repo):
    f = LocalForge(repo, backoff=FAST)
    yield f
    f.close()


def do_propose(repo, forge, files=None, body=REPORT, title="promote(det): v2 (canary 10%)"):
    return propose(
        repo, "det", BRANCH, files or candidate_files(), title, body, forge, backoff=FAST
    )


def test_propose_opens_one_pr_and_is_idempotent(repo, forge):
    first = do_propose(repo, forge)
    assert first.status == "opened" and first.pr.number == 1 and first.pr.state == "open"
    tip = head(repo, BRANCH)
    assert (
        git(repo, "log", "-1", "--format=%ae %(trailers:key=Mlops-Proposal,valueonly)", BRANCH)
        == "mlops-bot@localhost det/v2"
    )
    assert parse_record(first.pr.body).weights_sha256 == V2_SHA
    assert "| mAP@0.5 | 0.71 | 0.69 |" in first.pr.body

    again = do_propose(repo, forge)
    assert again.status == "unchanged" and again.pr.number == 1
    assert head(repo, BRANCH) == tip
    assert [p.number for p in forge.list_prs(None)] == [1]

    # A new report for the same version refreshes the same PR, no new branch commit.
    refreshed = do_propose(repo, forge, body=REPORT + "\nRe-evaluated.\n")
    assert refreshed.status == "updated" and refreshed.pr.number == 1
    assert "Re-evaluated." in forge.get_pr(1).body
    assert head(repo, BRANCH) == tip


def test_kustomization_of_the_proposal_builds(repo, forge, tmp_path, opened):
    with Mirror(repo) as mirror:
        mirror.export(BRANCH, tmp_path / "tree")
    kustomization = yaml.safe_load((tmp_path / "tree/apps/det/kustomization.yaml").read_text())
    assert kustomization["resources"] == [
        "service.yaml",
        "destinationrule.yaml",
        "virtualservice.yaml",
        "deployment-v1.yaml",
        "deployment-v2.yaml",
    ]
    out = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path / "tree/apps/det")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert sorted(kinds) == [
        "Deployment",
        "Deployment",
        "DestinationRule",
        "Service",
        "VirtualService",
    ]


def test_approve_merges_with_a_merge_commit(repo, forge, opened):
    before = head(repo)
    result = approve(repo, 1, forge)
    assert result.status == "merged"
    assert "carries the evaluated weights sha256" in result.message
    tip = head(repo)
    parents = git(repo, "log", "-1", "--format=%P", "main").split()
    assert parents == [before, head(repo, BRANCH)]
    assert (
        git(repo, "log", "-1", "--format=%(trailers:key=Mlops-Pull-Request,valueonly)", "main")
        == "1"
    )
    with Mirror(repo) as mirror:
        assert "weight: 10" in mirror.show("origin/main", "apps/det/virtualservice.yaml")
    pr = forge.get_pr(1)
    assert pr.state == "merged" and pr.merge_commit == tip
    assert forge.list_prs("open") == []
    # Approving twice is harmless.
    assert approve(repo, 1, forge).status == "already-merged"
    assert head(repo) == tip


def test_human_merge_with_plain_git_is_detected(repo, forge, human, opened):
    human.sync()
    human.git("fetch", "-q", "origin")
    human.git("merge", "-q", "--no-ff", "-m", "merge det v2 by hand", f"origin/{BRANCH}")
    human.git("push", "-q", "origin", "main")
    pr = forge.get_pr(1)
    assert pr.state == "merged"
    assert pr.merge_commit == head(repo)
    again = do_propose(repo, forge)
    assert again.status == "merged" and again.pr.number == 1


def test_fast_forward_human_merge_is_detected_too(repo, forge, human, opened):
    human.sync()
    human.git("merge", "-q", "--ff-only", f"origin/{BRANCH}")
    human.git("push", "-q", "origin", "main")
    assert forge.get_pr(1).state == "merged"


def test_human_commit_on_proposal_branch_stops_rewrites(repo, forge, human, opened):
    human.sync(BRANCH)
    human.write(
        "apps/det/deployment-v2.yaml",
        human.read("apps/det/deployment-v2.yaml").replace("replicas: 1", "replicas: 2"),
    )
    ada = human.commit_push("det v2: two replicas", branch=BRANCH)
    files = candidate_files()
    files["apps/det/virtualservice.yaml"] = manifests.virtual_service("det", 75, 25)
    result = do_propose(repo, forge, files=files)
    assert result.status == "human-edited"
    assert "Ada Human" in result.message and ada[:10] in result.message
    assert "not rewriting" in result.message
    assert head(repo, BRANCH) == ada
    assert result.pr.number == 1


def test_digest_mismatch_is_refused_and_nothing_merged(repo, forge, human, opened):
    human.sync(BRANCH)
    human.write(
        "apps/det/deployment-v2.yaml",
        human.read("apps/det/deployment-v2.yaml").replace(V2_SHA, "ee" * 32),
    )
    human.commit_push("swap det v2 weights", branch=BRANCH)
    before = head(repo)
    with pytest.raises(DigestMismatchError) as info:
        approve(repo, 1, forge)
    msg = str(info.value)
    assert "apps/det/deployment-v2.yaml" in msg and "ee" * 32 in msg and V2_SHA in msg
    assert head(repo) == before
    assert forge.get_pr(1).state == "open"


def test_cli_refuses_digest_mismatch_without_traceback(repo, forge, human, capsys, opened):
    human.sync(BRANCH)
    human.write(
        "apps/det/deployment-v2.yaml",
        human.read("apps/det/deployment-v2.yaml").replace(V2_SHA, "ee" * 32),
    )
    human.commit_push("swap det v2 weights", branch=BRANCH)
    assert cli(["pr", "approve", "1", "--repo", str(repo)]) == 5  # digest mismatch
    err = capsys.readouterr().err
    assert err.startswith("error: PR #1: apps/det/deployment-v2.yaml carries weights sha256")


def test_cli_list_show_approve(repo, forge, capsys, opened):
    forge.comment(1, "canary looks healthy")
    assert cli(["pr", "list", "--repo", str(repo)]) == 0
    assert f"#1    open    {BRANCH} -> main  promote(det): v2" in capsys.readouterr().out
    assert cli(["pr", "show", "1", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "evaluated: det v2 weights sha256 " + V2_SHA in out
    assert "| mAP@0.5 | 0.71 | 0.69 |" in out
    assert "canary looks healthy" in out
    assert cli(["pr", "approve", "1", "--repo", str(repo), "--by", "Ada"]) == 0
    assert "merged PR #1" in capsys.readouterr().out
    with Mirror(repo) as mirror:  # the approver authors the merge (issue 32 item 4)
        merge = mirror.log(mirror.sha("main") or "")[0]
    assert (merge.author_name, merge.author_email) == ("Ada", "ada@users.mlops.invalid")
    assert cli(["pr", "list", "--repo", str(repo), "--state", "merged"]) == 0
    assert "#1    merged" in capsys.readouterr().out
    assert cli(["pr", "show", "7", "--repo", str(repo)]) == 7  # ExitCode.NOT_FOUND
    assert "no pull request #7" in capsys.readouterr().err


def test_merge_conflict_with_main_stops_naming_the_file(repo, forge, human, opened):
    human.sync()
    human.write(
        "apps/det/virtualservice.yaml",
        human.read("apps/det/virtualservice.yaml").replace("weight: 100", "weight: 100  # pinned"),
    )
    human.commit_push("pin det to stable")
    before = head(repo)
    with pytest.raises(ConflictError) as info:
        approve(repo, 1, forge)
    assert "apps/det/virtualservice.yaml" in str(info.value)
    assert head(repo) == before


def test_broken_yaml_on_main_stops_proposal_naming_the_file(repo, forge, human):
    human.sync()
    human.write("apps/det/promotion.yaml", "phase: stable\n  candidate: [v2\n")
    human.commit_push("oops")
    before = head(repo)
    with pytest.raises(BrokenManifestError) as info:
        do_propose(repo, forge)
    assert "apps/det/promotion.yaml" in str(info.value)
    assert head(repo) == before and head(repo, BRANCH) == ""
    assert forge.list_prs(None) == []


def test_second_version_gets_its_own_pr_and_numbers_grow(repo, forge, opened):
    files = candidate_files()
    files["apps/det/deployment-v3.yaml"] = deployment("v3", "33" * 32)
    del files["apps/det/deployment-v2.yaml"]
    files["apps/det/destinationrule.yaml"] = manifests.destination_rule("det", "v1", "v3")
    other = propose(
        repo, "det", "mlops/det-v3", files, "promote(det): v3", REPORT, forge, backoff=FAST
    )
    assert other.status == "opened" and other.pr.number == 2
    assert forge.find_pr(BRANCH).number == 1
    assert forge.find_pr("mlops/det-v3").number == 2
    assert forge.find_pr("nope") is None
    with pytest.raises(PullRequestNotFound):
        forge.get_pr(9)


def test_deleted_unmerged_branch_reads_as_closed(repo, forge, human, opened):
    # The guard refuses deletions; lift it for this one human action.
    git(repo, "config", "receive.denyDeletes", "false")
    (repo / "hooks" / "pre-receive").unlink()
    human.git("push", "-q", "origin", f":refs/heads/{BRANCH}")
    assert forge.get_pr(1).state == "closed"


OPENER = """
import sys
from gitops.forges.local import LocalForge
from gitops.writeback import Backoff, Message, WriteBack
repo, tag = sys.argv[1:3]
branch = f"feature-{tag}"
WriteBack(repo).commit(branch, lambda root: (root / f"{tag}.txt").write_text(tag), Message(tag),
                       create_from="main")
forge = LocalForge(repo, backoff=Backoff(tries=20, first=0.01, cap=0.05))
print(forge.open_pr(branch, "main", f"pr {tag}", "body").number)
forge.close()
"""


def test_two_processes_opening_prs_get_distinct_numbers(repo):
    root = pathlib.Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(repo), tag],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b", "c")
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sorted(int(out) for out, _ in outs) == [1, 2, 3]
    forge = LocalForge(repo)
    assert sorted(p.branch for p in forge.list_prs()) == ["feature-a", "feature-b", "feature-c"]
    forge.close()


def _roll_back_det(repo):
    """main back to v1 alone, as `mlops rollback` leaves it (the gitops room only sees files)."""
    def change(root):
        layout.write_model(
            root, "det",
            [manifests.destination_rule("det", "v1"),
             manifests.virtual_service("det", 100, 0, canary=False)],
            extra={"promotion.yaml": {"phase": "promoted", "stable": "v1"}},
            remove_versions=["v2"])
    WriteBack(repo, backoff=FAST).commit("main", change, Message("rollback(det): v1"))


def test_a_merged_version_proposed_again_gets_a_fresh_branch_and_pr(repo, forge, opened):
    approve(repo, 1, forge)
    _roll_back_det(repo)
    # Without the caller's word that the version no longer serves, a merged PR is final.
    assert do_propose(repo, forge).status == "merged"
    assert git(repo, "branch", "--list", f"{BRANCH}-*") == ""

    def again():
        return propose(repo, "det", BRANCH, candidate_files(), "promote(det): v2 again", REPORT,
                       forge, backoff=FAST, reopen_merged=True)

    second = again()
    assert (second.status, second.branch, second.pr.number) == ("opened", f"{BRANCH}-2", 2)
    assert "PR #1 for 'mlops/det-v2' was merged earlier" in second.message
    assert forge.get_pr(2).state == "open" and forge.get_pr(1).state == "merged"
    # Idempotent: the re-proposal finds its own branch and PR.
    repeat = again()
    assert (repeat.status, repeat.branch, repeat.pr.number) == ("unchanged", f"{BRANCH}-2", 2)
    # Merged and rolled back once more: the next suffix.
    approve(repo, 2, forge)
    _roll_back_det(repo)
    third = again()
    assert (third.status, third.branch, third.pr.number) == ("opened", f"{BRANCH}-3", 3)


def test_pr_show_and_list_never_send_a_pushed_control_sequence_to_the_terminal(
        repo, forge, capsys, opened):
    """Issue 41, finding 17: the PR body (built from the pushed repo's dataset and class
    names), its title and comments reached the reviewer's terminal raw: a CSI cursor
    move rewrote the lines above, an OSC 52 wrote the clipboard. They are shown escaped."""
    attack = "\x1b[2A\x1b[2Kall checks passed\x1b]52;c;ZXZpbA==\x07\rok\u202e"
    forge.update_pr(1, title=f"promote(det): v2 {attack}",
                    body=f"**Data: w47 → {attack}**\n| mAP@0.5 | 0.71 | 0.69 |\r\n")
    forge.comment(1, f"lgtm {attack}")
    assert cli(["pr", "show", "1", "--repo", str(repo)]) == 0
    assert cli(["pr", "list", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in out, repr(raw)
    assert "\\x1b[2A\\x1b[2Kall checks passed\\x1b]52;c;ZXZpbA==\\x07\\x0dok\\u202e" in out
    assert "| mAP@0.5 | 0.71 | 0.69 |\n" in out  # lines stay lines
