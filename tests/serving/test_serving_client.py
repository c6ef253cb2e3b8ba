"""The client's retry rules: bounded, only on connect errors and 503.

The real server cannot be told to answer 503 twice and then 200, so these
tests script the answers with the standard library's HTTP server in a
thread (a stand-in for the model server, used only for retry behaviour;
everything else about the client is tested against the real server in
test_serving_server.py and test_serving_equivalence.py).
"""

import http.server
import threading

import numpy as np
import orjson
import pytest

from serving.client import ClientError, ModelClient
from tests.fixtures.common import free_port


class Scripted(http.server.BaseHTTPRequestHandler):
    script: list = []
    seen: list = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append(self.path)
        status = type(self).script.pop(0) if type(self).script else 200
        body = orjson.dumps({"error": "scripted"} if status != 200 else {
            "model_name": "m", "model_version": "1",
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [1], "data": [2.0]}]})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Scripted.seen = []
    try:
        yield server, Scripted
    finally:
        server.shutdown()
        server.server_close()


def client_for(server, **kwargs):
    host, port = server.server_address[:2]
    return ModelClient(f"http://{host}:{port}", "m", backoff=0.01, **kwargs)


def test_503_is_retried_until_success(scripted):
    server, handler = scripted
    handler.script = [503, 503]
    out = client_for(server, retries=3).infer({"x": np.ones(1, np.float32)}, binary=False)
    assert out["y"].tolist() == [2.0] and len(handler.seen) == 3


def test_retries_are_bounded(scripted):
    server, handler = scripted
    handler.script = [503] * 10
    with pytest.raises(ClientError) as info:
        client_for(server, retries=2).metadata()
    assert info.value.status_code == 503 and len(handler.seen) == 3


@pytest.mark.parametrize("status", [400, 404, 413, 500])
def test_other_errors_are_not_retried(scripted, status):
    server, handler = scripted
    handler.script = [status]
    with pytest.raises(ClientError) as info:
        client_for(server, retries=3).infer({"x": np.ones(1, np.float32)})
    assert info.value.status_code == status and len(handler.seen) == 1
    assert "scripted" in str(info.value)


def test_connection_refused_is_retried_then_reported():
    client = ModelClient(f"http://127.0.0.1:{free_port()}", "m", retries=2, backoff=0.01)
    with pytest.raises(ClientError, match="cannot connect"):
        client.metadata()
    assert client.ready() is False and client.live() is False
    with pytest.raises(ClientError, match="not ready"):
        client.wait_ready(timeout=0.2, interval=0.05)
