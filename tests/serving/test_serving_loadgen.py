"""The open-loop load generator and the `mlops serve` / `mlops load` command lines."""

import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests
import yaml

from mlops.cli import main
from serving.loadgen import LoadError, load_images, report_from_json, run_load
from tests.fixtures.common import ROOT, free_port
from tests.fixtures.serving import served, server_env


def mlops(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "mlops", *args], capture_output=True, text=True,
                          timeout=timeout, env=server_env(), cwd=ROOT)


@pytest.fixture(scope="module")
def val_dir(shapes_dataset):
    return shapes_dataset / "val"


#: In-flight limit of the shared server: above any test's whole run here (40 requests),
#: so every request it is sent gets a 200 even if the client fell behind its schedule
#: and then sent the overdue requests at once (the open loop catches up: on a busy
#: machine that burst went past the default limit of 16, and a 503 failed the test).
ROOMY = "64"


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir, tmp_path_factory):
    """One server for the tests that only send it requests they expect answered (a server
    start imports Paddle and loads the model: seconds each); the overload test has its own."""
    with served(tiny_model_dir, "--max-in-flight", ROOMY,
                log_dir=tmp_path_factory.mktemp("loadgen-tiny")) as running:
        yield running


def test_run_load_sends_every_scheduled_request(tiny_server, val_dir):
    server = tiny_server
    report = run_load(server.url, rps=40, duration=1, images=load_images(val_dir, limit=8))
    assert report.model == "tiny-detector"  # asked from the server's repository index
    assert report.scheduled == 40 and report.sent + report.dropped == 40
    assert report.status_counts == {"200": report.sent} and report.sent > 0
    assert set(report.latency_ms) == {"p50", "p90", "p99", "max", "mean"}
    assert 0 < report.latency_ms["p50"] <= report.latency_ms["p99"] <= report.latency_ms["max"]
    assert report_from_json(report.to_json()) == report


def test_open_loop_keeps_offering_load_to_an_overloaded_server(model_server, tiny_model_dir,
                                                                val_dir):
    """A closed loop would slow down with the server; the open loop sends on schedule
    and the overload shows up as 503s.

    `--inline-max-ms 0`: every request goes to the predictor thread and holds the one slot
    until answered. By default a model this fast runs on the event loop when the server
    is idle, blocking it, so the next request is read only once the slot is free again;
    on a busy machine, where this client sends more slowly, no request ever met an
    occupied slot (all 200s, the test failed)."""
    server = model_server(tiny_model_dir, "--max-in-flight", "1", "--threads", "1",
                          "--inline-max-ms", "0")
    # Well above what one in-flight request at a time serves on a fast machine (a tiny
    # model answers in about a millisecond), so requests overlap and some must be refused.
    report = run_load(server.url, rps=600, duration=1, images=load_images(val_dir, limit=8),
                      model="tiny-detector", concurrency_cap=32)
    assert report.sent + report.dropped == 600
    assert set(report.status_counts) <= {"200", "503"}
    assert report.status_counts.get("503", 0) > 0 and report.status_counts.get("200", 0) > 0


def test_paddle_serving_route_under_load(tiny_server, val_dir):
    server = tiny_server
    report = run_load(server.url, rps=10, duration=1, images=load_images(val_dir, limit=4),
                      route="paddle-serving")
    assert report.status_counts == {"200": 10}


def test_load_command_prints_and_writes_json(tiny_server, val_dir, tmp_path):
    server = tiny_server
    out = tmp_path / "report" / "load.json"
    proc = mlops("load", server.url, "--rps", "10", "--duration", "1", "--images", str(val_dir),
                 "--json", str(out), "--model", "tiny-detector")
    assert proc.returncode == 0, proc.stderr
    assert "offered  10.0 req/s" in proc.stdout and "200: 10" in proc.stdout
    assert "p50" in proc.stdout and "p99" in proc.stdout
    data = json.loads(out.read_text())
    assert data["status_counts"] == {"200": 10} and data["offered_rps"] == 10


