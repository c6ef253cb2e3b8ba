"""Who acts (issue 32 item 4, issue 28): the merge the UI or `mlops pr approve --by`
makes is authored by the person who approved, through the one domain function
both call (`gitops.approval.approve_as`); the bot stays the committer. (The CLI's
`--by`: tests/gitops/test_gitops_local_pr.py::test_cli_list_show_approve.)

A real GitOps repo and the local forge (`tests/fixtures/ui.py`), no fakes.
"""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gitops.git import BOT_IDENTITY, Identity
from gitops.people import identity_of
from gitops.repo import Mirror
from mlops.ui.app import UiConfig, create_app
from tests.fixtures.gitops import make_forge


def _main_head(gitops):
    with Mirror(gitops) as mirror:
        head = mirror.sha("main") or ""
        info = mirror.log(head)[0]
        committer = mirror.git.run("log", "-1", "--format=%cn <%ce>", head).stdout.strip()
    return info, committer


def test_the_merge_made_from_the_ui_is_authored_by_who_approved(ui_repo):
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), user="ada"))
    with TestClient(app) as client:
        res = client.post(f"/api/proposals/{ui_repo.pr}/approve",
                          json={"by": "Grace Hopper <grace@example.com>"},
                          headers={"X-Mlops-UI": "1"})
    assert res.status_code == 200, res.text
    head, committer = _main_head(ui_repo.gitops)
    assert head.trailers.get("Mlops-Pull-Request") == str(ui_repo.pr)
    assert (head.author_name, head.author_email) == ("Grace Hopper", "grace@example.com")
    assert committer == f"{BOT_IDENTITY.name} <{BOT_IDENTITY.email}>"


@pytest.mark.parametrize("person, name, mail", [
    ("Ada", "Ada", "ada@users.mlops.invalid"),
    ("Grace Hopper", "Grace Hopper", "grace-hopper@users.mlops.invalid"),
    ("Lin <lin@example.org>", "Lin", "lin@example.org"),
    # a person is never the bot: the triggers skip the bot's commits
    ("x <mlops-bot@localhost>", "x", "not-mlops-bot@localhost"),
    ("   ", "human", "human@users.mlops.invalid"),
])
def test_identity_of_a_person(person, name, mail):
    assert identity_of(person).name == name and identity_of(person).email == mail


def test_a_hosted_forge_names_the_approver_in_the_merge_title(fake_forge):
    """GitHub, GitLab and Gitea merge as the token's owner (their merge APIs take a title
    or message, no author), so the approver is named there. Only the forge's REST API is
    a fake (`tests/fixtures/gitops.py`: a forge's hosted API cannot run here)."""

    forge = make_forge(fake_forge.flavour, fake_forge)
    pr = forge.open_pr("b", "main", "t", "body")
    forge.merge(pr.number, head_sha=pr.head_sha, author=Identity("Ada", "ada@example.com"))
    sent = fake_forge.merge_payloads[-1]
    title = sent.get("commit_title") or sent.get("MergeTitleField") or \
        sent.get("merge_commit_message")
    assert title and "(approved by Ada)" in title
