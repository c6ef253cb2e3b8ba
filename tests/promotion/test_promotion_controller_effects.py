"""What the controller does besides committing: webhook, /metrics, PR comment, Argo CD refresh.

Real: bare git repos, the local forge, an HTTP server standing in for the
webhook receiver (it is just an HTTP endpoint), the controller's own
prometheus_client server. Fake: the Kubernetes API server for the Argo CD
refresh -- no API server can run on this machine -- replaced by a small HTTP
server that answers the PATCH with a response recorded from a real API server
(an Argo CD Application as `kubectl get -o json` shows it) and records what it
received. The metric source is the scripted `RouterStub`, legitimate because
the decision and the Prometheus source are tested against a real Prometheus
elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import io
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests
import yaml

from contracts.traffic import set_subsets, set_weights
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from mlops.cli import build_parser
from mlops.cli import main as cli
from mlops.commands.controller import _manifests
from promotion.cluster.argocd import ArgoRefresher
from promotion.cluster.deploy import controller_manifests
from promotion.controller import Controller, ControllerConfig, _dedupe
from promotion.controller_metrics import ControllerMetrics
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import branch_name, propose
from promotion.reports.notify import Notifier
from promotion.reports.report import canary_summary, read_timeline
from serving import manifests
from tests.fixtures.common import free_port
from tests.fixtures.promotion_controller import (
    TEST_POLICY,
    Clock,
    RouterStub,
    decision_log,
    git,
    main_state,
    merge_to_main,
    merged_at,
)
from tests.manifest_validation import validate_manifest

# An Argo CD Application as the API server returns it after the patch (recorded, trimmed).
RECORDED_APPLICATION = {
    "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
    "metadata": {"name": "shapes", "namespace": "argocd", "uid": "3f0c1d5e-1c2b-4a57-9f7e-0d6a",
                 "resourceVersion": "48211", "generation": 7,
                 "annotations": {"argocd.argoproj.io/refresh": "hard"}},
    "spec": {"project": "default", "source": {"repoURL": "https://git.example.com/gitops.git",
                                              "path": "apps/shapes", "targetRevision": "main"},
             "destination": {"server": "https://kubernetes.default.svc", "namespace": "models"}},
    "status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}},
}


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []
    reply: dict = {}

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        type(self).received.append({"method": self.command, "path": self.path, "body": body,
                                    "content_type": self.headers.get("Content-Type")})
        data = json.dumps(type(self).reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PATCH = do_GET = _handle

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_recorder():
    """Start a loopback HTTP server that records requests; yields (url, received)."""
    handler = type("Handler", (_Recorder,), {"received": [], "reply": {"ok": True}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()


def _model_dir(root: pathlib.Path, version: str) -> pathlib.Path:
    folder = root / f"model-{version}"
    folder.mkdir()
    (folder / "inference.pdiparams").write_bytes(version.encode() * 64)
    (folder / "model.yaml").write_text(yaml.safe_dump({
        "name": "shapes", "version": version,
        "weights_sha256": hashlib.sha256(version.encode() * 64).hexdigest(),
        "metrics": {"map50": 0.9}}))
    return folder


def test_rollback_notifies_comments_on_the_pr_and_refreshes_argo(tmp_path, http_recorder):
    """Propose v1 and v2 for real (auto approval), let a failing v2 roll back."""

    url, hook = http_recorder
    hook.reply = RECORDED_APPLICATION
    repo = tmp_path / "gitops.git"
    init_repo(repo)
    forge = LocalForge(repo)
    policy = load_policy(TEST_POLICY)
    propose(_model_dir(tmp_path, "v1"), str(repo), forge, policy, approval="auto")
    v2 = propose(_model_dir(tmp_path, "v2"), str(repo), forge, policy, approval="auto")

    def commenter(model: str, candidate: str, body: str) -> None:
        pr = forge.find_pr(branch_name(model, candidate))
        forge.comment(pr.number, body)

    clock = Clock(merged_at(repo))
    controller = Controller(
        ControllerConfig(repo=str(repo), workdir=tmp_path / "work"),
        RouterStub(repo, rate=200.0, canary_errors=0.3), clock=clock,
        notifier=Notifier(f"{url}/hook"), refresher=ArgoRefresher("argocd", host=url),
        commenter=commenter)
    for _ in range(5):
        clock.advance(1.0)
        controller.tick()

    assert [c["subject"] for c in decision_log(repo)] == \
        ["rollback(shapes): 10% -> 0% (v2 over v1)"]
    posts = [r for r in hook.received if r["path"] == "/hook"]
    assert len(posts) == 2  # the candidate ready at 10 %, then the rollback
    assert "canary(shapes): 0% -> 10% (v2 over v1)" in json.loads(posts[0]["body"])["text"]
    text = json.loads(posts[1]["body"])["text"]
    assert "rollback(shapes): 10% -> 0% (v2 over v1)" in text and "report:" in text

    patches = [r for r in hook.received if r["method"] == "PATCH"]
    assert [p["path"] for p in patches] == \
        ["/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/shapes"]
    assert json.loads(patches[0]["body"]) == \
        {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}}
    assert patches[0]["content_type"] == "application/merge-patch+json"

    comments = forge.comments(v2.pr_number)
    assert len(comments) == 1
    assert "Outcome: rolled back" in comments[0]["body"]
    assert "rollouts/shapes/v2/report.md" in comments[0]["body"]


def test_controller_metrics_show_weight_phase_and_checks(canary_repo, tmp_path):
    metrics = ControllerMetrics()
    port = metrics.serve(0)
    try:
        clock = Clock(merged_at(canary_repo))
        controller = Controller(ControllerConfig(repo=str(canary_repo), workdir=tmp_path / "w"),
                                RouterStub(canary_repo), clock=clock, metrics=metrics)
        for _ in range(5):  # 4 windows at 10 % -> the first step, then one hold at 25 %
            clock.advance(1.0)
            controller.tick()
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        metrics.close()
    assert 'mlops_canary_weight_percent{model="shapes"} 25.0' in text
    assert 'mlops_canary_phase{model="shapes",phase="progressing"} 1.0' in text
    assert 'mlops_canary_commits_total{kind="step",model="shapes"} 1.0' in text
    assert 'mlops_canary_check_threshold{check="error_rate_limit",model="shapes"} 0.05' in text
    assert 'mlops_canary_check_value{check="error_rate_limit",model="shapes"} 0.0' in text
    assert 'mlops_canary_check_verdict{check="traffic",model="shapes"} 1.0' in text
    assert (
        'mlops_canary_last_decision_timestamp_seconds{cause="passed",kind="step",model="shapes"}'
        in text
    )


def test_cli_once_with_prometheus_down_holds_without_committing(promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2")

    time.sleep(1.2)  # one 1 s window is due
    proc = subprocess.run(
        [sys.executable, "-m", "mlops", "controller", "run", "--gitops", str(promotion_repo),
         "--prometheus", f"http://127.0.0.1:{free_port()}", "--once", "--interval", "1",
         "--workdir", str(tmp_path / "work")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "shapes: hold/fault: metric source fault: prometheus at" in proc.stdout
    assert decision_log(promotion_repo) == []


def test_controller_manifests_are_valid_and_minimal():
    docs = controller_manifests(gitops_url="https://git.example.com/gitops.git",
                                prometheus_url="http://prometheus.monitoring:9090",
                                webhook_secret="slack", applications=["shapes", "faces"])
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Role",
                                         "RoleBinding", "PersistentVolumeClaim", "Deployment",
                                         "Service"]
    for doc in docs:
        validate_manifest(doc)
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    role = by_name[("Role", "mlops-controller")]
    assert role["metadata"]["namespace"] == "argocd"
    # Only the named Applications (issue 16, finding 11: it could patch every one).
    assert role["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["applications"],
                              "resourceNames": ["shapes", "faces"], "verbs": ["get", "patch"]}]
    readiness = by_name[("Role", "mlops-controller-readiness")]
    assert readiness["metadata"]["namespace"] == "models"
    # Exactly what KubernetesReadiness reads: check() a Deployment and its pods, routed()
    # the Istio pair.
    assert readiness["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["networking.istio.io"],
         "resources": ["destinationrules", "virtualservices"], "verbs": ["get"]}]
    deployment = by_name[("Deployment", "mlops-controller")]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "mlops-controller"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    # The reports survive a restart: the work dir is the claim the manifests make.
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "mlops-controller"}} \
        in spec["volumes"]
    container = spec["containers"][0]
    args = container["args"]
    assert args[:2] == ["controller", "run"] and "--argocd-namespace" in args
    # The webhook URL is a secret: an env var from the Secret, never in argv.
    assert not any("WEBHOOK" in a or "slack" in a for a in args)
    assert {"name": "MLOPS_WEBHOOK_URL",
            "valueFrom": {"secretKeyRef": {"name": "slack", "key": "url"}}} in container["env"]


def test_without_applications_the_controller_gets_no_argo_cd_grant():
    """No names, no grant: an empty resourceNames would mean every Application."""
    docs = controller_manifests(gitops_url="https://git.example.com/gitops.git",
                                prometheus_url="http://prometheus.monitoring:9090")
    assert all(d["metadata"].get("namespace") != "argocd" for d in docs)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert (
        "--argocd-namespace" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    with pytest.raises(ValueError, match="Bad_Name"):
        controller_manifests(gitops_url="https://g/r.git", prometheus_url="http://p:9090",
                             applications=["Bad_Name"])


def test_controller_manifests_in_a_cluster_parse_with_the_real_cli(tmp_path):
    """Forge comments, readiness from the API, a forge-friendly git poll, pull secrets from
    the pipeline's settings file: every rendered arg is one `mlops controller run` accepts."""

    settings = tmp_path / "settings.yaml"
    settings.write_text("image_pull_secrets: [registry-a]\n")

    out = io.StringIO()
    args = build_parser().parse_args([
        "controller", "manifests", "--gitops", "https://gitea.example.com/ml/gitops.git",
        "--prometheus", "http://prometheus:9090", "--forge", "gitea", "--forge-secret", "gitea-t",
        "--settings", str(settings), "--image-pull-secret", "registry-b",
        "--models-namespace", "serving", "--reports-claim", ""])
    with contextlib.redirect_stdout(out):
        assert _manifests(args) == 0
    docs = list(yaml.safe_load_all(out.getvalue()))
    assert "PersistentVolumeClaim" not in [d["kind"] for d in docs]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "registry-b"}]
    container = spec["containers"][0]
    assert {"name": "GITEA_TOKEN", "valueFrom": {"secretKeyRef": {"name": "gitea-t",
                                                                  "key": "token"}}} \
        in container["env"]
    parsed = build_parser().parse_args(container["args"])
    assert isinstance(parsed, argparse.Namespace)
    assert (parsed.forge, parsed.readiness, parsed.readiness_namespace, parsed.git_poll) == \
        ("gitea", "kubernetes", "serving", 15.0)
    assert next(d for d in docs if d["kind"] == "Role" and
                d["metadata"]["namespace"] == "serving")["rules"][0]["verbs"] == ["get"]


