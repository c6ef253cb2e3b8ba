"""HAProxy config rendering (checked by the real `haproxy -c`) and runtime-API parsing."""

import contextlib
import hashlib
import http.server
import os
import pathlib
import stat
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from local.platform import binaries, haproxy, prometheus
from local.platform.haproxy import RuntimeApi, parse_servers_state
from local.platform.workdir import PlatformConfig, Workdir
from tests.fixtures.common import free_port

STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
4 shapes 1 v1 127.0.0.1 2 0 90 90 0 1 0 0 0 0 0 0 - 18501 - 0 0 - - 0
4 shapes 2 v2 127.0.0.1 0 1 10 10 0 1 0 0 0 0 0 0 - 18502 - 0 0 - - 0

"""


def test_parse_servers_state():
    v1, v2 = parse_servers_state(STATE)
    assert (v1.backend, v1.name, v1.port, v1.weight, v1.up, v1.enabled) == (
        "shapes",
        "v1",
        18501,
        90,
        True,
        True,
    )
    assert (v2.name, v2.port, v2.weight, v2.up, v2.enabled) == ("v2", 18502, 10, False, False)


def test_rendered_config_is_valid_for_haproxy(tmp_path):
    wd = Workdir(tmp_path)
    text = haproxy.render_config(
        wd, stats_port=18404, frontends={"shapes": 18405, "other": 18406},
        servers={"shapes": {"v1": (18501, 90), "v2": (18502, 10)}},
    )
    wd.haproxy.mkdir(parents=True)
    wd.haproxy_cfg.write_text(text)
    exe = binaries.which("haproxy")
    done = subprocess.run(haproxy.check_command(exe, wd), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "server v2 127.0.0.1:18502 weight 10" in text
    assert "backend other" in text and "use-service prometheus-exporter" in text


def test_long_work_dir_moves_the_socket_to_a_short_path(tmp_path):
    wd = Workdir(tmp_path / ("x" * 120))
    socket = wd.admin_socket()
    assert len(str(socket)) < 108
    assert Workdir(tmp_path / "a").admin_socket() != Workdir(tmp_path / "b").admin_socket()
    assert Workdir(tmp_path / ("x" * 120)).admin_socket() == socket  # found again later
    for wd in (Workdir(tmp_path / ("x" * 120)), Workdir(tmp_path / "a"), Workdir(tmp_path / "b")):
        wd.release_admin_socket()


@pytest.mark.parametrize("extra", [0, 1, 3])
def test_haproxy_accepts_the_admin_socket_at_and_just_past_its_length_limit(tmp_path, extra):
    """HAProxy refuses a Unix socket path over 97 bytes (it binds `<path>.<pid>.tmp`
    first: `str2sa_range` in its src/tools.c), 11 bytes under sun_path; a work dir
    whose socket path was 98-100 bytes long failed `mlops up`. Checked by HAProxy itself."""
    room = 97 - len(str(tmp_path / "x" / "haproxy" / "admin.sock")) + 1
    assert room > 0, "pytest's temp dir is too deep for this test"
    wd = Workdir(tmp_path / ("w" * (room + extra)))
    socket = wd.admin_socket()
    assert len(str(socket)) <= 97
    assert (socket == wd.haproxy / "admin.sock") == (extra == 0)
    text = haproxy.render_config(wd, stats_port=18404, frontends={"shapes": 18405},
                                 servers={"shapes": {"v1": (18501, 100)}})
    wd.haproxy.mkdir(parents=True)
    wd.haproxy_cfg.write_text(text)
    done = subprocess.run(haproxy.check_command(binaries.which("haproxy"), wd),
                          capture_output=True, text=True)
    wd.release_admin_socket()
    assert done.returncode == 0, done.stderr


def test_long_work_dir_socket_is_in_a_private_unguessable_dir(tmp_path):
    """Hardening finding 13: the short path was /tmp/mlops-haproxy-<digest of the work dir>.sock,
    which another user could compute and create first."""

    root = tmp_path / ("y" * 120)
    old_guess = pathlib.Path(tempfile.gettempdir()) / (
        f"mlops-haproxy-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}.sock")
    socket = Workdir(root).admin_socket()
    assert socket != old_guess
    mode = socket.parent.lstat().st_mode
    assert stat.S_ISDIR(mode) and mode & 0o077 == 0 and socket.parent.stat().st_uid == os.getuid()
    # A recorded dir that someone opened up is not trusted again.
    socket.parent.chmod(0o777)
    moved = Workdir(root).admin_socket()
    assert moved.parent != socket.parent and moved.parent.lstat().st_mode & 0o077 == 0
    Workdir(root).release_admin_socket()
    socket.parent.rmdir()  # the opened-up one is not ours to trust: the test removes it


def test_prometheus_config_is_valid_for_promtool(tmp_path):
    wd = Workdir(tmp_path)
    config = PlatformConfig(gitops="/g", prometheus_port=19090, haproxy_stats_port=18404)
    (wd.prometheus).mkdir(parents=True)
    path = wd.prometheus / "prometheus.yml"
    path.write_text(prometheus.render_config(wd, config))
    prometheus.write_model_targets(wd, [("shapes", "v1", 18501)])
    prometheus.write_controller_targets(wd, None)
    done = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    targets = prometheus.model_targets([("shapes", "v1", 18501)])
    assert targets == [{"targets": ["127.0.0.1:18501"],
                        "labels": {"app": "shapes", "version": "v1", "deployment": "shapes-v1"}}]


def test_released_socket_dir_is_removed_and_a_foreign_one_is_kept(tmp_path):
    """`mlops down` releases the private temp dir a long work dir's socket lives
    in; before, every test and demo with a deep work dir left one in /tmp."""
    wd = Workdir(tmp_path / ("z" * 120))
    socket = wd.admin_socket()
    socket.write_text("")  # where HAProxy's socket was
    wd.release_admin_socket()
    assert not socket.parent.exists()
    assert not (wd.run / "admin-socket-dir").exists()
    wd.release_admin_socket()  # nothing recorded: nothing to do

    other = wd.admin_socket()
    (other.parent / "notes.txt").write_text("someone's file")
    wd.release_admin_socket()  # not only our socket in it: left as found
    assert (other.parent / "notes.txt").exists()
    (other.parent / "notes.txt").unlink()
    wd.release_admin_socket()
    assert not other.parent.exists()


@contextlib.contextmanager
def _router(tmp_path, backends, weights):
    """HAProxy over `backends` (name -> a running loopback HTTP server) with the model
    `shapes` split by `weights`; yields (work dir, stats port, front port) and stops
    HAProxy and the backends, even on failure."""
    wd = Workdir(tmp_path)
    stats, front = free_port(), free_port()
    wd.haproxy.mkdir(parents=True)
    wd.haproxy_cfg.write_text(haproxy.render_config(
        wd, stats_port=stats, frontends={"shapes": front},
        servers={"shapes": {v: (backends[v].server_port, w) for v, w in weights.items()}}))
    proc = subprocess.Popen(haproxy.command(binaries.which("haproxy"), wd),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield wd, stats, front
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for server in backends.values():
            server.shutdown()
            server.server_close()


def test_a_version_header_pins_the_server_whatever_its_weight(tmp_path):
    """The canary's probe asks each version through the router (`x-mlops-version`): real
    HAProxy, two static servers at 100/0 and one added at run time, each a tiny HTTP server
    that answers its own name. Pinned requests reach the named server (weight 0 too, the
    run-time one too: `use-server` with a log-format name is resolved per request, HAProxy
    2.6 configuration.txt, "use-server"); an unknown name falls back to the weights; and
    pinned requests stay out of the router's latency histogram (what clients see)."""


    def named(name):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = name.encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    backends = {name: named(name) for name in ("v1", "v2", "v3")}
    with _router(tmp_path, backends, {"v1": 100, "v2": 0}) as (wd, stats, front):
        url = f"http://127.0.0.1:{front}/v2/models/shapes/infer"

        def answer(version=None):
            headers = {"x-mlops-version": version} if version else {}
            return requests.get(url, headers=headers, timeout=5).text

        def up(names):
            states = {s.name: s.up for s in RuntimeApi(wd.admin_socket()).servers_state()}
            return all(states.get(n) for n in names)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if up(["v1", "v2"]):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert {answer() for _ in range(10)} == {"v1"}
        assert {answer("v2") for _ in range(5)} == {"v2"}
        RuntimeApi(wd.admin_socket()).add_server(
            "shapes", "v3", haproxy.server_line_args(backends["v3"].server_port, 0))
        deadline = time.monotonic() + 20
        while not up(["v3"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert answer("v3") == "v3"
        assert answer("v-unknown") == "v1"  # not a server: the weights decide
        latency = requests.get(f"http://127.0.0.1:{stats}{haproxy.LATENCY_PATH}", timeout=5).text
        counts = {line.split("server=")[1].split('"')[1]: int(line.split()[-1])
                  for line in latency.splitlines() if line.startswith(
                      "mlops_router_response_seconds_count")}
        assert counts == {"v1": 10}, latency  # the ten unpinned requests only


def _named_server(name):
    """A tiny keep-alive HTTP server on a free loopback port that answers its own name."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            # one write: headers and body in one segment, no Nagle/delayed-ACK stall
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(name), name.encode()))

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # HAProxy's health checks hang up without a request

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_canary_step_applied_by_the_sync_keeps_the_split_from_the_first_request(tmp_path):
    """The sync's order of `set weight`s for a 10 -> 50 step, on real HAProxy 2.6.

    Seen in cluster-latency mode: right after the sync applied 90/10 -> 50/50, HAProxy
    sent the canary every request for ~20 s (~300 requests) while both servers were UP at
    50/50 (`show stat`), and the controller held five windows on "traffic not shifted".
    The cause is the order: the sync set the stable's weight first, so for a moment the
    backend's total was 60. HAProxy's roundrobin (src/lb_fwrr.c, v2.6.0:
    `fwrr_update_server_weight` re-queues the server through `fwrr_queue_srv`, which puts
    it into the *next* round when its position is >= `curr_weight + next_weight`) then
    parked the stable until the current round of 1600 positions (total weight x
    BE_WEIGHT_SCALE 16, include/haproxy/backend-t.h) ran out. Raising the canary first
    keeps the total at or above both splits. Deterministic: roundrobin over sequential
    requests; the 1000 requests before the step put the round's position past 1600 + 960.
    """
    from local.platform.desired import ModelSpec, VersionSpec
    from local.platform.plan import Actual, RouteView, ServerView, SetRoute, plan

    backends = {name: _named_server(name) for name in ("v1", "v2")}
    ports = {name: s.server_port for name, s in backends.items()}
    with _router(tmp_path, backends, {"v1": 90, "v2": 10}) as (wd, _, front):
        session = requests.Session()
        url = f"http://127.0.0.1:{front}/v2/models/shapes/infer"

        def answers(n):
            return [session.get(url, timeout=5).text for _ in range(n)]
        api = RuntimeApi(wd.admin_socket())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if sum(s.up for s in api.servers_state()) == 2:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        before = answers(1000)
        assert before.count("v2") == 100  # 90/10 exactly, request by request
        desired = {"shapes": ModelSpec(
            versions={v: VersionSpec(model_dir=f"/m/{v}") for v in ports},
            weights={"v1": 50, "v2": 50})}
        actual = Actual(
            servers={("shapes", v): ServerView(port=p, phase="ready", model_dir=f"/m/{v}")
                     for v, p in ports.items()},
            frontends={"shapes": front},
            routes={"shapes": {"v1": RouteView(ports["v1"], 90, True),
                               "v2": RouteView(ports["v2"], 10, True)}},
            targets=frozenset(("shapes", v, p) for v, p in ports.items()))
        steps = [a for a in plan(desired, actual, now=0) if isinstance(a, SetRoute)]
        assert {(a.version, a.weight) for a in steps} == {("v1", 50), ("v2", 50)}
        for action in steps:  # as the sync executes them, one command each
            api.set_weight(action.model, action.version, action.weight)
        after = answers(100)
        assert 45 <= after.count("v2") <= 55, "".join(a[-1] for a in after)


def test_a_ready_server_slow_to_answer_its_health_route_keeps_its_clients(tmp_path):
    """HAProxy must not answer 503 while the version's server serves its requests.

    Readiness is the sync's job, with the Deployment's probe (period, timeout and
    thresholds, as the kubelet applies them; Istio then routes to the ready endpoints).
    HAProxy's own HTTP check was stricter: without `timeout check` its whole check must
    finish within `inter` (1 s; HAProxy 2.6 doc/configuration.txt, "timeout check"), and
    two misses (`fall 2`) took the server DOWN -- the only server of a model, so every
    client got a 503 "no server available" from a machine too loaded to answer the
    health route within a second, while the server answered requests and the sync held
    it ready. HAProxy's check is now a TCP connect: a crashed server is still taken out
    within ~2 s, a busy one is not. Here the health route takes 1.5 s, requests none.
    """
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path.startswith("/v2/health"):
                hits.append(self.path)
                time.sleep(1.5)
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nv1")

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass

    backend = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    with _router(tmp_path, {"v1": backend}, {"v1": 100}) as (wd, _, front):
        url = f"http://127.0.0.1:{front}/v2/models/shapes/infer"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                RuntimeApi(wd.admin_socket()).info()
                break
            except OSError:
                time.sleep(0.1)
        codes = []
        until = time.monotonic() + 4  # two misses took it DOWN in ~3 s
        while time.monotonic() < until:
            codes.append(requests.get(url, timeout=5).status_code)
            time.sleep(0.1)
        states = RuntimeApi(wd.admin_socket()).servers_state()
        assert set(codes) == {200}, (codes, hits)
        assert [s.up for s in states] == [True]
        backend.shutdown()  # a crash: the connect is refused, the check takes it out
        backend.server_close()
        deadline = time.monotonic() + 10
        while RuntimeApi(wd.admin_socket()).servers_state()[0].up:
            assert time.monotonic() < deadline, "a crashed server stayed UP"
            time.sleep(0.1)
