"""Git write-back against real bare repositories (no fakes).

Every repo here carries the server-side guard from tests/fixtures/gitops.py:
``receive.denyNonFastForwards`` plus a pre-receive hook refusing non-fast-forward
updates and deletions. A forced push anywhere would fail these tests.
"""

import ast
import pathlib
import subprocess
import sys
import threading

import pytest

from gitops import layout
from gitops.errors import BrokenManifestError, ConflictError, GitError, PushRejectedError
from gitops.git import Git, Identity, redact, remote
from gitops.repo import Mirror
from gitops.writeback import Backoff, Message, WriteBack
from serving import manifests
from tests.fixtures.gitops import FAST, git, head

SHA = "cd" * 32


# Module-local names (plugin fixture names are global across the suite).
@pytest.fixture
def gitops_repo(guarded_repo):
    return guarded_repo


@pytest.fixture
def human(gitops_human):
    return gitops_human


def model_docs(stable=100, canary=0, versions=("v1",)):
    docs = [
        manifests.service("det"),
        manifests.destination_rule("det", versions[0], versions[1] if len(versions) > 1 else None),
        manifests.virtual_service("det", stable, canary, canary=len(versions) > 1),
    ]
    for v in versions:
        docs.append(
            manifests.deployment(
                "det", v, image="img", model_uri=f"file:///m/{v}", weights_sha256=SHA
            )
        )
    return docs


def write_weights(stable, canary):
    def change(root):
        layout.write_model(root, "det", model_docs(stable, canary, ("v1", "v2")))

    return change


def writer(repo, **kw):
    kw.setdefault("backoff", FAST)
    return WriteBack(repo, **kw)


def test_commit_has_subject_trailers_and_bot_identity(gitops_repo):
    wb = writer(gitops_repo)
    result = wb.commit(
        "main",
        lambda root: layout.write_model(root, "det", model_docs()),
        Message(
            "deploy(det): v1",
            body="First version.",
            trailers=[("Mlops-Decision", "deploy"), ("Mlops-Evidence", "map50=0.61")],
        ),
    )
    assert result.status == "committed" and result.commit == head(gitops_repo)
    with Mirror(gitops_repo) as mirror:
        (last, *_) = mirror.log("origin/main")
    assert last.subject == "deploy(det): v1"
    assert last.author_email == "mlops-bot@localhost"
    assert last.trailers == {"Mlops-Decision": "deploy", "Mlops-Evidence": "map50=0.61"}
    committer = git(gitops_repo, "log", "-1", "--format=%cn <%ce>", "main")
    assert committer == "mlops-bot <mlops-bot@localhost>"


def test_identity_is_configurable(gitops_repo):
    wb = writer(gitops_repo, identity=Identity("promo-bot", "promo@corp.example"))
    wb.commit("main", lambda root: (root / "note.txt").write_text("x"), Message("note"))
    assert (
        git(gitops_repo, "log", "-1", "--format=%an %ae", "main") == "promo-bot promo@corp.example"
    )


def test_same_desired_state_twice_makes_no_second_commit(gitops_repo, tmp_path):
    wb = writer(gitops_repo, workdir=tmp_path / "work")
    change = lambda root: layout.write_model(root, "det", model_docs())  # noqa: E731
    first = wb.commit("main", change, Message("deploy(det): v1"))
    second = wb.commit("main", change, Message("deploy(det): v1"))
    assert first.status == "committed"
    assert second.status == "unchanged" and second.commit == first.commit
    assert head(gitops_repo) == first.commit


def test_human_commit_between_fetch_and_push_survives(gitops_repo, human, tmp_path):
    """Ada pushes while our change is being made: our push is rejected, we rebase, retry."""
    wb = writer(gitops_repo)
    wb.commit(
        "main",
        lambda root: layout.write_model(root, "det", model_docs(90, 10, ("v1", "v2"))),
        Message("canary(det): 0% -> 10%"),
    )
    human.sync()
    ada_sha = {}
    delays = []

    def change(root):
        if not ada_sha:  # the race: Ada's commit lands after our fetch
            human.write(
                "apps/det/deployment-v1.yaml",
                human.read("apps/det/deployment-v1.yaml").replace("replicas: 1", "replicas: 3"),
            )
            ada_sha["sha"] = human.commit_push("scale det v1 to 3 replicas")
        write_weights(75, 25)(root)

    wb = WriteBack(gitops_repo, backoff=Backoff(tries=5, first=1.0, cap=30.0), sleep=delays.append)
    result = wb.commit(
        "main",
        change,
        Message("canary(det): 10% -> 25% (v2 over v1)", trailers=[("Mlops-Decision", "step")]),
    )
    assert result.status == "committed" and result.attempts == 2
    assert delays == [1.0]
    # Both commits are on main, Ada's untouched, ours on top: linear history.
    log = git(gitops_repo, "log", "--format=%H %ae %s", "main").splitlines()
    assert log[0].split()[1] == "mlops-bot@localhost"
    assert log[1].split()[0] == ada_sha["sha"]
    assert git(gitops_repo, "rev-list", "--merges", "main") == ""
    with Mirror(gitops_repo) as mirror:
        state_text = mirror.show("origin/main", "apps/det/deployment-v1.yaml")
        vs = mirror.show("origin/main", "apps/det/virtualservice.yaml")
    assert "replicas: 3" in state_text
    assert "weight: 25" in vs
    pushlog = (gitops_repo / "pushlog").read_text()
    assert ada_sha["sha"] in pushlog


