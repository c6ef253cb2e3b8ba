"""Who may act through `mlops ui`, and as whom (issue 26, findings 1 and 3).

Finding 1: with `--proxy-user` any client that reached the port could approve
or promote as any name it put in one of three user headers. Now the person is
the ONE configured header, from a request that came through the proxy: by its
shared secret, or because the UI listens on loopback beside the proxy in its
pod (what `mlops ui manifests --proxy-user` renders: oauth2-proxy v7.15 as a
sidecar, which sets `X-Forwarded-User` itself and strips a client's copy,
oauth2-proxy/oauth2-proxy `pkg/middleware/headers.go` newStripHeaders and
`pkg/apis/options/legacy_options.go` `--skip-auth-strip-headers`, default true).
oauth2-proxy itself cannot run here (no Debian package); its flags are checked
against that source.

Finding 3: a carriage return in `by` wrote a second trailer
(`Mlops-Decision: rollback/controller`) into a human's pause; readers split
lines on it and kept the later key. Now every control character and Unicode
line separator is refused as a 400 (nothing committed), and trailers are read
line by LF only, first key wins.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from starlette.testclient import TestClient

from gitops.git import parse_trailers
from gitops.repo import Mirror
from mlops.cli import main
from mlops.ui.app import UiConfig, create_app
from mlops.ui.manifests import TOKEN_PATH
from tests.manifest_validation import validate_all

HEADERS = {"X-Mlops-UI": "1"}
SECRET = "proxy-s3cret"


def _tip(ui_repo) -> str:
    with Mirror(ui_repo.gitops) as mirror:
        return mirror.sha("main") or ""


def _state_of_pr(client: TestClient, number: int) -> str:
    prs = client.get("/api/proposals").json()["proposals"]
    return next(p["state"] for p in prs if p["number"] == number)


# -- finding 1 --------------------------------------------------------------------------

def test_a_client_naming_itself_in_a_user_header_is_refused(ui_repo):
    """The review's reproduction: `curl -X POST -H 'X-Mlops-UI: 1' -H 'X-Forwarded-User:
    platform-lead' -d '{}' .../api/proposals/2/approve` merged the PR."""
    config = UiConfig(gitops=str(ui_repo.gitops), proxy_user=True, proxy_secret=SECRET)
    url = f"/api/proposals/{ui_repo.pr}/approve"
    with TestClient(create_app(config)) as c:
        forged = c.post(url, json={}, headers={**HEADERS, "X-Forwarded-User": "platform-lead"})
        assert forged.status_code == 401 and "X-Mlops-Proxy-Secret" in forged.json()["error"]
        wrong = c.post(url, json={}, headers={**HEADERS, "X-Forwarded-User": "platform-lead",
                                              "X-Mlops-Proxy-Secret": "guess"})
        assert wrong.status_code == 401
        assert _state_of_pr(c, ui_repo.pr) == "open"
        # Another user header, even first in the old order, is not read at all.
        other = c.post(url, json={}, headers={**HEADERS, "X-Mlops-Proxy-Secret": SECRET,
                                              "X-Auth-Request-User": "platform-lead"})
        assert other.status_code == 401 and "X-Forwarded-User" in other.json()["error"]
        ok = c.post(url, json={"by": "platform-lead"}, headers={
            **HEADERS, "X-Mlops-Proxy-Secret": SECRET, "X-Auth-Request-User": "platform-lead",
            "X-Forwarded-User": "ada@example.com"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["message"].endswith("(approved by ada@example.com)")
        assert _state_of_pr(c, ui_repo.pr) == "merged"


def test_proxy_user_beyond_loopback_needs_the_proxys_proof(tmp_path, capsys, monkeypatch):
    # lazy (collection cost): uvicorn loads only when this runs
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("it started serving"))
    base = ["ui", "--gitops", str(tmp_path), "--workdir", str(tmp_path / "none"),
            "--host", "0.0.0.0", "--proxy-user"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "would trust a user header any client can send" in err and "--proxy-secret" in err
    assert main([*base, "--read-only", "--token", "t"]) == 2  # a token is not the proxy
    capsys.readouterr()


def test_manifests_put_oauth2_proxy_in_the_pod_and_the_ui_on_loopback(capsys):
    assert main(["ui", "manifests", "--gitops", "https://g/gitops.git", "--enable-actions",
                 "--proxy-user", "--proxy-env-secret", "ui-oidc"]) == 0

    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert validate_all(docs) == 5
    *_, deployment, service = docs
    pod = deployment["spec"]["template"]["spec"]
    ui, proxy = pod["containers"]
    args = ui["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1" and "ports" not in ui
    assert args[args.index("--proxy-header") + 1] == "X-Forwarded-User"
    port = args[args.index("--port") + 1]
    assert f"--upstream=http://127.0.0.1:{port}/" in proxy["args"]
    # The header is the proxy's own: it sets it and strips a client's copy (flags beat env).
    assert {"--pass-user-headers=true", "--skip-auth-strip-headers=true",
            "--pass-host-header=false"} <= set(proxy["args"])
    assert proxy["envFrom"] == [{"secretRef": {"name": "ui-oidc"}}]
    named = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in named  # the Service reaches the proxy
    # Its token (the button's readiness check) may only read the serving Deployments.
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == "mlops-ui"
    mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}  # the proxy calls no API
    assert {v["name"]: v for v in pod["volumes"]}[mounts[TOKEN_PATH]]["emptyDir"] == {}
    assert TOKEN_PATH not in {m["mountPath"] for m in ui.get("volumeMounts", [])}
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs[:3]] == [
        ("ServiceAccount", "mlops"), ("Role", "models"), ("RoleBinding", "models")]
    assert docs[1]["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"],
                                 "verbs": ["get"]},
                                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    for container in pod["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


# -- finding 3 --------------------------------------------------------------------------

FORGED = "eve\rMlops-Decision: rollback/controller"


def test_a_name_that_is_not_one_line_is_a_400_and_commits_nothing(ui_repo, capsys):
    """The review's reproduction: `{"by": "eve\rMlops-Decision: rollback/controller..."}`
    on Pause (token mode) made the human's pause read as a controller rollback; the same
    name from the proxy's header or `--by` is refused too. (With a token, `by` no longer
    names anyone -- finding 15, tests/ui/test_ui_safety.py -- so the names are sent to
    the UI without one, the only mode that still reads `by`.)"""
    auth = {**HEADERS, "Authorization": "Bearer t"}
    with TestClient(create_app(UiConfig(gitops=str(ui_repo.gitops)))) as c:
        assert c.post(f"/api/proposals/{ui_repo.pr}/approve", json={},
                      headers=HEADERS).status_code == 200
        ui_repo.step_to(10)  # a canary that can be paused
        before = _tip(ui_repo)
        # CR, LF (was a 500), U+2028, NEL, tab, NUL: each a line break to some reader
        for by in (FORGED, "eve\nMlops-Decision: rollback/controller", "eve\u2028x",
                   "eve\x85x", "eve\tx", "eve\x00"):
            res = c.post("/api/models/det/pause", json={"by": by}, headers=HEADERS)
            assert res.status_code == 400, (by, res.text)
            assert "control character" in res.json()["error"], by
            assert '"by"' in res.json()["error"], by
    with TestClient(create_app(UiConfig(gitops=str(ui_repo.gitops), token="t"))) as c:
        res = c.post("/api/models/det/pause", json={"by": FORGED}, headers=auth)
        assert res.status_code == 403, res.text  # a token names no one else
    proxied = UiConfig(gitops=str(ui_repo.gitops), proxy_user=True)  # on loopback
    with TestClient(create_app(proxied)) as c:
        res = c.post("/api/models/det/pause", json={}, headers={
            # NEL (U+0085): a line break to Python's str.splitlines, legal in a header
            **HEADERS, "X-Forwarded-User": "eve\x85Mlops-Decision: rollback/controller"
            .encode("latin-1")})
    assert res.status_code == 400 and "X-Forwarded-User" in res.json()["error"]
    assert main(["canary", "pause", "det", "--gitops", str(ui_repo.gitops), "--by", FORGED]) == 2
    err = capsys.readouterr().err
    assert "Mlops-Requested-By" in err and "control character" in err
    assert "Traceback" not in err and _tip(ui_repo) == before
    with TestClient(create_app(UiConfig(gitops=str(ui_repo.gitops), token="t",
                                        user="eve"))) as c:
        res = c.post("/api/models/det/pause", json={"by": "eve"}, headers=auth)
    assert res.status_code == 200, res.text


def test_trailers_written_before_the_fix_read_as_the_humans(tmp_path):
    """A commit as the old UI wrote it (git keeps the CR inside the line), and one with
    a key given twice: readers see one trailer per LF line, the first of each key."""
    work = tmp_path / "gitops"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    message = ("pause(det): requested by eve\n\n"
               "Mlops-Decision: pause/human\nMlops-Model: det\n"
               f"Mlops-Requested-By: {FORGED}\rMlops-Window: 2026-11-26T00:00:00Z\n"
               "Mlops-Decision: rollback/controller\n")
    env = ["-c", "user.name=eve", "-c", "user.email=eve@example.com"]
    subprocess.run(["git", *env, "commit", "-q", "--allow-empty", "-F", "-"], cwd=work,
                   input=message, text=True, check=True)
    with Mirror(work) as mirror:
        head = mirror.log(mirror.sha("main") or "")[0]
    assert head.trailers["Mlops-Decision"] == "pause/human"
    # Still a human's commit to the controller's anchor: no Mlops-Window of its own.
    assert "Mlops-Window" not in head.trailers
    assert head.trailers["Mlops-Requested-By"].startswith("eve\rMlops-Decision")

    assert parse_trailers("A: 1\rB: 2\nB: 3\nC: x\u2028D: 4") == {
        "A": "1\rB: 2", "B": "3", "C": "x\u2028D: 4"}
