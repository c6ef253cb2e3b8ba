"""`mlops ui` as a boundary: what Prometheus, the GitOps repo and a request may make it do.

Issue 41, findings 3 (stored XSS: escaping by construction and a strict CSP; the
browser half is tests/ui/test_ui_browser.py), 14 (event streams capped), 15 (a shared
token names no one but its identity), 16 (no credentials in what the UI shows); issue 44
item 6 (a part that is down is one line a person reads, the raw text behind a toggle;
every run's gate verdict and reason); issue 42 B2 (the UI reads the models' namespace
and the default preset where the controller does).

A real GitOps repo and local forge (`tests/fixtures/ui.py`), a real Prometheus
(`tests/fixtures/prometheus.py`) and uvicorn on loopback for the streams.
"""

from __future__ import annotations

import math
import pathlib
import re
import socket
import subprocess
import time

import pytest
import requests
from starlette.testclient import TestClient

from gitops import layout
from gitops.repo import Mirror, init_repo
from mlops.cli import main
from mlops.ui import guard
from mlops.ui.app import UiConfig, create_app
from mlops.ui.live import fault, policy_of
from mlops.ui.manifests import ui_manifests
from mlops.ui.runs import gate_view, runs_view
from promotion.controller import Controller, ControllerConfig
from promotion.errors import MetricFault
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.common import free_port
from tests.fixtures.prometheus import OpenMetrics
from tests.fixtures.ui import Served, make_run

HEADERS = {"X-Mlops-UI": "1"}
STATIC = pathlib.Path(__file__).parents[2] / "mlops" / "ui" / "static"
TOKEN = "s3cr3t-t0ken"


def _commit(gitops: pathlib.Path, files: dict[str, str], tmp: pathlib.Path) -> None:
    """A hand edit of the GitOps repo's main, as an operator (or anyone who can push) makes."""
    work = tmp / f"edit-{time.monotonic_ns()}"
    subprocess.run(["git", "clone", "-q", str(gitops), str(work)], check=True)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git = ["git", "-c", "user.name=Op", "-c", "user.email=op@example.com"]
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "edit"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=work, check=True)


# -- finding 3: escaping by construction, a strict CSP on every answer -----------------------

def _js() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(STATIC.glob("*.js"))}


def test_markup_enters_the_page_only_through_the_escaping_template():
    """Every static JS file: no sink that parses a string as markup or code except the one
    assignment in html.js (`Html.render`, which takes only fragments `html` made), and the
    templates keep the rules that make `html`'s escaping enough: attribute values quoted,
    no inline handlers, no style attributes, no script elements."""
    files = _js()
    assert set(files) == {"app.js", "charts.js", "html.js"}
    sinks = re.compile(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|"
                       r"\beval\s*\(|new\s+Function\b|setTimeout\s*\(\s*['\"`]|"
                       r"createContextualFragment|srcdoc")
    for name, text in files.items():
        code = "\n".join(line for line in text.splitlines()
                         if not line.lstrip().startswith("//"))
        found = [m.group(0) for m in sinks.finditer(code)]
        assert found == (["." + "innerHTML ="] if name == "html.js" else []), (name, found)
        # an attribute follows a space; a URL's parameter (`?page=${...}`) does not
        assert not re.search(r"\s[\w-]+=\$\{", code), f"{name}: an unquoted attribute value"
        assert not re.search(r"\son[a-z]+\s*=", code), f"{name}: an inline event handler"
        assert not re.search(r"\sstyle\s*=\s*[\"'$]", code), f"{name}: a style attribute"
        assert "<script" not in code.lower() and "javascript:" not in code.lower(), name
    assert "el.innerHTML = policy ? policy.createHTML(fragment.text)" in files["html.js"]


def test_no_page_has_inline_script_or_handlers():
    """The CSP allows `script-src 'self'` only: every script is a file, nothing inline."""
    pages = sorted(STATIC.glob("*.html"))
    assert [p.name for p in pages] == ["index.html"]
    for page in pages:
        text = page.read_text()
        scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", text, re.S | re.I)
        assert scripts and all('src="' in attrs and not body.strip()
                               for attrs, body in scripts), scripts
        assert not re.search(r"\son[a-z]+\s*=", text, re.I)
        assert not re.search(r"\sstyle\s*=", text, re.I) and "<style" not in text.lower()
        assert "javascript:" not in text.lower()
    order = re.findall(r'<script src="static/([^"]+)"', (STATIC / "index.html").read_text())
    assert order.index("html.js") < order.index("charts.js") < order.index("app.js")