def test_conflicting_edit_stops_with_file_named_and_remote_untouched(gitops_repo, human):
    wb = writer(gitops_repo)
    wb.commit("main", write_weights(90, 10), Message("canary(det): 0% -> 10%"))
    human.sync()

    def change(root):
        if head(gitops_repo) != ada_tip.get("sha"):
            # Ada rolls the canary back by hand at the same moment we step it up.
            human.write(
                "apps/det/virtualservice.yaml",
                human.read("apps/det/virtualservice.yaml")
                .replace("weight: 90", "weight: 100")
                .replace("weight: 10", "weight: 0"),
            )
            ada_tip["sha"] = human.commit_push("manual rollback of det canary")
        write_weights(75, 25)(root)

    ada_tip = {}
    with pytest.raises(ConflictError) as info:
        wb.commit("main", change, Message("canary(det): 10% -> 25%"))
    assert info.value.files == ["apps/det/virtualservice.yaml"]
    assert "apps/det/virtualservice.yaml" in str(info.value)
    assert info.value.exit_code == 3
    assert head(gitops_repo) == ada_tip["sha"]  # remote untouched by us


def test_bounded_retries_then_clear_error(gitops_repo, human):
    """The remote moves before every push: we give up after `tries` with a clear error."""
    human.sync()
    counter = {"n": 0}

    class MovingRemote(WriteBack):
        def _fetch(self, git_):
            super()._fetch(git_)
            counter["n"] += 1
            human.sync()
            human.write(f"human/{counter['n']}.txt", "x")
            human.commit_push(f"human edit {counter['n']}")

    delays = []
    wb = MovingRemote(
        gitops_repo, backoff=Backoff(tries=4, first=1.0, factor=2.0, cap=3.0), sleep=delays.append
    )
    with pytest.raises(PushRejectedError, match="rejected 4 times"):
        wb.commit("main", lambda root: (root / "ours.txt").write_text("ours"), Message("ours"))
    assert delays == [1.0, 2.0, 3.0]
    assert "ours.txt" not in git(gitops_repo, "ls-tree", "--name-only", "main")


def test_backoff_grows_to_the_cap():
    b = Backoff()
    assert [b.delay(n) for n in range(2, 11)] == [1, 2, 4, 8, 16, 30, 30, 30, 30]


def test_concurrent_writers_in_one_process_are_serialised(gitops_repo, tmp_path):
    """Eight threads write eight files: every write lands, exactly once."""
    errors = []

    def work(i):
        try:
            writer(gitops_repo, workdir=tmp_path / "work").commit(
                "main", lambda root: (root / f"f{i}.txt").write_text(str(i)), Message(f"write {i}")
            )
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    files = git(gitops_repo, "ls-tree", "--name-only", "main").split()
    assert {f"f{i}.txt" for i in range(8)} <= set(files)
    assert len(git(gitops_repo, "rev-list", "main").split()) == 9


RACER = """
import pathlib, sys
from gitops.writeback import Backoff, Message, WriteBack
repo, work, tag = sys.argv[1:4]
wb = WriteBack(repo, workdir=pathlib.Path(work), backoff=Backoff(tries=30, first=0.01, cap=0.05))
attempts = 0
for i in range(5):
    name = f"{tag}{i}.txt"
    r = wb.commit("main", lambda root: (root / name).write_text(name), Message(f"race {name}"))
    attempts += r.attempts
print(attempts)
"""


def test_two_processes_racing_all_commits_land(gitops_repo, tmp_path):
    """Two processes (separate work clones, no shared lock) write five commits each."""

    root = pathlib.Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(gitops_repo), str(tmp_path / f"w{t}"), t],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for t in ("a", "b")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    files = set(git(gitops_repo, "ls-tree", "--name-only", "main").split())
    assert {f"{t}{i}.txt" for t in "ab" for i in range(5)} <= files
    assert git(gitops_repo, "rev-list", "--count", "main") == "11"
    assert git(gitops_repo, "rev-list", "--merges", "main") == ""