def test_the_controller_fetches_git_at_most_once_per_git_poll(canary_repo, tmp_path):
    """A remote forge is not fetched every pass: with `git_poll` an hour, 15 passes fetch once,
    plus once right after each of the controller's own commits (counted on the real mirror)."""
    clock = Clock(merged_at(canary_repo))
    controller = Controller(ControllerConfig(repo=str(canary_repo), workdir=tmp_path / "w",
                                             git_poll=3600.0),
                            RouterStub(canary_repo), clock=clock)
    fetches = []
    real = controller.mirror.fetch
    controller.mirror.fetch = lambda *a, **k: (fetches.append(1), real(*a, **k))[1]
    for _ in range(15):
        clock.advance(1.0)
        controller.tick()
    commits = len(decision_log(canary_repo))
    assert commits == 4  # three steps and the promotion (the RouterStub is healthy)
    # The first pass, one after each own commit, and one for the finished rollout's report.
    assert len(fetches) == 1 + commits + 1
    controller.close()


def test_canary_cli_pause_and_errors(canary_repo, capsys):
    """In-process, through the console script's entry point (`mlops.cli.main`): its exit
    code and what it prints are the command's (an escaping exception would fail the test)."""
    assert cli(["canary", "pause", "shapes", "--gitops", str(canary_repo), "--by", "alice"]) == 0
    assert "shapes: paused at 10% (paused)" in capsys.readouterr().out

    assert git(canary_repo, "log", "-1", "--format=%s%n%(trailers:only)", "main").split("\n")[
        :3
    ] == ["pause(shapes): requested by alice", "Mlops-Decision: pause/human", "Mlops-Model: shapes"]
    assert main_state(canary_repo)["pause_reason"] == "paused by alice"
    assert cli(["canary", "resume", "nope", "--gitops", str(canary_repo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "apps/nope/promotion.yaml not found" in err and "Traceback" not in err


def test_canary_status_says_who_serves_what(canary_repo, capsys, monkeypatch):
    assert cli(["canary", "pause", "shapes", "--gitops", str(canary_repo), "--by", "alice"]) == 0
    capsys.readouterr()
    assert cli(["canary", "status", "shapes", "--gitops", str(canary_repo)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["shapes: paused (paused by alice)", "  stable     v1  90%",
                         "  candidate  v2  10%"]
    assert lines[3].startswith("  last decision: hold at ")
    assert lines[3].endswith(": paused by alice")
    assert cli(["canary", "status", "shapes", "--gitops", str(canary_repo), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert (state["phase"], state["candidate"], state["weight"]) == ("paused", "v2", 10)
    monkeypatch.setenv("MLOPS_GITOPS_REPO", str(canary_repo))  # as `mlops pr` reads it
    assert cli(["canary", "status", "shapes"]) == 0
    assert capsys.readouterr().out.startswith("shapes: paused")


def test_weight_and_subset_edits_keep_what_humans_added():
    vs = manifests.virtual_service("m", 90, 10, gateways=["mesh", "public"], hosts=["m.example"])
    vs["spec"]["http"][0]["timeout"] = "5s"
    out = set_weights(vs, 25, with_canary=True)
    assert out["spec"]["gateways"] == ["mesh", "public"] and out["spec"]["hosts"] == ["m.example"]
    assert out["spec"]["http"][0]["timeout"] == "5s"
    assert [r["weight"] for r in out["spec"]["http"][0]["route"]] == [75, 25]
    assert vs["spec"]["http"][0]["route"][1]["weight"] == 10  # the input is not modified
    alone = set_weights(out, 0, with_canary=False)
    assert [r["destination"]["subset"] for r in alone["spec"]["http"][0]["route"]] == ["stable"]
    again = set_weights(alone, 10, with_canary=True)
    assert again["spec"]["http"][0]["route"][1]["destination"] == \
        {**alone["spec"]["http"][0]["route"][0]["destination"], "subset": "canary"}

    dr = manifests.destination_rule("m", "v1", "v2")
    dr["spec"]["trafficPolicy"] = {"connectionPool": {"http": {"http1MaxPendingRequests": 10}}}
    promoted = set_subsets(dr, "v2", None)
    assert promoted["spec"]["subsets"] == [{"name": "stable", "labels": {"version": "v2"}}]
    assert promoted["spec"]["trafficPolicy"] == dr["spec"]["trafficPolicy"]
    for doc in (out, alone, again, promoted):
        validate_manifest(doc)


def test_timeline_survives_a_torn_line_and_replayed_windows(tmp_path):
    point = {"t": 10.0, "weight": 10, "decision": "hold",
             "stable": {"requests": 90, "errors": 0, "p99_ms": 40.0},
             "canary": {"requests": 10, "errors": 1, "p99_ms": 55.0}}
    path = tmp_path / "timeline.jsonl"
    lines = [json.dumps(point), json.dumps({**point, "t": 11.0}),
             json.dumps({**point, "t": 11.0}),  # the same window, replayed after a restart
             '{"t": 12.0, "weight": 1']         # killed mid-write
    path.write_text("\n".join(lines))
    points = _dedupe(read_timeline(path))
    assert [p["t"] for p in points] == [10.0, 11.0]
    text = canary_summary("m", "v1", "v2", "rolled back",
                          [{"kind": "rollback", "subject": "rollback(m): 10% -> 0% (v2 over v1)",
                            "commit": "a" * 40, "time": 11.0, "reason": "errors"}], points)
    assert "| canary | 20 | 2 | 10.000 % | 55.0 |" in text
    assert (
        "| 1 | 1970-01-01 00:00:11 | rollback(m): 10% -> 0% (v2 over v1) | "
        "`aaaaaaaaaaaa` | errors |"
        in text
    )


def test_a_failing_webhook_is_logged_without_its_secret_url(caplog):
    """Hardening finding 9: a Slack webhook URL's path is its secret, and requests'
    exception text repeats the URL. Real sockets: one refused, one answering 500."""

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    secret = "T000/B000/s3cr3tpathtoken"
    caplog.set_level("WARNING", logger="mlops")
    assert Notifier(f"http://127.0.0.1:{closed_port}/services/{secret}").send("hi") is False

    class Failing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.send_response(500)
            self.end_headers()
            self.wfile.write(f"bad request to /services/{secret}".encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/services/{secret}"
        assert Notifier(url).send("hi") is False
    finally:
        server.shutdown()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "127.0.0.1" in logged and "HTTP 500" in logged
    assert secret not in logged and "s3cr3t" not in logged


def test_the_canary_plot_is_drawn_outside_the_controller_process(tmp_path):
    """matplotlib in the long-lived controller cost ~40 MB at the first plot and grew it
    ~25 MB more over the next ten (benchmarks/report_memory.py): the soak read it as a leak.
    A fresh interpreter (pytest itself may have matplotlib loaded) writes a report with a
    real PNG and must end without matplotlib imported; a plot error must still surface."""
    script = (
        "import pathlib, sys\n"
        "from promotion.reports.report import write_canary_report\n"
        "points = [{'t': i * 5.0, 'weight': 10 * i, 'stable': {'rps': 5.0},"
        " 'canary': {'rps': 1.0}} for i in range(5)]\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "md, png = write_canary_report(d, 'm', 'v1', 'v2', 'promoted', [], points)\n"
        "assert png.stat().st_size > 1000 and md.is_file()\n"
        "print('matplotlib' in sys.modules)\n"
        "try:\n"
        "    write_canary_report(d, 'm', 'v1', 'v3', 'promoted', [], [{'no': 't'}])\n"
        "except KeyError as exc:\n"
        "    print('raised', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "report")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["False", "raised 't'"]
