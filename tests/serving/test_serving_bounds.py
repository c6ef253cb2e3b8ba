"""Resource bounds at the client -> server boundary (issue 41, findings 6, 12 and 13),
against a real `mlops serve` on the tiny exported detector.

* Finding 6: an expensive request on an idle server ran on the event loop (the
  inline decision looked at what earlier requests cost), and `/v2/health/live`
  waited 2.5 s behind it. Now only a light request (raw tensors of at most one
  warm-up's size) runs there.
* Finding 12: no limit on request heads: 39 MiB of headers grew the server by 345 MB
  and were answered 200; a half-sent request line held its connection open. Now 431
  past `--max-header-bytes` or `--max-headers`, 408 past `--header-timeout`.
* Finding 13: bodies were read, without a bound on how many at once, before the
  in-flight check: 100 clients x 7 MB with `--max-in-flight 2` grew it by 617 MB. Now
  the bodies held share `--max-buffered-bytes` (default in-flight x body limit), and
  a declared length that cannot fit is refused before it is read.

The head limits are in a subclass of uvicorn's httptools protocol
(encode/uvicorn: uvicorn/protocols/http/httptools_impl.py, 0.54 here): it feeds
every byte it reads to the parser, and arms its only timer (keep-alive) after a
response was sent.

Raw sockets where a well-behaved client library would not misbehave. No timed
assertion: what is checked is an order of events (the probe's answer came before the
costly request's), a status, or memory (the server's peak RSS, `VmHWM`, reset before
the flood through `/proc/PID/clear_refs`).
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import os
import pathlib
import select
import socket
import time

import numpy as np
import pytest
import requests
from PIL import Image

from mlops.cli import main
from serving.protocol import Tensor
from serving.service import light_request
from tests.fixtures.serving import served
from tests.serving.test_serving_fault import metric

MODEL = "tiny-detector"
IN_FLIGHT = 2
BODY_LIMIT = 8 * 1024 * 1024  # the default --max-body-bytes
BUDGET = IN_FLIGHT * BODY_LIMIT  # the default --max-buffered-bytes
HEADER_LIMIT = 32 * 1024  # the default --max-header-bytes
COSTLY_IMAGES = 8  # 4096x4096 PNGs: seconds of decoding, 0.6 MB of request


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """The tiny detector: one predictor thread, two in-flight slots, a 1 s header
    timeout, room for eight 16 Mpx images in one request and a minute to decode them
    (the costly request runs whole, however loaded the machine), a minute for a body
    (the stalled senders stay until they are closed), and inline runs allowed for work
    up to 1 s (so that the old decision, by recent work, always chose inline)."""
    with served(tiny_model_dir, "--threads", "1", "--max-in-flight", str(IN_FLIGHT),
                "--inline-max-ms", "1000", "--header-timeout", "1", "--body-timeout", "60",
                "--max-request-pixels", str(COSTLY_IMAGES * 4096 * 4096),
                "--decode-timeout", "60",
                log_dir=tmp_path_factory.mktemp("bounds-server")) as running:
        yield running


def _metrics(server) -> str:
    return requests.get(f"{server.url}/metrics", timeout=30).text


def _raw_request(body: bytes) -> bytes:
    x = np.zeros((1, 3, 128, 128), np.float32)
    return json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode() + body


def _head(length: int, extra: bytes = b"") -> bytes:
    return (f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n").encode() \
        + extra + b"\r\n"


def _read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 30 s pass)."""
    sock.settimeout(30)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_reset(pid: int) -> None:
    pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def _peak_rss(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


# ---- the limits' bounds --------------------------------------------------------------------

def test_limits_out_of_bounds_are_user_errors(tiny_model_dir, capsys):
    """In-process, through the console script's entry point: refused before anything is
    served, naming the flag and its bounds (`serving.limits.BOUNDS`)."""
    for flags, words in (
            (["--max-headers", "0"], "--max-headers 0: must be at least 8"),
            (["--max-header-bytes", str(1 << 30)],
             "--max-header-bytes 1073741824: must be at most"),
            (["--header-timeout", "nan"],
             "--header-timeout nan: must be a number between 0.1 and 300"),
            (["--max-buffered-bytes", "4096"], "must be at least --max-body-bytes")):
        code = main(["serve", str(tiny_model_dir), "--port", "1", *flags])
        assert code != 0
        assert words in capsys.readouterr().err, flags


# ---- finding 6: what runs on the event loop ---------------------------------------------

def test_only_light_requests_are_light():
    """The decision, pure: raw tensors up to the limit's values; images never."""
    raw = Tensor("image", "FP32", (1, 3, 8, 8), np.zeros((1, 3, 8, 8), np.float32))
    assert light_request([raw], 192) and not light_request([raw], 191)
    images = Tensor("image", "BYTES", (1,), np.array([b"\x89PNG"], dtype=object))
    assert not light_request([images], 10 ** 9)  # 4 bytes here may decode to 16 Mpx


def _costly_images() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4096, 4096), (90, 120, 150)).save(out, "PNG")  # 59 KB, 16 Mpx
    encoded = base64.b64encode(out.getvalue()).decode()
    return json.dumps({"inputs": [{"name": "image_bytes", "shape": [COSTLY_IMAGES],
                                   "datatype": "BYTES", "data": [encoded] * COSTLY_IMAGES}]
                       }).encode()


