"""Fault drills: a model declares `fault:` in its infer_cfg.yml and the real server misbehaves.

Each server here is a real `mlops serve` subprocess on a free loopback port,
serving a copy of the session's trained example model with a `fault:`
section added, so the drill reaches the server exactly as a GitOps-deployed
artifact would carry it. Timing checks are lower bounds only (a delay of at
least delay_ms); the one upper bound is a request timeout many times shorter
than a delay that must not apply to that route.
"""

import asyncio
import base64
import math
import re
import shutil
import socket
import time

import orjson
import pytest
import requests
import yaml

from serving.errors import ModelDirError
from serving.fault import FaultDrill
from serving.modeldir import FaultConfig, load_model_dir


def metric(text, name, **labels):
    """Sum of a metric's samples whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        sample = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(sample.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def drill_model_dir(source, dest, fault):
    """A copy of the model dir whose infer_cfg.yml carries `fault` (a mapping, or None)."""
    shutil.copytree(source, dest)
    cfg = yaml.safe_load((dest / "infer_cfg.yml").read_text())
    cfg["fault"] = fault
    (dest / "infer_cfg.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


@pytest.fixture(scope="module")
def png(trained_model):
    return sorted((trained_model.data_dir / "val").glob("*.png"))[0].read_bytes()


def oip_body(png):
    return orjson.dumps({"inputs": [{"name": "img", "datatype": "BYTES", "shape": [1],
                                     "data": [base64.b64encode(png).decode()]}]})


def compat_body(png):
    return orjson.dumps({"feed": [{"image": base64.b64encode(png).decode()}],
                         "fetch": ["bbox"]})


def routes(server):
    """The inference routes (URL, body maker): the drill must apply on every one."""
    base = f"{server.url}/v2/models/{server.model_name}"
    return [(f"{base}/infer", oip_body),
            (f"{base}/versions/{server.model_version}/infer", oip_body),
            (f"{server.url}/GeneralModelService/inference", compat_body)]


def scrape(server):
    return requests.get(f"{server.url}/metrics", timeout=10).text


# ---- the declaration: infer_cfg.yml `fault:` ----------------------------------------


def fake_model_dir(path, infer_cfg_text):
    """Just enough files for load_model_dir to reach infer_cfg.yml (no Paddle needed)."""
    path.mkdir()
    (path / "inference.json").write_text("{}")
    (path / "inference.pdiparams").write_bytes(b"")
    (path / "infer_cfg.yml").write_text(infer_cfg_text)
    return path


@pytest.mark.parametrize("fault, field", [
    ("{error_rate: 1.5}", "fault.error_rate"),
    ("{error_rate: -0.1}", "fault.error_rate"),
    ("{delay_ms: -1}", "fault.delay_ms"),
    ("{delay_ms: .nan}", "fault.delay_ms"),
    ("{delay_ms: '200'}", "fault.delay_ms"),
    ("{error_status: 404}", "fault.error_status"),
    ("{delay: 200}", "fault.delay"),  # a misspelt drill must not silently do nothing
    ("[200]", "fault"),
])
def test_bad_fault_is_an_error_naming_file_and_field(tmp_path, fault, field):
    model = fake_model_dir(tmp_path / "m", f"labels: [circle]\nfault: {fault}\n")
    with pytest.raises(ModelDirError) as caught:
        load_model_dir(model)
    message = str(caught.value)
    assert str(model / "infer_cfg.yml") in message
    assert f"{field}:" in message


def test_no_fault_section_is_no_drill(tmp_path):
    plain = load_model_dir(fake_model_dir(tmp_path / "a", "labels: [circle]\n"))
    assert plain.infer_cfg.fault is None
    zero = load_model_dir(fake_model_dir(tmp_path / "b", "fault: {delay_ms: 0}\n")).infer_cfg.fault
    assert zero is not None and not zero.active
    assert not FaultDrill(zero, seed="x").active
    full = load_model_dir(fake_model_dir(
        tmp_path / "c", "fault: {delay_ms: 200, error_rate: 0.3, error_status: 503}\n"))
    assert full.infer_cfg.fault == FaultConfig(delay_ms=200, error_rate=0.3, error_status=503)


def test_error_share_follows_error_rate_and_is_reproducible():
    """In-process draws (no delay): the share over many requests is close to error_rate."""
    async def draws(drill, n):
        return [await drill.apply() for _ in range(n)]

    n, rate = 20_000, 0.3
    drill = FaultConfig(error_rate=rate, error_status=503)
    first = asyncio.run(draws(FaultDrill(drill, "m/v1"), n))
    errors = sum(status == 503 for status in first)
    assert set(first) == {None, 503}
    assert abs(errors - n * rate) <= 5 * math.sqrt(n * rate * (1 - rate))  # 5 sigma
    again = asyncio.run(draws(FaultDrill(drill, "m/v1"), n))
    assert again == first  # seeded: a rehearsal can be replayed
    assert asyncio.run(draws(FaultDrill(FaultConfig(error_rate=1.0), "m/v1"), 100)) == [500] * 100


# ---- the real server ----------------------------------------------------------------


def test_delay_applies_to_every_inference_route_and_shows_in_metrics(
        model_server, trained_model, tmp_path, png):
    delay = 0.25
    model = drill_model_dir(trained_model.model_dir, tmp_path / "slow", {"delay_ms": 250})
    server = model_server(model)
    labels = {"model_name": server.model_name, "model_version": server.model_version}
    assert "FAULT DRILL ACTIVE" in server.log() and "delay_ms=250" in server.log()

    before = scrape(server)
    sent = 0
    with requests.Session() as http:
        for url, body in routes(server) * 2:
            start = time.perf_counter()
            response = http.post(url, data=body(png), timeout=30)
            elapsed = time.perf_counter() - start
            sent += 1
            assert response.status_code == 200, response.text  # slow, but a real answer
            assert elapsed >= delay, (url, elapsed)
    after = scrape(server)

    histogram = "model_request_duration_seconds"
    assert metric(after, f"{histogram}_count", **labels) - \
        metric(before, f"{histogram}_count", **labels) == sent
    assert metric(after, f"{histogram}_sum", **labels) - \
        metric(before, f"{histogram}_sum", **labels) >= sent * delay
    assert metric(after, "model_requests_total", status_code="200", **labels) == sent
    assert metric(after, "model_fault_delay_seconds", **labels) == delay
    assert metric(after, "model_fault_error_ratio", **labels) == 0
    meta = requests.get(f"{server.url}/v2/models/{server.model_name}", timeout=10).json()
    assert meta["parameters"]["fault_drill"] == {
        "delay_ms": 250.0, "error_rate": 0.0, "error_status": 500}


def test_health_metadata_and_metrics_are_not_delayed(model_server, trained_model, tmp_path, png):
    """A 60 s drill delay: the fixture's 1 s readiness polls and the 10 s timeouts here would
    fail if these routes were delayed, or if a delayed inference blocked the event loop."""
    model = drill_model_dir(trained_model.model_dir, tmp_path / "very-slow",
                            {"delay_ms": 60_000})
    server = model_server(model, "--graceful-timeout", "2")
    payload = oip_body(png)
    # The delayed inference on a raw socket: the test reads whether it was answered when
    # it likes, instead of waiting out a client timeout set long enough for the checks.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as pending:
        pending.sendall(f"POST /v2/models/{server.model_name}/infer HTTP/1.1\r\nHost: x\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(payload)}"
                        "\r\n\r\n".encode() + payload)
        time.sleep(0.5)  # let it reach the server and start its delay (a wait, not an assertion)
        for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{server.model_name}",
                     f"/v2/models/{server.model_name}/ready", "/v2", "/metrics"):
            assert requests.get(server.url + path, timeout=10).status_code == 200, path
        assert requests.post(f"{server.url}/v2/repository/index", timeout=10).status_code == 200
        pending.settimeout(1.0)
        with pytest.raises(socket.timeout):  # the inference itself is delayed: no answer yet
            pending.recv(1)


def test_error_rate_one_fails_every_inference_route_with_an_oip_error(
        model_server, trained_model, tmp_path, png):
    model = drill_model_dir(trained_model.model_dir, tmp_path / "broken", {"error_rate": 1.0})
    server = model_server(model)
    labels = {"model_name": server.model_name, "model_version": server.model_version}
    sent = 0
    for url, body in routes(server) * 3:
        response = requests.post(url, data=body(png), timeout=30)
        sent += 1
        assert response.status_code == 500
        assert response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert error.startswith("fault drill: ") and "error_rate=1" in error
    # the drill comes after routing and readiness: those errors stay what they are
    other = requests.post(f"{server.url}/v2/models/nope/infer", data=oip_body(png), timeout=30)
    assert other.status_code == 404
    assert requests.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200

    text = scrape(server)
    assert metric(text, "model_requests_total", status_code="500", **labels) == sent
    assert metric(text, "model_requests_total", status_code="200", **labels) == 0
    assert metric(text, "model_request_duration_seconds_count", **labels) == sent + 1
    assert metric(text, "model_fault_error_ratio", **labels) == 1.0
    assert metric(text, "model_fault_delay_seconds", **labels) == 0
    # an injected error is no answer: nothing about the model's quality is recorded
    for family in ("model_detections_per_image_count", "model_top_score_count",
                   "model_class_detections_total", "model_input_brightness_count"):
        assert metric(text, family, **labels) == 0, family
    assert "fault drill" not in " ".join(  # injected errors are not logged one by one
        line for line in server.log().splitlines() if " ERROR " in line)


def test_half_the_requests_fail_within_a_binomial_bound(model_server, trained_model, tmp_path,
                                                        png):
    model = drill_model_dir(trained_model.model_dir, tmp_path / "flaky",
                            {"error_rate": 0.5, "error_status": 503})
    server = model_server(model)
    labels = {"model_name": server.model_name, "model_version": server.model_version}
    n, rate = 200, 0.5
    url, body = routes(server)[0]
    payload = body(png)
    codes = []
    with requests.Session() as http:
        for _ in range(n):
            response = http.post(url, data=payload, timeout=30)
            codes.append(response.status_code)
            if response.status_code == 200:
                assert {o["name"] for o in response.json()["outputs"]} == {
                    "bbox", "bbox_num", "labels"}
            else:
                assert response.json()["error"].startswith("fault drill: ")
    errors = codes.count(503)
    assert set(codes) <= {200, 503}
    assert abs(errors - n * rate) <= 5 * math.sqrt(n * rate * (1 - rate))  # 5 sigma: 65..135

    text = scrape(server)
    assert metric(text, "model_requests_total", status_code="503", **labels) == errors
    assert metric(text, "model_requests_total", status_code="200", **labels) == n - errors
    # one image per request: the quality signals count the real answers only
    assert metric(text, "model_detections_per_image_count", **labels) == n - errors
    assert metric(text, "model_input_pixels_count", **labels) == n - errors


def test_a_model_without_fault_has_no_drill(shapes_server):
    labels = {"model_name": shapes_server.model_name,
              "model_version": shapes_server.model_version}
    text = scrape(shapes_server)
    assert "model_fault_delay_seconds{" in text and "model_fault_error_ratio{" in text
    assert metric(text, "model_fault_delay_seconds", **labels) == 0
    assert metric(text, "model_fault_error_ratio", **labels) == 0
    meta = requests.get(f"{shapes_server.url}/v2/models/{shapes_server.model_name}",
                        timeout=10).json()
    assert "fault_drill" not in meta["parameters"]
    assert "FAULT DRILL" not in shapes_server.log()
