"""Hosted forges (GitHub, GitLab, Gitea) against hand-written fake servers.

The real services cannot be reached from the machines this suite runs on, so
each backend talks to a small threaded HTTP server (tests/fixtures/gitops.py,
`FakeForge`) that speaks the subset of that forge's REST API we use: paths,
payloads, status codes, pagination headers and rate-limit answers. Git stays
real: the end-to-end test pushes to a real bare repo and only the PR API is fake.
"""

import pytest

from gitops import layout
from gitops.approval import approve
from gitops.errors import DigestMismatchError, ForgeError, PullRequestNotFound, UnknownForgeError
from gitops.forges import registry
from gitops.forges._http import check_api_url
from gitops.forges.base import Forge
from gitops.forges.registry import create
from gitops.proposal import parse_record, propose
from gitops.writeback import Message, WriteBack
from mlops.cli import main as cli
from serving import manifests
from tests.fixtures.gitops import FAST, FakeForge, git, head, make_forge


def sleeps():
    recorded = []
    return recorded, recorded.append


def test_backends_satisfy_the_protocol(fake_forge):
    assert isinstance(make_forge(fake_forge.flavour, fake_forge), Forge)


def test_open_is_idempotent_and_find_pages_through(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge)
    for i in range(5):  # other people's PRs, so pagination (2 per page) is needed
        fake_forge.add_pr(f"feature-{i}")
    pr = forge.open_pr("mlops/det-v2", "main", "promote(det): v2", "report")
    assert (pr.number, pr.state, pr.branch, pr.base, pr.body) == (
        6,
        "open",
        "mlops/det-v2",
        "main",
        "report",
    )
    assert pr.url and pr.head_sha
    again = forge.open_pr("mlops/det-v2", "main", "promote(det): v2", "report")
    assert again.number == 6 and len(fake_forge.prs) == 6
    assert forge.find_pr("mlops/det-v2").number == 6
    assert forge.find_pr("feature-0").number == 1  # last page
    assert forge.find_pr("nobody") is None
    assert len(forge.list_prs("open")) == 6
    gets = [p for m, p in fake_forge.requests if m == "GET" and "page=" in p]
    assert gets, "pagination was never followed"


def test_open_adopts_a_pr_created_meanwhile(fake_forge, monkeypatch):
    """The forge says 'already exists' (422/409): we return that PR, no duplicate."""
    forge = make_forge(fake_forge.flavour, fake_forge)
    number = fake_forge.add_pr("mlops/det-v2")
    real_find = forge.find_pr
    calls = []

    def racing_find(branch):
        calls.append(branch)
        return None if len(calls) == 1 else real_find(branch)

    monkeypatch.setattr(forge, "find_pr", racing_find)
    pr = forge.open_pr("mlops/det-v2", "main", "t", "b")
    assert pr.number == number and len(fake_forge.prs) == 1


def test_merged_on_the_forge_is_detected(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge)
    pr = forge.open_pr("mlops/det-v2", "main", "t", "b")
    assert forge.get_pr(pr.number).state == "open"
    fake_forge.merge_by_hand(pr.number)
    merged = forge.get_pr(pr.number)
    assert merged.state == "merged" and merged.merge_commit
    assert [p.number for p in forge.list_prs("merged")] == [pr.number]
    assert forge.list_prs("open") == []
    assert forge.merge(pr.number).state == "merged"  # merging again is a no-op
    assert fake_forge.merge_calls == []


def test_closed_unmerged(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge)
    number = fake_forge.add_pr("x", state="closed")
    assert forge.get_pr(number).state == "closed"
    with pytest.raises(ForgeError, match="closed"):
        forge.merge(number)


def test_comment_and_update(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge)
    pr = forge.open_pr("b", "main", "t", "old report")
    forge.comment(pr.number, "rolled back: error rate 7% > 1%")
    assert fake_forge.comments[pr.number] == ["rolled back: error rate 7% > 1%"]
    updated = forge.update_pr(pr.number, body="new report")
    assert updated.body == "new report" and forge.get_pr(pr.number).body == "new report"


def test_merge_pins_the_verified_head(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge)
    pr = forge.open_pr("b", "main", "t", "body")
    with pytest.raises(ForgeError, match="409"):
        forge.merge(pr.number, head_sha="0" * 40)
    assert forge.get_pr(pr.number).state == "open"
    merged = forge.merge(pr.number, head_sha=pr.head_sha)
    assert merged.state == "merged"
    assert fake_forge.merge_calls[-1] == {"number": pr.number, "sha": pr.head_sha}