def test_every_answer_carries_the_csp_and_its_companions(ui_repo):
    """Pages, JSON, static files, errors, the host check's refusal, a refused stream."""
    config = UiConfig(gitops=str(ui_repo.gitops), allowed_hosts=["127.0.0.1", "testserver"],
                      max_streams=1)
    with TestClient(create_app(config)) as c:
        answers = [c.get("/"), c.get("/static/app.js"), c.get("/static/vendor/uPlot.min.css"),
                   c.get("/api/info"), c.get("/api/models/nope/charts"), c.get("/nope"),
                   c.get("/api/info", headers={"Host": "evil.example"}),
                   c.post(f"/api/proposals/{ui_repo.pr}/approve", json={})]
        c.app.state.streams.take("someone")  # the one slot is taken: the next is refused
        answers.append(c.get("/api/events"))
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 404, 404, 400, 403, 503]
    for answer in answers:
        csp = answer.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["script-src"] == "'self'" and directives["default-src"] == "'none'"
        assert directives["style-src"] == "'self'"  # no inline style attributes either
        assert directives["require-trusted-types-for"] == "'script'"
        assert directives["trusted-types"] == guard.TRUSTED_TYPES_POLICY
        assert directives["frame-ancestors"] == "'none'"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
    assert guard.TRUSTED_TYPES_POLICY in (STATIC / "html.js").read_text()
    assert "retry-after" in answers[-1].headers


# -- finding 14: event streams are capped --------------------------------------------------

def _open_stream(port: int, source: str, user: str = "") -> tuple[socket.socket, int]:
    """A raw event-stream request from `source` (a loopback address), as the auth proxy's
    `user` if given: the socket, kept open, and the status the UI answered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30,
                                    source_address=(source, 0))
    proxy = f"X-Forwarded-User: {user}\r\n" if user else ""
    sock.sendall(f"GET /api/events?page=runs HTTP/1.1\r\nHost: 127.0.0.1\r\n{proxy}\r\n"
                 .encode())
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "the UI closed the connection without an answer"
        head += chunk
    return sock, int(head.split()[1])


def _until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_event_streams_beyond_the_caps_are_refused_and_slots_come_back(ui_repo):
    """The review's 400 streams: now at most `max_streams` are open (503 beyond), at most
    `max_streams_per_client` from one address (429 beyond); a closed stream frees its slot.
    127.0.0.2 is a second client (all of 127/8 is loopback on Linux)."""
    config = UiConfig(gitops=str(ui_repo.gitops), max_streams=3, max_streams_per_client=2)
    with Served(config) as app:
        slots = app.app.state.streams
        opened = []
        for source, expected in (("127.0.0.1", 200), ("127.0.0.1", 200), ("127.0.0.1", 429),
                                 ("127.0.0.2", 200), ("127.0.0.2", 503)):
            sock, status = _open_stream(app.port, source)
            assert status == expected, (source, status)
            (opened.append(sock) if status == 200 else sock.close())
        assert slots.count() == 3 and slots.count("addr:127.0.0.1") == 2
        assert requests.get(f"{app.url}api/info", timeout=10).status_code == 200
        opened.pop(0).close()  # the client goes away: its slot comes back
        _until(lambda: slots.count() == 2, "the closed stream's slot to be freed")
        sock, status = _open_stream(app.port, "127.0.0.2")
        assert status == 200
        opened.append(sock)
        for sock in opened:
            sock.close()
        _until(lambda: slots.count() == 0, "every slot freed")


def test_behind_the_auth_proxy_each_signed_in_person_is_a_client(ui_repo):
    """Every request comes from the proxy's address there: counted by the person the proxy
    signed in, or one person's tabs would use up everyone's streams."""
    config = UiConfig(gitops=str(ui_repo.gitops), proxy_user=True, max_streams_per_client=1)
    with Served(config) as app:
        a, status_a = _open_stream(app.port, "127.0.0.1", "ada@example.com")
        b, status_b = _open_stream(app.port, "127.0.0.1", "grace@example.com")
        again, status_again = _open_stream(app.port, "127.0.0.1", "ada@example.com")
        for sock in (a, b, again):
            sock.close()
    assert (status_a, status_b, status_again) == (200, 200, 429)


def test_stream_slots_count_per_server_and_per_client():
    slots = guard.StreamSlots(total=2, per_client=1)
    assert slots.take("a") is None
    status, why = slots.take("a")
    assert status == 429 and "1 event streams are open from this client" in why
    assert slots.take("b") is None
    assert slots.take("c")[0] == 503
    slots.give("a")
    assert slots.take("c") is None and slots.count() == 2
    with pytest.raises(ValueError):
        guard.StreamSlots(total=0, per_client=1)


# -- finding 15: a shared token acts as its identity ----------------------------------------

def test_a_shared_token_signs_as_its_identity_never_as_the_request_says(ui_repo):
    """The review's reproduction: with the token, `{"by": "platform-lead"}` merged as
    platform-lead. Now the token's identity (`--by`) signs; naming anyone else is a 403."""
    config = UiConfig(gitops=str(ui_repo.gitops), token=TOKEN, user="ops-team")
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    url = f"/api/proposals/{ui_repo.pr}/approve"
    with TestClient(create_app(config)) as c:
        info = c.get("/api/info").json()
        assert info["identity"] == "ops-team" and info["token"] is True
        forged = c.post(url, json={"by": "platform-lead"}, headers=auth)
        assert forged.status_code == 403, forged.text
        assert "acts as 'ops-team'" in forged.json()["error"]
        assert c.get("/api/proposals").json()["proposals"][0]["state"] == "open"
        ok = c.post(url, json={}, headers=auth)
        assert ok.status_code == 200, ok.text
    with Mirror(ui_repo.gitops) as mirror:
        head = mirror.log(mirror.sha("main") or "")[0]
    assert head.trailers.get("Mlops-Pull-Request") == str(ui_repo.pr)
    assert head.author_name == "ops-team"