def test_the_liveness_probe_is_answered_while_a_costly_request_runs(server):
    """Cheap requests first (they run inline: the server is idle and they are light),
    then eight 16 Mpx PNGs (seconds of decoding in 0.6 MB). Once the server has spent
    0.5 s of CPU on them, the probe is sent: it must be answered while they are still
    being decoded, i.e. before any byte of their answer was written. On the event loop
    the probe was answered only after them."""
    url = f"{server.url}/v2/models/{MODEL}/infer"
    inline_before = metric(_metrics(server), "model_inline_requests_total")
    for _ in range(3):
        assert requests.post(url, data=_raw_request(b""), timeout=60).status_code == 200
    inline_light = metric(_metrics(server), "model_inline_requests_total") - inline_before
    assert inline_light >= 2  # the first may go to a thread (nothing timed yet)
    body = _costly_images()
    pid = server.process.pid
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as costly:
        spent = _cpu_seconds(pid)
        costly.sendall(_head(len(body)) + body)
        deadline = time.monotonic() + 120
        while _cpu_seconds(pid) - spent < 0.5 and time.monotonic() < deadline:
            time.sleep(0.02)
        live = requests.get(f"{server.url}/v2/health/live", timeout=120)
        answered_first = select.select([costly], [], [], 0)[0]
        assert live.status_code == 200
        assert not answered_first, "the probe was answered only after the costly request"
        answer = _read_answer_once(costly)
    assert _status(answer) == 200, answer[:300]
    inline_after = metric(_metrics(server), "model_inline_requests_total") - inline_before
    assert inline_after == inline_light  # the images went to a predictor thread


def _read_answer_once(sock: socket.socket) -> bytes:
    """One HTTP answer on a kept-alive connection: its head, then Content-Length bytes."""
    sock.settimeout(120)
    out = b""
    while b"\r\n\r\n" not in out:
        out += sock.recv(65536)
    head, rest = out.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


# ---- finding 12: request heads ------------------------------------------------------------