def _requests_served(url: str) -> float:
    """The server's own count of inference requests (its Prometheus counter)."""
    text = requests.get(f"{url}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("model_requests_total{"))


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_load_command_stopped_early_still_reports_what_it_sent(tiny_server, val_dir, tmp_path,
                                                               sig):
    """Ctrl-C (or SIGTERM from a supervisor) ends a long run with its report, not a traceback."""
    server = tiny_server
    served_before = _requests_served(server.url)  # the shared server's earlier tests
    out = tmp_path / "load.json"
    # 100 req/s: the 20 served that the signal waits for take a fifth of a second
    proc = subprocess.Popen([sys.executable, "-m", "mlops", "load", server.url, "--rps", "100",
                             "--duration", "600", "--images", str(val_dir), "--model",
                             "tiny-detector", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env(), cwd=ROOT,
                            # Ctrl-C as from a terminal: a suite started in the background
                            # (`cmd &` in a script) passes SIGINT on as ignored, which Python
                            # then keeps (its KeyboardInterrupt only replaces the default)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while (_requests_served(server.url) - served_before < 20
               and time.monotonic() < deadline):
            time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped early" in stdout and "Traceback" not in stderr
    data = json.loads(out.read_text())
    assert data["stopped_early"] is True
    assert 20 <= data["sent"] < 100 * 600  # what was sent until the signal, not the plan
    assert data["scheduled"] == data["sent"] + data["dropped"]
    assert sum(data["status_counts"].values()) == data["sent"]  # in-flight ones finished
    assert data["duration_s"] < 600


class _SlowRecorder(http.server.ThreadingHTTPServer):
    """A stdlib server that counts the requests it is sent and answers each after
    `delay` seconds (no model needed to count)."""

    request_queue_size = 64

    def __init__(self, delay: float):
        self.arrived = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.arrived += 1
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", free_port()), Handler)


def test_a_stop_signal_landing_while_the_generator_starts_a_sender_is_reported_whole(
        tmp_path, monkeypatch, capsys):
    """The signal lands at the one moment that broke the report: while the thread pool
    starts a sender thread for the request being handed over. As an exception (what
    SIGTERM and Ctrl-C raised), it left that thread started but unknown to the pool,
    which did not wait for it: its request was sent and counted after the report was
    made, or between the report's `scheduled` and `sent` (`assert 30 == (31 + 0)` on
    another machine). The server answers slowly so that request is still in flight when
    the run ends; the report must count every request the server was sent.

    The signal is sent from `threading.Thread.start` of the pool's first thread, the
    `ThreadPoolExecutor._adjust_thread_count` window (Lib/concurrent/futures/thread.py:
    `t.start()` then `self._threads.add(t)`; `shutdown(wait=True)` joins `_threads`)."""
    server = _SlowRecorder(delay=1.0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"not decoded by the recorder")
    start = threading.Thread.start
    signalled = []

    def start_then_signal(thread):
        start(thread)
        if thread.name.startswith("load") and not signalled:
            signalled.append(thread)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(threading.Thread, "start", start_then_signal)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    out = tmp_path / "load.json"
    try:
        code = main(["load", f"http://127.0.0.1:{server.server_address[1]}", "--rps", "50",
                     "--duration", "60", "--images", str(tmp_path / "images"), "--model", "m",
                     "--json", str(out)])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        monkeypatch.undo()
        for thread in threading.enumerate():  # every sender, the pool's or not
            if thread.name.startswith("load"):
                thread.join(timeout=30)
        server.shutdown()
        server.server_close()
    assert signalled and code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["stopped_early"] is True
    assert data["sent"] == server.arrived >= 1  # nothing sent that the report misses
    assert data["scheduled"] == data["sent"] + data["dropped"]
    assert sum(data["status_counts"].values()) == data["sent"]


def cli(capsys, *args):
    """Run the CLI in-process (same entry point as the console script); (code, stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err


def test_load_command_errors_are_clear(tmp_path, capsys):
    code, err = cli(capsys, "load", "http://127.0.0.1:9", "--rps", "1", "--duration", "1",
                    "--images", str(tmp_path / "missing"))
    assert code == 2 and "error: image directory" in err
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="no PNG or JPEG"):
        load_images(tmp_path / "empty")


def test_serve_command_rejects_bad_model_dirs(tmp_path, tiny_model_dir, capsys):
    code, err = cli(capsys, "serve", str(tmp_path / "nope"), "--port", "1")
    assert code == 2 and "does not exist" in err

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "infer_cfg.yml").unlink()
    code, err = cli(capsys, "serve", str(broken), "--port", "1")
    assert code == 2 and "infer_cfg.yml" in err

    cfg = yaml.safe_load((tiny_model_dir / "infer_cfg.yml").read_text())
    cfg["decode"]["top_k"] = 0
    (broken / "infer_cfg.yml").write_text(yaml.safe_dump(cfg))
    code, err = cli(capsys, "serve", str(broken), "--port", "1")
    assert code == 2 and "decode.top_k" in err and "infer_cfg.yml" in err

    (broken / "inference.pdiparams").unlink()
    code, err = cli(capsys, "serve", str(broken), "--port", "1")
    assert code == 2 and "inference.pdiparams" in err


def test_serve_exits_nonzero_when_paddle_cannot_load_the_weights(tmp_path, tiny_model_dir):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(tiny_model_dir, corrupt)
    weights = (corrupt / "inference.pdiparams").read_bytes()
    (corrupt / "inference.pdiparams").write_bytes(weights[:len(weights) // 3])
    proc = mlops("serve", str(corrupt), "--port", str(free_port()))
    assert proc.returncode == 1
    assert "paddle.inference cannot load the model" in proc.stderr


def test_each_request_draws_its_image_at_random_so_a_periodic_router_splits_them_fairly(
        val_dir):
    """A weighted round robin is periodic (HAProxy's `roundrobin`, the local canary's
    router): with the images sent in turn, a 10 % canary got the same image in ten
    for a whole step, and its quality check compared other inputs, not another model.
    A stdlib server records the bodies in arrival order; every 10th request plays the
    canary. No model is needed to see which image a request carried.

    Every scheduled request must arrive, whatever the machine's load: the generator
    may send as many at once as are scheduled (a busy client catches up in a burst;
    with 8 slots the burst was partly dropped, and the count and the canary's share
    varied with the load), and the recorder's listen backlog holds such a burst (the
    stdlib's default of 5 makes the kernel drop the other connection attempts, to be
    retried a second later)."""

    arrivals: list[str] = []
    lock = threading.Lock()

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                arrivals.append(hashlib.sha256(body).hexdigest())
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 512

    server = Server(("127.0.0.1", free_port()), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        images = load_images(val_dir, limit=20)
        report = run_load(f"http://127.0.0.1:{server.server_address[1]}", rps=400, duration=1,
                          images=images, model="m", concurrency_cap=400, seed=7)
    finally:
        server.shutdown()
        server.server_close()
    assert report.status_counts == {"200": len(arrivals)} and len(arrivals) >= 300
    assert report.dropped == 0 and len(arrivals) == report.scheduled == 400
    assert len(set(arrivals)) == 20  # every image is sent
    canary = arrivals[3::10]
    # In turn, the canary's share would hold 2 of the 20 images; drawn at random,
    # 40 draws of 20 hold 17.4 distinct on average and fewer than 12 with p < 1e-4.
    assert len(set(canary)) >= 12, f"{len(set(canary))} distinct images of 20"