def test_the_cluster_ui_with_a_token_signs_as_a_named_identity():
    *_, deployment, _ = ui_manifests(gitops_url="https://g/gitops.git", actions=True,
                                 token_secret="ui-token", token_identity="ml-platform")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--by") + 1] == "ml-platform"
    *_, proxied, _ = ui_manifests(gitops_url="https://g/gitops.git", actions=True, proxy_user=True,
                              token_secret="ui-token")
    assert "--by" not in proxied["spec"]["template"]["spec"]["containers"][0]["args"]


# -- finding 16: no credentials in what the UI shows -----------------------------------------

def test_no_credentials_in_info_errors_or_the_start_up_line(tmp_path, capsys, monkeypatch):
    """`/api/info` needs no token; it, every error the UI answers and the line `mlops ui`
    prints showed `https://bot:TOKEN@...`. Real git against a port nothing listens on."""
    gitops = f"https://bot:{TOKEN}@127.0.0.1:9/org/gitops.git"
    prometheus = f"http://reader:{TOKEN}@127.0.0.1:{free_port()}"
    config = UiConfig(gitops=gitops, prometheus=prometheus, argo_server=None)
    with TestClient(create_app(config)) as c:
        info = c.get("/api/info")
        models = c.get("/api/models")
        charts = c.get("/api/models/det/charts")
    assert info.json()["gitops"] == "https://***@127.0.0.1:9/org/gitops.git"
    assert info.json()["prometheus"].startswith("http://***@127.0.0.1:")
    assert models.status_code >= 400 and "127.0.0.1:9" in models.json()["error"]
    for answer in (info, models, charts):
        assert TOKEN not in answer.text

    import uvicorn  # lazy (collection cost)

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    assert main(["ui", "--gitops", gitops, "--prometheus", prometheus, "--workdir",
                 str(tmp_path / "none"), "--port", str(free_port())]) == 0
    out = capsys.readouterr().out
    assert "GitOps https://***@127.0.0.1:9/org/gitops.git" in out and TOKEN not in out