def test_guard_refuses_a_forced_push(gitops_repo, human):
    """The server guard is real: a human's force push is refused, so ours would be too."""
    human.sync()
    human.git("commit", "-q", "--amend", "-m", "rewritten")
    out = human.git("push", "--force", "origin", "HEAD:refs/heads/main", check=False)
    assert human.git("rev-parse", "HEAD") != head(gitops_repo)
    del out


def test_no_force_push_code_path_exists():
    """No string in our code can make git force: --force, -f, lease, or a '+' refspec."""

    src = pathlib.Path(__file__).resolve().parents[2] / "gitops"
    forbidden = {
        "--force",
        "-f",
        "--force-with-lease",
        "--force-if-includes",
        "--mirror",
        "--delete",
        "-d",
    }
    checked = 0
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                "run",
                "out",
                "ok",
            ):
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if "push" in args:
                    checked += 1
                    for a in node.args:
                        text = a.value if isinstance(a, ast.Constant) else ast.unparse(a)
                        assert text not in forbidden, (path, text)
                        assert not str(text).lstrip("f\"'").startswith("+"), (path, text)
    assert checked >= 1  # the one push in writeback.py was found and inspected


def test_broken_yaml_in_repo_stops_change_and_commits_nothing(gitops_repo, human):
    writer(gitops_repo).commit(
        "main",
        lambda root: layout.write_model(root, "det", model_docs()),
        Message("deploy(det): v1"),
    )
    human.sync()
    human.write("apps/det/virtualservice.yaml", "spec:\n  http: [\n    - route: {\n")
    broken = human.commit_push("hand edit gone wrong")
    with pytest.raises(BrokenManifestError) as info:
        writer(gitops_repo).commit("main", write_weights(90, 10), Message("canary(det): 0% -> 10%"))
    assert "apps/det/virtualservice.yaml" in str(info.value)
    assert "line" in str(info.value)
    assert head(gitops_repo) == broken


def test_missing_remote_is_a_clear_error(tmp_path):
    with pytest.raises(GitError, match="nowhere.git"):
        writer(tmp_path / "nowhere.git").commit("main", lambda root: None, Message("x"))


def test_hook_rejection_is_not_retried(gitops_repo):
    hook = gitops_repo / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'policy: frozen for release' >&2\nexit 1\n")
    delays = []
    wb = WriteBack(gitops_repo, backoff=Backoff(tries=5), sleep=delays.append)
    with pytest.raises(GitError, match="frozen for release"):
        wb.commit("main", lambda root: (root / "x.txt").write_text("x"), Message("x"))
    assert delays == []


def test_credentials_stay_out_of_config_and_messages(tmp_path):
    r = remote("https://bot:s3cr3t@git.example.com/team/gitops.git")
    assert r.url == "https://git.example.com/team/gitops.git"
    # The token goes to the server it was written for, and nowhere else (issue 41).
    assert r.env == {"MLOPS_GIT_TOKEN": "s3cr3t", "MLOPS_GIT_USERNAME": "bot",
                     "MLOPS_GIT_HOSTS": "https://git.example.com"}
    assert redact("fatal: https://bot:s3cr3t@git.example.com/x failed") == (
        "fatal: https://***@git.example.com/x failed"
    )
    # A real failing clone: the token must appear neither in the error nor on disk.
    wb = WriteBack(
        "http://bot:s3cr3t@127.0.0.1:9/gitops.git", workdir=tmp_path / "w", backoff=Backoff(tries=1)
    )
    with pytest.raises(GitError) as info:
        wb.commit("main", lambda root: None, Message("x"))
    assert "s3cr3t" not in str(info.value)
    for path in (tmp_path / "w").rglob("*"):
        if path.is_file():
            assert b"s3cr3t" not in path.read_bytes(), path


def test_new_branch_from_base_and_orphan_side_branch(gitops_repo):
    wb = writer(gitops_repo)
    r1 = wb.commit(
        "proposal", lambda root: (root / "p.txt").write_text("p"), Message("p"), create_from="main"
    )
    assert git(gitops_repo, "rev-parse", "proposal^") == head(gitops_repo)
    r2 = wb.commit("side", lambda root: (root / "s.txt").write_text("s"), Message("s"))
    assert git(gitops_repo, "ls-tree", "--name-only", "side") == "s.txt"
    assert git(gitops_repo, "rev-list", "--count", "side") == "1"
    assert r1.status == r2.status == "committed"
    with pytest.raises(GitError, match="'nope' does not exist"):
        wb.commit("x", lambda root: None, Message("x"), create_from="nope")


