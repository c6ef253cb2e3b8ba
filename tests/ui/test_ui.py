"""`mlops ui`: page data from the rooms' readers, and the routes over HTTP.

A real GitOps repo (`tests/fixtures/ui.py`: v1 stable, v2 proposed as a PR on
the local forge); every action goes through the same function as its CLI
command, so the commits and refusals checked here are the CLI's.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess
import time

import pytest
import yaml
from starlette.testclient import TestClient

from cogs.files import atomic_write_json
from contracts.errors import MlopsError
from gitops import layout
from gitops.repo import Mirror
from local.platform.workdir import PlatformConfig, Workdir, save_config
from mlops.ui.app import UiConfig, create_app
from mlops.ui.manifests import ui_manifests
from mlops.ui.models import model_view
from mlops.ui.runs import runs_view
from mlops.ui.source import GitopsSource
from serving import manifests
from tests.fixtures.common import free_port
from tests.fixtures.prometheus import OpenMetrics
from tests.fixtures.ui import UiRepo, make_ui_repo
from workflows import run_events

HEADERS = {"X-Mlops-UI": "1"}


@pytest.fixture(scope="module")
def ui_template(tmp_path_factory: pytest.TempPathFactory) -> UiRepo:
    """The UI's repo (v1 in production, v2 proposed), made once per module: two proposals,
    each a clone, commit and push."""
    return make_ui_repo(tmp_path_factory.mktemp("ui-template"))


@pytest.fixture
def ui_repo(ui_template: UiRepo, tmp_path) -> UiRepo:
    """This module's `ui_repo`: the test's own copy of `ui_template`'s bare repo (plain
    files: the copy is a clone; the PR's record is in it, on `mlops-prs`)."""
    gitops = shutil.copytree(ui_template.gitops, tmp_path / "gitops.git", symlinks=True)
    return dataclasses.replace(ui_template, gitops=pathlib.Path(gitops))


@pytest.fixture
def client(ui_repo):
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), user="ada"))
    with TestClient(app) as c:
        yield c


def _det(client) -> dict:
    doc = client.get("/api/models").json()
    return next(m for m in doc["models"] if m["name"] == "det")


def test_models_page_reads_weights_phase_and_timeline(ui_repo):
    src = GitopsSource(str(ui_repo.gitops))
    try:
        snap = src.snapshot()
        view = model_view(snap.models["det"], src.history("det"))
    finally:
        src.close()
    assert view["canary"]["phase"] == "idle" and view["canary"]["stable"] == "v1"
    assert [(v["version"], v["weight"], v["role"]) for v in view["versions"]] == \
        [("v1", 100, "stable")]
    assert view["versions"][0]["weights_sha256"]
    assert view["timeline"][0]["decision"] == "merge"


def test_approve_merges_and_starts_the_canary(client, ui_repo):
    prs = client.get("/api/proposals").json()["proposals"]
    assert [(p["number"], p["state"]) for p in prs] == [(ui_repo.pr, "open"), (1, "merged")]
    assert prs[0]["record"]["version"] == "v2" and "| " in prs[0]["body"]
    res = client.post(f"/api/proposals/{ui_repo.pr}/approve", json={"by": "Grace"},
                      headers=HEADERS)
    assert res.status_code == 200, res.text
    assert "merged PR #2" in res.json()["message"] and "Grace" in res.json()["message"]
    det = _det(client)
    assert det["canary"]["phase"] == "waiting" and det["canary"]["candidate"] == "v2"
    pr = client.get("/api/proposals").json()["proposals"][0]
    assert pr["state"] == "merged" and "Approved by Grace" in pr["comments"][-1]["body"]
    # the split the controller commits shows on the next read
    ui_repo.step_to(10)
    weights = {v["version"]: v["weight"] for v in _det(client)["versions"]}
    assert weights == {"v1": 90, "v2": 10}
    step = _det(client)["timeline"][0]
    assert step["decision"] == "step" and step["step"] == "0->10"
    assert step["checks"][0]["threshold"] == 0.01