# -- issue 44 item 6: a part that is down is one line ----------------------------------------

def test_prometheus_down_is_one_line_with_the_raw_text_kept(ui_repo):
    """Each model card said `Prometheus: prometheus at URL unreachable:
    HTTPConnectionPool(...) Max retries exceeded with url: /api/v1/query?query=sum%28...`."""
    port = free_port()
    config = UiConfig(gitops=str(ui_repo.gitops), prometheus=f"http://127.0.0.1:{port}")
    with TestClient(create_app(config)) as c:
        live = c.get("/api/models").json()["models"][0]["versions"][0]["live"]
        chart = c.get("/api/models/det/charts").json()
    line = (f"Prometheus at http://127.0.0.1:{port} is unreachable (connection refused); "
            "live rates unavailable, git state shown")
    assert live["error"] == line and chart["error"] == line
    assert "Connection refused" in live["detail"] and "HTTPConnectionPool" in live["detail"]
    assert "%28" not in live["detail"]  # the PromQL readable, not percent-encoded
    assert 'query=(sum(increase(model_requests_total{model_name="det"' in live["detail"]
    weight = next(p for p in chart["panels"] if p["id"] == "weight")
    assert weight["lines"][0]["values"][-1] == 100  # git's state still drawn


def test_a_fault_says_what_kind_of_failure_it_was(prometheus_replay):
    """Real answers: a refused connection, a name that does not resolve, an HTTP error of
    a real Prometheus (a query it cannot parse), a server that is not Prometheus."""

    def line(url: str, promql: str = "up") -> str:
        with pytest.raises(MetricFault) as err:
            PrometheusSource(url, timeout=5).query(promql)
        return fault(url, err.value)[0]

    assert "is unreachable (connection refused)" in line(f"http://127.0.0.1:{free_port()}")
    assert "(its host name does not resolve)" in line("http://prometheus.invalid:9090")
    om = OpenMetrics()
    om.add("up", "gauge", "up", {"job": "x"}, time.time() - 60, 1)
    url = prometheus_replay(om.text())
    assert line(url, "sum(") == (f"Prometheus at {url} refused the query (HTTP 400); live "
                                 "rates unavailable, git state shown")
    assert "without JSON (is it Prometheus?)" in line(url + "/graph")


# -- issue 44 item 6: the gate's verdict and reason for every run ----------------------------

@pytest.mark.parametrize("run, record, verdict, reason", [
    ({"steps": [{"task": "gate", "state": "Succeeded",
                 "outputs": {"passed": "false", "reason": "FAIL: map50 0.41 < 0.5"}}]},
     None, "refused", "FAIL: map50 0.41 < 0.5"),
    ({"steps": [{"task": "gate", "state": "Succeeded", "outputs": {"passed": "true"}}]},
     {"gate": {"passed": True, "reason": "PASS: map50 0.61"}}, "passed", "PASS: map50 0.61"),
    ({"status": "Succeeded", "steps": []},
     {"gate": {"passed": False, "reason": "FAIL: no better than production"}},
     "refused", "FAIL: no better than production"),
    ({"steps": [{"task": "gate", "state": "Succeeded", "outputs": {
        "passed": "false", "outcome": "review", "reason": "REVIEW: inconclusive at n=200"}}]},
     None, "review", "REVIEW: inconclusive at n=200"),
    ({"status": "Failed", "task": "train", "message": "exit code 1",
      "steps": [{"task": "train", "state": "Failed", "outputs": {}}]}, None,
     "not reached", "train failed before the gate: exit code 1"),
    ({"status": "Failed", "steps": [{"task": "gate", "state": "Failed", "outputs": {},
                                     "message": "metrics.json: no such file"}]},
     None, "failed", "metrics.json: no such file"),
    ({"status": "Running", "task": "gate",
      "steps": [{"task": "gate", "state": "Running", "outputs": {}}]},
     None, "running", "the gate is judging the candidate"),
    ({"status": "Running", "task": "train", "steps": []}, None, "pending",
     "the run is at train"),
    ({"status": "Succeeded", "task": "", "steps": []}, None, "not reached",
     "the run succeeded without a gate step"),
])
def test_gate_view_gives_every_run_a_verdict_and_a_reason(run, record, verdict, reason):
    assert gate_view(run, record) == {"verdict": verdict, "reason": reason}