def test_works_inside_a_git_hook_environment(gitops_repo, tmp_path, monkeypatch):
    """A post-receive hook sets GIT_DIR for *its* repo; our writes must not follow it."""
    other = tmp_path / "model.git"
    git(tmp_path, "init", "-q", "--bare", str(other))
    monkeypatch.setenv("GIT_DIR", str(other))
    monkeypatch.setenv("GIT_QUARANTINE_PATH", str(other / "objects"))
    result = writer(gitops_repo).commit(
        "main", lambda root: (root / "h.txt").write_text("h"), Message("from a hook")
    )
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_QUARANTINE_PATH")
    assert result.status == "committed" and head(gitops_repo) == result.commit
    assert git(other, "for-each-ref") == ""


def test_interrupted_work_clone_is_recovered(gitops_repo, tmp_path):
    """A crash mid-rebase leaves the persistent clone dirty; the next write cleans up."""
    wb = writer(gitops_repo, workdir=tmp_path / "w")
    wb.commit("main", lambda root: (root / "a.txt").write_text("1"), Message("a"))
    (clone,) = [p for p in (tmp_path / "w" / "clones").iterdir() if p.is_dir()]
    (clone / ".git" / "MERGE_HEAD").write_text(head(gitops_repo) + "\n")
    (clone / "a.txt").write_text("junk")
    (clone / "stray.txt").write_text("junk")
    result = wb.commit("main", lambda root: (root / "b.txt").write_text("2"), Message("b"))
    assert result.status == "committed"
    assert git(gitops_repo, "ls-tree", "--name-only", "main").split() == [
        "README.md",
        "a.txt",
        "apps",
        "argocd",
        "b.txt",
        "mlops-gitops.yaml",
    ]
    assert git(gitops_repo, "show", "main:a.txt") == "1"


def test_token_reaches_git_only_through_the_credential_helper(tmp_path):
    """git asks its credential helper; ours answers from the environment, argv stays clean."""
    from gitops.git import Git

    r = remote("https://ci-bot:s3cr3t@git.example.com/team/gitops.git")
    g = Git(tmp_path, credentials=r.env)
    assert not any("s3cr3t" in part for part in g._config)
    answer = g.run(
        "credential", "fill", input="protocol=https\nhost=git.example.com\npath=team/gitops.git\n\n"
    ).stdout
    assert "username=ci-bot" in answer.splitlines()
    assert "password=s3cr3t" in answer.splitlines()


def test_the_helper_answers_only_the_servers_the_token_is_for(tmp_path, monkeypatch):
    """Issue 41, finding 1: `CREDENTIAL_HELPER` answered any host, so whatever URL a step
    was handed (a pushed mlops.yaml's GitOps repo) received the token. Real git asks it."""
    from gitops.git import Git

    def asked(git: Git, host: str, protocol: str = "https") -> str:
        return git.run("credential", "fill", check=False,
                       input=f"protocol={protocol}\nhost={host}\npath=x.git\n\n").stdout

    # A token written in a URL: that URL's server only.
    g = Git(tmp_path, credentials=remote("https://ci-bot:s3cr3t@git.example.com/t.git").env)
    assert "password=s3cr3t" in asked(g, "git.example.com")
    for host, protocol in (("attacker.example", "https"), ("git.example.com:444", "https"),
                           ("git.example.com", "http")):
        assert "s3cr3t" not in asked(g, host, protocol), (host, protocol)
    # A pod's token with the platform's scope: a URL the step is handed widens nothing.
    monkeypatch.setenv("MLOPS_GIT_TOKEN", "p0d")
    monkeypatch.setenv("MLOPS_GIT_HOSTS", "https://git.example.com")
    handed = Git(tmp_path, credentials=remote("https://attacker.example/gitops.git").env)
    assert "p0d" not in asked(handed, "attacker.example")
    assert "password=p0d" in asked(handed, "git.example.com")
    # No scope set by anyone: the server of the URL the person running the command named.
    monkeypatch.delenv("MLOPS_GIT_HOSTS")
    named = Git(tmp_path, credentials=remote("https://git.example.com/gitops.git").env)
    assert "password=p0d" in asked(named, "git.example.com")
    assert "p0d" not in asked(named, "attacker.example")


def test_a_hung_git_is_stopped_with_a_clear_error(tmp_path):
    g = Git(tmp_path, timeout=0.3)
    with pytest.raises(GitError, match="did not finish within"):
        g.run("-c", "alias.hang=!sleep 1", "hang")  # a stand-in for a hung fetch