def test_rate_limit_waits_as_told_then_succeeds(fake_forge):
    recorded, sleep = sleeps()
    forge = make_forge(fake_forge.flavour, fake_forge, sleep=sleep)
    fake_forge.limit_next = 2
    fake_forge.limit_wait = 3
    pr = forge.open_pr("b", "main", "t", "body")
    assert pr.number == 1
    assert len(recorded) == 2 and all(0 < s <= 3 for s in recorded)


def test_rate_limit_beyond_patience_is_a_clear_error(fake_forge):
    recorded, sleep = sleeps()
    forge = make_forge(fake_forge.flavour, fake_forge, sleep=sleep, max_wait=10)
    fake_forge.limit_next = 1
    fake_forge.limit_wait = 600
    with pytest.raises(ForgeError, match=r"rate limited on GET .*retry in"):
        forge.find_pr("b")
    assert recorded == []


def test_bad_token_names_the_variable(fake_forge):
    forge = make_forge(fake_forge.flavour, fake_forge, token="wrong")
    env = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}
    with pytest.raises(ForgeError, match=env[fake_forge.flavour]) as info:
        forge.list_prs()
    assert "wrong" not in str(info.value)


def test_token_from_environment(fake_forge, monkeypatch):
    env = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}
    monkeypatch.setenv(env[fake_forge.flavour], "t0ken-not-real")
    forge = registry.create(fake_forge.flavour, "o/r", api_url=fake_forge.api_url)
    assert forge.list_prs() == []


def test_missing_pr_is_not_found(fake_forge):
    with pytest.raises(PullRequestNotFound):
        make_forge(fake_forge.flavour, fake_forge).get_pr(42)


def test_unknown_forge_names_the_choices(capsys):
    with pytest.raises(UnknownForgeError) as info:
        registry.create("bitbucket", "o/r")
    assert (
        str(info.value) == "unknown forge 'bitbucket'; choose one of: gitea, github, gitlab, local"
    )
    assert info.value.exit_code == 2
    assert cli(["pr", "list", "--forge", "bitbucket", "--repo", "/nowhere"]) == 2
    assert "choose one of: gitea, github, gitlab, local" in capsys.readouterr().err


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("github", lambda *a, **k: None)


SHA = "22" * 32


@pytest.fixture
def github_fake(guarded_repo):
    """GitHub fake whose PR heads are the real branch tips of the bare repo."""
    fake = FakeForge(
        "github", resolve_sha=lambda branch: head(guarded_repo, branch) or "0" * 40
    ).start()
    try:
        yield fake
    finally:
        fake.stop()


def test_propose_and_approve_through_github_api_with_real_git(guarded_repo, github_fake, tmp_path):
    """Branch and digest check are real git; only the PR API is the fake GitHub."""

    WriteBack(guarded_repo, backoff=FAST).commit(
        "main",
        lambda root: layout.write_model(
            root,
            "det",
            [
                manifests.service("det"),
                manifests.destination_rule("det", "v1"),
                manifests.virtual_service("det", 100, 0, canary=False),
                manifests.deployment(
                    "det", "v1", image="i", model_uri="file:///m/v1", weights_sha256="11" * 32
                ),
            ],
        ),
        Message("deploy(det): v1"),
    )
    forge = make_forge("github", github_fake)
    files = {
        "apps/det/deployment-v2.yaml": manifests.deployment(
            "det", "v2", image="i", model_uri="file:///m/v2", weights_sha256=SHA
        ),
        "apps/det/destinationrule.yaml": manifests.destination_rule("det", "v1", "v2"),
        "apps/det/virtualservice.yaml": manifests.virtual_service("det", 90, 10),
    }
    first, second = [
        propose(
            guarded_repo,
            "det",
            "mlops/det-v2",
            files,
            "promote(det): v2",
            "report",
            forge,
            backoff=FAST,
        )
        for _ in range(2)  # the same proposal twice: the second must change nothing
    ]
    assert first.status == "opened" and second.status == "unchanged"
    assert len(github_fake.prs) == 1
    assert parse_record(forge.get_pr(1).body).weights_sha256 == SHA

    # Someone pushes different weights' digest to the branch: approval refuses, no merge call.
    clone = tmp_path / "ada"
    git(tmp_path, "clone", "-q", "-b", "mlops/det-v2", str(guarded_repo), str(clone))
    dep = clone / "apps/det/deployment-v2.yaml"
    dep.write_text(dep.read_text().replace(SHA, "ee" * 32))
    git(clone, "commit", "-q", "-am", "other weights")
    git(clone, "push", "-q", "origin", "mlops/det-v2")
    with pytest.raises(DigestMismatchError):
        approve(guarded_repo, 1, forge)
    assert github_fake.merge_calls == []

    # Restored by hand: still a branch the bot did not write alone, still refused.
    dep.write_text(dep.read_text().replace("ee" * 32, SHA))
    git(clone, "commit", "-q", "-am", "evaluated weights back")
    git(clone, "push", "-q", "origin", "mlops/det-v2")
    with pytest.raises(DigestMismatchError, match="edited by hand"):
        approve(guarded_repo, 1, forge)
    assert github_fake.merge_calls == []

    # Proposed again on a fresh branch (this guarded repo keeps every branch): approval
    # merges through the API with the verified head pinned.
    again = propose(guarded_repo, "det", "mlops/det-v2-again", files, "promote(det): v2",
                    "report", forge, backoff=FAST)
    number = again.pr.number
    result = approve(guarded_repo, number, forge)
    # the three files and the kustomization that lists them
    assert result.status == "merged" and "exactly the 4 file(s) proposed" in result.message
    assert github_fake.merge_calls == [
        {"number": number, "sha": head(guarded_repo, "mlops/det-v2-again")}]