def test_approve_refuses_weights_that_changed(client, ui_repo, tmp_path):
    # someone swaps the digest on the proposal branch: the CLI's refusal, as a 409
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "mlops/propose/det/v2", str(ui_repo.gitops),
                    str(work)], check=True)
    path = work / "apps/det/deployment-v2.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["annotations"]["mlops.paddle.org/weights-sha256"] = "0" * 64
    path.write_text(yaml.safe_dump(doc))
    env = ["-c", "user.name=Eve", "-c", "user.email=eve@example.com"]
    subprocess.run(["git", *env, "commit", "-qam", "swap"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD"], cwd=work, check=True)
    res = client.post(f"/api/proposals/{ui_repo.pr}/approve", json={}, headers=HEADERS)
    assert res.status_code == 409
    assert "refusing to merge" in res.json()["error"] and "Traceback" not in res.text
    assert client.get("/api/proposals").json()["proposals"][0]["state"] == "open"


def test_pause_is_a_commit_and_bad_steps_are_messages(client, ui_repo):
    res = client.post("/api/models/det/pause", json={}, headers=HEADERS)
    assert res.status_code == 400 and res.json()["error"] == "det: nothing to pause (phase idle)"
    client.post(f"/api/proposals/{ui_repo.pr}/approve", json={}, headers=HEADERS)
    ui_repo.step_to(10)
    res = client.post("/api/models/det/pause", json={"by": "Grace"}, headers=HEADERS)
    assert res.status_code == 200 and res.json()["message"].startswith("det: paused at 10%")
    with Mirror(ui_repo.gitops) as mirror:
        head = mirror.log(mirror.sha("main") or "")[0]
    assert head.trailers["Mlops-Decision"] == "pause/human"
    assert head.trailers["Mlops-Requested-By"] == "Grace"
    assert _det(client)["canary"]["paused"] is True
    res = client.post("/api/models/det/approve", json={}, headers=HEADERS)
    assert res.status_code == 400 and "nothing to approve (phase paused)" in res.json()["error"]
    res = client.post("/api/models/det/resume", json={}, headers=HEADERS)
    assert res.status_code == 200 and "resumed" in res.json()["message"]
    assert client.post("/api/models/det/fly", json={}, headers=HEADERS).status_code == 400


def test_actions_need_the_header_token_and_can_be_off(ui_repo):
    def post(config, headers):
        with TestClient(create_app(config)) as c:
            return c.post("/api/models/det/pause", json={}, headers=headers)

    base = {"gitops": str(ui_repo.gitops)}
    assert post(UiConfig(**base), {}).status_code == 403
    assert post(UiConfig(**base, actions=False), HEADERS).status_code == 403
    assert post(UiConfig(**base, token="s3cret"), HEADERS).status_code == 401
    ok = post(UiConfig(**base, token="s3cret"), {**HEADERS, "Authorization": "Bearer s3cret"})
    assert ok.status_code == 400  # past the guard: the canary's own refusal (idle)
    proxied = UiConfig(**base, proxy_user=True)
    assert post(proxied, HEADERS).status_code == 401
    with TestClient(create_app(UiConfig(**base))) as c:
        assert c.get("/api/models/det/pause").status_code == 405


def test_static_page_ships_every_asset_and_names_only_relative_urls(client):
    page = client.get("/").text
    assert 'src="static/app.js"' in page and 'href="static/style.css"' in page
    for asset in ("static/app.js", "static/style.css"):
        res = client.get(f"/{asset}")
        assert res.status_code == 200
        assert "http://" not in res.text and "https://" not in res.text
    assert "http" not in page.replace('charset="utf-8"', "")


def test_runs_page_reads_the_runs_own_records(tmp_path):
    out = tmp_path / "run1"
    out.mkdir()
    (out / "train.log").write_text("config: total_steps=40\nstep=10 epoch=0 loss=0.9\n")
    run_events.append(out, "run_started", workflow="wf")
    run_events.append(out, "task_started", task="prepare", log=str(out / "prep.log"))
    run_events.append(out, "task_finished", task="prepare", phase="Succeeded", seconds=1.5)
    run_events.append(out, "task_started", task="train", log=str(out / "train.log"))
    runs = runs_view([out])
    assert runs[0]["status"] in ("Running", "Died")
    assert [(s["task"], s["state"]) for s in runs[0]["steps"]] == \
        [("prepare", "Succeeded"), ("train", "Running")]
    assert runs[0]["steps"][1]["training"] == {"step": 10, "total": 40, "epoch": 0, "loss": 0.9}
    app = create_app(UiConfig(gitops=str(tmp_path / "none.git"), runs=[out]))
    with TestClient(app) as c:
        assert c.get("/api/runs").json()["runs"][0]["steps"][1]["task"] == "train"
        assert "loss=0.9" in c.get("/api/log", params={"path": str(out / "train.log")}).text
        res = c.get("/api/log", params={"path": "/etc/passwd"})
        assert res.status_code == 400 and "not a log" in res.json()["error"]


def test_manifests_are_read_only_unless_actions_are_enabled():
    deployment, service = ui_manifests(gitops_url="https://git.example.com/gitops.git")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--read-only" in args and service["kind"] == "Service"
    with pytest.raises(MlopsError):
        ui_manifests(gitops_url="x", actions=True)
    *_, deployment, _ = ui_manifests(gitops_url="x", actions=True, token_secret="ui-token")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--read-only" not in container["args"]
    assert {e["name"] for e in container["env"]} >= {"MLOPS_UI_TOKEN", "MLOPS_GIT_TOKEN"}


def _model_series(now: float) -> str:
    """The model server's own series for the last two minutes, 10 req/s per version:
    v1 all fast, v2 1 % errors and every answer slower than 0.05 s (up to 0.5 s)."""

    om = OpenMetrics()
    for i, tick in enumerate(range(-120, 1, 5)):
        for version, errors, slow in (("v1", 0.0, False), ("v2", 0.01, True)):
            total = 50.0 * i
            labels = {"model_name": "det", "model_version": version}
            for code, n in (("200", total * (1 - errors)), ("500", total * errors)):
                om.add("model_requests", "counter", "model_requests_total",
                       {**labels, "status_code": code}, now + tick, n)
            for le, n in (("0.05", 0 if slow else total), ("0.5", total), ("+Inf", total)):
                om.add("model_request_duration_seconds", "histogram",
                       "model_request_duration_seconds_bucket", {**labels, "le": le},
                       now + tick, n)
    return om.text()


def test_live_rates_per_version_come_from_prometheus(ui_repo, prometheus_replay):
    """A real Prometheus holding the last two minutes (backfilled), read through the
    controller's preset (`promotion.metrics.live`, the one home of the live rates)."""

    url = prometheus_replay(_model_series(time.time()))
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), prometheus=url))
    with TestClient(app) as c:
        c.post(f"/api/proposals/{ui_repo.pr}/approve", json={}, headers=HEADERS)
        live = {v["version"]: v["live"] for v in _det(c)["versions"]}
    # the window ends at the read, a few seconds after the last sample: rates run a bit low
    assert live["v1"]["rate"] == pytest.approx(10.0, rel=0.15)
    assert live["v1"]["error_rate"] == 0.0 and live["v1"]["p99_ms"] < 50
    assert live["v2"]["rate"] == pytest.approx(10.0, rel=0.15)
    assert live["v2"]["error_rate"] == pytest.approx(0.01, rel=0.05)
    assert live["v2"]["p99_ms"] > 400

    gone = f"http://127.0.0.1:{free_port()}"
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), prometheus=gone))
    with TestClient(app) as c:  # Prometheus gone: a note on the page, not an error
        versions = _det(c)["versions"]
    assert "unreachable" in versions[0]["live"]["error"]