def test_the_runs_page_carries_the_gates_reason(tmp_path):
    make_run(tmp_path, "aaaa", lr=0.004, map50=0.61, passed=True, losses=[1.0])
    make_run(tmp_path, "bbbb", lr=0.002, map50=0.48, passed=False, losses=[1.0])
    gates = {r["name"]: r["gate_view"] for r in runs_view([tmp_path])}
    assert gates == {"aaaa": {"verdict": "passed", "reason": "PASS: map50 0.61"},
                     "bbbb": {"verdict": "refused", "reason": "FAIL: map50 0.48"}}


# -- issue 42 B2: the namespace and the default preset, read where the controller reads them -

def _istio_series(now: float, namespace: str) -> str:
    """Istio's sidecar series of det-v1 in `namespace` for the last two minutes, 10 req/s."""
    om = OpenMetrics()
    for i, tick in enumerate(range(-120, 1, 5)):
        labels = {"reporter": "destination", "destination_workload_namespace": namespace,
                  "destination_workload": "det-v1"}
        om.add("istio_requests", "counter", "istio_requests_total",
               {**labels, "response_code": "200"}, now + tick, 50.0 * i)
        for le in (50.0, 250.0, math.inf):
            om.add("istio_request_duration_milliseconds", "histogram",
                   "istio_request_duration_milliseconds_bucket",
                   {**labels, "le": "+Inf" if math.isinf(le) else f"{le:g}"}, now + tick,
                   50.0 * i)
    return om.text()


def test_live_rates_read_the_namespace_the_controller_reads(tmp_path, prometheus_replay):
    """The guide's setup: `mlops gitops init --namespace vision`, the istio preset (a
    cluster's default). The UI queried `destination_workload_namespace="default"` and
    showed no rates; the controller reads `vision` from mlops-gitops.yaml. Now both read
    the policy through `promotion.gitrepo.policy_file.folder_policy`."""
    from tests.fixtures.production import put_in_production

    gitops = tmp_path / "gitops.git"
    init_repo(gitops, namespace="vision")
    put_in_production(gitops, tmp_path / "models", "det", "v1", {"map50": 0.5})
    url = prometheus_replay(_istio_series(time.time(), "vision"))
    config = UiConfig(gitops=str(gitops), prometheus=url, runtime="kubernetes")
    with TestClient(create_app(config)) as c:
        assert c.get("/api/info").json()["preset"] == "istio"
        live = c.get("/api/models").json()["models"][0]["versions"][0]["live"]
        chart = c.get("/api/models/det/charts").json()
    assert live["rate"] == pytest.approx(10.0, rel=0.2), live
    assert chart["preset"] == "istio" and chart["namespace"] == "vision"
    rps = next(p for p in chart["panels"] if p["id"] == "rps")
    assert any(v for v in rps["lines"][0]["values"] if v), "no req/s in the chart"

    # The controller's reading of the same folder is the same policy.
    with Mirror(gitops) as mirror:
        root = tmp_path / "tree"
        mirror.export(mirror.sha("main") or "", root)
    folder = layout.read_model(root, "det")
    controller = Controller(ControllerConfig(repo=str(gitops), workdir=tmp_path / "ctl"),
                            PrometheusSource(url))
    assert controller._policy(root, folder) == policy_of(folder, layout.load_config(root))
    assert policy_of(folder, layout.load_config(root)).metrics.namespace == "vision"


def test_the_default_preset_is_the_runtimes_as_the_controller_picks_it(ui_repo, tmp_path):
    def preset(**kw) -> str:
        with TestClient(create_app(UiConfig(gitops=str(ui_repo.gitops), **kw))) as c:
            return c.get("/api/info").json()["preset"]

    assert preset() == "model" and preset(runtime="kubernetes") == "istio"
    assert preset(workdir=tmp_path) == "haproxy" and preset(runtime="none") == "model"
    deployment, _ = ui_manifests(gitops_url="https://g/gitops.git")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--runtime") + 1] == "kubernetes"