def test_cli_lists_prs_of_a_hosted_forge(fake_forge, monkeypatch, capsys):
    env = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}
    monkeypatch.setenv(env[fake_forge.flavour], "t0ken-not-real")
    fake_forge.add_pr("mlops/det-v2", title="promote(det): v2")
    args = [
        "pr",
        "list",
        "--forge",
        fake_forge.flavour,
        "--forge-repo",
        "o/r",
        "--forge-api",
        fake_forge.api_url,
    ]
    assert cli(args) == 0
    assert "#1    open    mlops/det-v2 -> main  promote(det): v2" in capsys.readouterr().out
    assert cli(["pr", "list", "--forge", fake_forge.flavour]) == 2
    assert "needs --forge-repo" in capsys.readouterr().err


def test_forge_api_url_comes_from_the_gitops_url():
    # The pipeline's propose step and the controller get only the repo URL.
    from gitops.forges.registry import forge_api_url

    assert forge_api_url("github", "https://github.com/o/r.git") == "https://api.github.com"
    assert forge_api_url("github", "https://ghe.example.com/o/r.git") == (
        "https://ghe.example.com/api/v3"
    )
    assert forge_api_url("gitlab", "https://gitlab.com/g/r.git") == "https://gitlab.com/api/v4"
    assert forge_api_url("gitea", "https://tok@git.example.com:3000/o/r.git") == (
        "https://git.example.com:3000/api/v1"
    )
    assert forge_api_url("gitea", "/srv/gitops.git") is None


@pytest.mark.parametrize("flavour", ["gitlab", "gitea"])
def test_cli_finds_a_self_hosted_forge_from_the_repo_url(flavour, monkeypatch, capsys):
    fake = FakeForge(flavour).start()
    try:
        monkeypatch.delenv("MLOPS_FORGE_API", raising=False)
        monkeypatch.setenv(f"{flavour.upper()}_TOKEN", "t0ken-not-real")
        fake.add_pr("mlops/det-v2", title="promote(det): v2")
        repo_url = fake.api_url.split("/api/")[0] + "/o/r.git"
        assert cli(["pr", "list", "--forge", flavour, "--repo", repo_url]) == 0
        assert "#1    open    mlops/det-v2 -> main" in capsys.readouterr().out
    finally:
        fake.stop()


@pytest.mark.parametrize("forge", ["github", "gitlab", "gitea"])
@pytest.mark.parametrize("api", ["http://forge.example.com/api/v1", "ftp://forge.example.com",
                                 "https://", "forge.example.com/api"])
def test_forge_token_is_never_sent_in_the_clear(forge, api, monkeypatch):
    """Hardening finding 9: the API root came from the GitOps URL, and an http:// URL
    sent the token in a header in the clear. Refused before any request is made."""

    monkeypatch.setenv({"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN",
                        "gitea": "GITEA_TOKEN"}[forge], "tok")
    with pytest.raises(ForgeError, match="refusing to send the token there"):
        create(forge, "owner/name", api_url=api)


@pytest.mark.parametrize("api", ["https://forge.example.com/api/v1", "http://127.0.0.1:3000/api",
                                 "http://localhost:3000/api/v4"])
def test_https_and_loopback_api_roots_are_accepted(api):
    check_api_url(api, "gitea")  # no error