def test_models_page_shows_what_the_local_platform_serves(ui_repo, tmp_path):
    wd = Workdir(tmp_path / "platform")
    save_config(wd, PlatformConfig(gitops=str(ui_repo.gitops), prometheus_port=1))
    atomic_write_json(wd.status, {"models": {"det": {"versions": {"v1": {
        "phase": "ready", "ready": True, "haproxy_weight": 100, "pid": None, "restarts": 0}}}}})
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), workdir=wd.root))
    with TestClient(app) as c:
        doc = c.get("/api/models").json()
    v1 = doc["models"][0]["versions"][0]
    assert v1["served"] == {"haproxy_weight": 100, "phase": "ready", "ready": True, "restarts": 0}
    assert doc["platform_error"] is None
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), workdir=tmp_path / "nothing"))
    with TestClient(app) as c:
        assert "no platform in" in c.get("/api/models").json()["platform_error"]


def test_canary_reports_are_linked_and_served_from_the_controller_dir(ui_repo, tmp_path):
    folder = tmp_path / "controller" / "rollouts" / "det" / "v2"
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("# det v2: promoted\n")
    (folder / "timeline.jsonl").write_text("{}\n")
    app = create_app(UiConfig(gitops=str(ui_repo.gitops), reports=tmp_path / "controller"))
    with TestClient(app) as c:
        links = _det(c)["reports"]
        assert links == [{"candidate": "v2", "file": "report.md",
                          "url": "reports/det/v2/report.md"}]
        assert c.get("/reports/det/v2/report.md").text == "# det v2: promoted\n"
        assert c.get("/reports/det/v2/timeline.jsonl").status_code == 404
        assert c.get("/reports/det/v9/report.md").status_code == 404


def test_rollback_is_the_cli_rollback_and_its_refusal_is_a_message(client, ui_repo):
    res = client.post("/api/models/det/rollback", json={"by": "Grace"}, headers=HEADERS)
    assert res.status_code == 404 and "Traceback" not in res.text  # NOT_FOUND: no version
    assert res.json()["error"] == ("det: no earlier stable version in the GitOps history "
                                   "(only v1 was ever stable); nothing to roll back to")
    client.post(f"/api/proposals/{ui_repo.pr}/approve", json={}, headers=HEADERS)
    ui_repo.step_to(100, promote=True)
    assert _det(client)["canary"]["stable"] == "v2"
    res = client.post("/api/models/det/rollback", json={"by": "Grace"}, headers=HEADERS)
    assert res.status_code == 200, res.text
    assert ui_repo.state().stable == "v1"
    with Mirror(ui_repo.gitops) as mirror:
        head = mirror.log(mirror.sha("main") or "")[0]
    assert head.trailers["Mlops-Decision"] == "rollback/human"
    assert head.trailers["Mlops-Requested-By"] == "Grace"


def test_a_split_the_controller_refuses_is_shown_on_the_models_page():
    """Issue 27: a hand-edited weight of 150 is named (file and field) on the page, as
    `mlops canary status` and the controller's log name it."""

    vs = manifests.virtual_service("det", 90, 10, canary=True)
    good = layout.ModelState(model="det", destination_rule=manifests.destination_rule(
        "det", "v1", "v2"), virtual_service=vs)
    assert model_view(good, [])["split_error"] is None
    vs["spec"]["http"][0]["route"][1]["weight"] = 150
    refused = model_view(good, [])["split_error"]
    assert refused.startswith("refused: apps/det/virtualservice.yaml: route weight 150")