def test_a_request_head_past_the_limit_is_refused(server):
    """40 KB in one header: 431 naming the limit (it was read whole, and answered)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        body = _raw_request(b"")
        sock.sendall(_head(len(body), b"X-Big: " + b"a" * 40_000 + b"\r\n") + body)
        answer = _read_answer(sock)
    assert _status(answer) == 431, answer[:300]
    assert f"exceed {HEADER_LIMIT} bytes".encode() in answer


def test_a_header_flood_does_not_grow_the_server(server):
    """32 MiB of one header, as the review sent 39 MiB (RSS 382 -> 727 MB, then 200;
    the peak grew by 64 MiB here): the server keeps at most the limit of it, answers
    431, and drops the rest."""
    pid = server.process.pid
    _peak_rss_reset(pid)
    before = _peak_rss(pid)
    chunk = b"a" * (1 << 20)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Flood: ")
        for _ in range(32):
            sock.sendall(chunk)
        sock.sendall(b"\r\n\r\n")
        answer = _read_answer(sock)
    assert _status(answer) == 431, answer[:300]
    assert _peak_rss(pid) - before < 32 * 1024 * 1024
    assert requests.get(f"{server.url}/v2/health/live", timeout=30).status_code == 200


def test_too_many_header_fields_are_refused(server):
    fields = b"".join(b"X-Field-%d: 1\r\n" % i for i in range(150))  # 2.5 KB
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        answer = _read_answer(sock)
    assert _status(answer) == 431 and b"more than 100 header fields" in answer, answer[:300]
    many = {f"X-Field-{i}": "1" for i in range(90)}  # under the limit: served
    assert requests.get(f"{server.url}/v2/health/live", headers=many, timeout=30).ok


def test_a_slow_or_silent_head_is_timed_out(server):
    """Half a request line, then nothing: 408 after `--header-timeout` (1 s here); a
    connection that sends nothing at all is closed. Both stayed open before."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as slow, \
            socket.create_connection(("127.0.0.1", server.port), timeout=30) as silent:
        slow.sendall(b"GET /v2/health/li")
        answer = _read_answer(slow)
        assert _status(answer) == 408 and b"not received within 1 s" in answer, answer[:300]
        assert _read_answer(silent) == b""  # closed, without an answer nobody asked for


# ---- finding 13: the bodies held ----------------------------------------------------------

def _buffered(server) -> float:
    return metric(_metrics(server), "model_buffered_body_bytes")


def test_a_body_that_cannot_fit_is_refused_before_it_is_read(server):
    """Two clients send 7 MB of their 8 MB bodies and stall (14 of the 16 MiB budget
    held); a third that declares 4 MB gets 503 before sending a byte of it (it used to
    be read, then timed out: 408). Once the stalled clients go, their bytes are given
    back and a request is served again."""
    stalled = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(_head(8_000_000) + b" " * 7_000_000)
            stalled.append(sock)
        deadline = time.monotonic() + 60
        while _buffered(server) < 14_000_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _buffered(server) >= 14_000_000
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as third:
            third.sendall(_head(4_000_000))
            answer = _read_answer_once(third)
        assert _status(answer) == 503, answer[:300]
        assert b"do not fit" in answer
    finally:
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + 60
    while _buffered(server) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _buffered(server) == 0
    url = f"{server.url}/v2/models/{MODEL}/infer"
    assert requests.post(url, data=_raw_request(b""), timeout=60).status_code == 200


def test_many_large_bodies_at_once_do_not_grow_the_server(server):
    """32 clients send 7 MB each at once (the review: 100 x 7 MB, +617 MB with
    `--max-in-flight 2`; 24 x 7 MB grew the peak by 133 MiB here). The bodies held stay
    within the budget (16 MiB; the peak grew by 27 MiB with the copies parsing makes):
    less than 64 MiB, and each client gets 200 or 503, nothing else."""
    body = _raw_request(b" " * 7_000_000)  # a valid request, padded with JSON whitespace
    pid = server.process.pid
    _peak_rss_reset(pid)
    before = _peak_rss(pid)
    url = f"{server.url}/v2/models/{MODEL}/infer"
    with concurrent.futures.ThreadPoolExecutor(32) as clients:
        statuses = list(clients.map(
            lambda _: requests.post(url, data=body, timeout=120).status_code, range(32)))
    grown = _peak_rss(pid) - before
    assert set(statuses) <= {200, 503}, statuses
    assert 503 in statuses  # more than the budget was offered
    assert grown < 64 * 1024 * 1024, f"peak RSS grew by {grown / 2 ** 20:.0f} MiB"
    assert _buffered(server) == 0
