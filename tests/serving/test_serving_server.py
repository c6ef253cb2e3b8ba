"""The real model server on the real exported model: every route and every error code.

One server process (the session's trained example model, shared with the
conformance and equivalence tests) serves most tests of this module; tests
that need other limits, or stop their server, start their own. Every server
is a `mlops serve` subprocess on a free loopback port.
"""

import asyncio
import base64
import concurrent.futures
import io
import re
import signal
import threading
import time

import numpy as np
import orjson
import pytest
import requests
import yaml
from PIL import Image

from serving.client import ModelClient, encode_request
from serving.modeldir import InferConfig
from serving.protocol import Tensor

MAX_BODY = 4_000_000  # the shapes_server fixture's --max-body-bytes


@pytest.fixture(scope="module")
def server(shapes_server):
    return shapes_server


@pytest.fixture(scope="module")
def val_images(trained_model):
    return [p.read_bytes() for p in sorted((trained_model.data_dir / "val").glob("*.png"))[:4]]


def infer_url(server, version=False):
    base = f"{server.url}/v2/models/{server.model_name}"
    return f"{base}/versions/{server.model_version}/infer" if version else f"{base}/infer"


def image_body(images, name="image_bytes"):
    return orjson.dumps({"inputs": [{"name": name, "datatype": "BYTES", "shape": [len(images)],
                                     "data": [base64.b64encode(i).decode() for i in images]}]})


def raw_body(array, name="image", datatype="FP32"):
    return orjson.dumps({"inputs": [{"name": name, "datatype": datatype,
                                     "shape": list(array.shape), "data": array.ravel()}]},
                        option=orjson.OPT_SERIALIZE_NUMPY)


def declared_outputs(trained_model):
    """Output tensor name -> shape, as the training export wrote them to infer_cfg.yml."""
    cfg = yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())
    return {o["tensor"]: o["shape"] for o in cfg["outputs"]}


def metric_value(text, name, **labels):
    """Sum of a metric's samples whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample_labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# ---- health and metadata ------------------------------------------------------------


def test_health_routes(server):
    assert requests.get(f"{server.url}/v2/health/live").json() == {"live": True}
    assert requests.get(f"{server.url}/v2/health/ready").json() == {"ready": True}
    model = requests.get(f"{server.url}/v2/models/{server.model_name}/ready")
    assert model.status_code == 200 and model.json()["ready"] is True
    versioned = requests.get(
        f"{server.url}/v2/models/{server.model_name}/versions/{server.model_version}/ready")
    assert versioned.status_code == 200
    meta = requests.get(f"{server.url}/v2").json()
    assert "binary_tensor_data" in meta["extensions"]
    index = requests.post(f"{server.url}/v2/repository/index").json()
    assert index == [{"name": server.model_name, "version": server.model_version,
                      "state": "READY"}]


def test_metadata_reports_the_real_signature(server, trained_model):
    meta = requests.get(f"{server.url}/v2/models/{server.model_name}").json()
    assert meta["name"] == "shapes-detector" and meta["versions"] == [server.model_version]
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 128, 128]}]
    # the exporter's own record of its outputs (infer_cfg.yml) must match what the
    # server read from the program
    assert {o["name"]: o["shape"] for o in meta["outputs"]} == declared_outputs(trained_model)
    assert all(o["datatype"] == "FP32" for o in meta["outputs"])
    same = requests.get(
        f"{server.url}/v2/models/{server.model_name}/versions/{server.model_version}").json()
    assert same == meta


# ---- inference ------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [False, True], ids=["model", "version"])
def test_image_input_returns_detections(server, val_images, versioned):
    response = requests.post(infer_url(server, versioned), data=image_body(val_images[:2]))
    assert response.status_code == 200, response.text
    doc = response.json()
    outputs = {o["name"]: o for o in doc["outputs"]}
    assert set(outputs) == {"bbox", "bbox_num", "labels"}
    counts = outputs["bbox_num"]["data"]
    assert outputs["bbox_num"]["shape"] == [2] and outputs["bbox"]["shape"] == [sum(counts), 6]
    assert sum(counts) > 0
    rows = np.asarray(outputs["bbox"]["data"], np.float32).reshape(-1, 6)
    assert set(rows[:, 0].astype(int)) <= {1, 2, 3}
    assert np.all((rows[:, 1] > 0) & (rows[:, 1] <= 1))
    # Inside the image (the val images are 128x128). x2 >= x1 is not asserted: the
    # example's decoder (which the server matches) keeps a negative predicted size.
    assert np.all(rows[:, 2:] >= 0) and np.all(rows[:, 2:] <= 128)
    names = {1: "circle", 2: "square", 3: "triangle"}
    assert outputs["labels"]["data"] == [names[int(c)] for c in rows[:, 0]]


def test_raw_tensor_input_returns_raw_outputs(server, trained_model):
    x = np.random.default_rng(0).normal(size=(2, 3, 128, 128)).astype(np.float32)
    response = requests.post(infer_url(server), data=raw_body(x))
    assert response.status_code == 200, response.text
    shapes = {o["name"]: o["shape"] for o in response.json()["outputs"]}
    assert shapes == {
        name: [2, *shape[1:]] for name, shape in declared_outputs(trained_model).items()
    }
    assert len(shapes) == 3


def test_requested_outputs_and_request_id(server):
    x = np.zeros((1, 3, 128, 128), np.float32)
    doc = orjson.loads(raw_body(x))
    doc["id"] = "abc"
    doc["outputs"] = [{"name": "fetch_name_2"}]
    response = requests.post(infer_url(server), data=orjson.dumps(doc))
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == "abc" and [o["name"] for o in body["outputs"]] == ["fetch_name_2"]


def test_client_detect_and_binary_infer(server, val_images):
    client = ModelClient(server.url, server.model_name)
    detections = client.detect(val_images[0])
    assert detections and all(d.label in {"circle", "square", "triangle"} for d in detections)
    x = np.ones((1, 3, 128, 128), np.float32)
    binary = client.infer({"image": x})
    plain = client.infer({"image": x}, binary=False)
    assert binary.keys() == plain.keys()
    for name in binary:
        np.testing.assert_array_equal(binary[name], plain[name])


def test_paddle_serving_compat_routes(server, val_images, trained_model):
    url = f"{server.url}/GeneralModelService/inference"
    feed = requests.post(url, json={"feed": [{"image": base64.b64encode(val_images[0]).decode()}],
                                    "fetch": ["bbox", "bbox_num"]})
    assert feed.status_code == 200, feed.text
    result = feed.json()["result"]
    assert set(result) == {"bbox", "bbox_num"} and len(result["bbox"]) == result["bbox_num"][0]
    x = np.zeros((1, 3, 128, 128), np.float32)
    tensor = requests.post(url, json={
        "tensor": [{"name": "image", "alias_name": "image", "elem_type": 1,
                    "shape": [1, 3, 128, 128], "float_data": x.ravel().tolist()}],
        "fetch_var_names": ["fetch_name_0"], "log_id": 11})
    assert tensor.status_code == 200, tensor.text
    doc = tensor.json()
    assert doc["err_no"] == 0 and doc["log_id"] == 11
    (out,) = doc["outputs"][0]["tensor"]
    shape = [1, *declared_outputs(trained_model)["fetch_name_0"][1:]]
    assert out["name"] == "fetch_name_0" and out["shape"] == shape
    assert out["elem_type"] == 1 and len(out["float_data"]) == np.prod(shape)
    bad = requests.post(url, json={"feed": [{"image": "@@"}], "fetch": ["bbox"]})
    assert bad.status_code == 400 and "base64" in bad.json()["error"]


# ---- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, words",
    [
        (b"{nope", ["not valid JSON"]),
        (raw_body(np.zeros((1, 3, 128, 128), np.float32), name="pixels"), ["'pixels'", "image"]),
        (
            raw_body(np.zeros((1, 3, 128, 128), np.int64), datatype="INT64"),
            ["'image'", "INT64", "FP32"],
        ),
        (raw_body(np.zeros((1, 3, 128), np.float32)), ["'image'", "[1, 3, 128]"]),
        (raw_body(np.zeros((1, 4, 128, 128), np.float32)), ["'image'", "[1, 4, 128, 128]"]),
        (raw_body(np.zeros((0, 3, 128, 128), np.float32)), ["'image'"]),
        (image_body([b"definitely not a png"], name="photo"), ["'photo'", "PNG or JPEG"]),
        (
            orjson.dumps(
                {
                    "inputs": [
                        {
                            "name": "image",
                            "datatype": "FP32",
                            "shape": [1, 3, 128, 128],
                            "data": [1.0, 2.0],
                        }
                    ]
                }
            ),
            ["'image'", "49152", "2"],
        ),
        (
            orjson.dumps(
                {
                    **orjson.loads(raw_body(np.zeros((1, 3, 128, 128), np.float32))),
                    "outputs": [{"name": "nope"}],
                }
            ),
            ["nope", "fetch_name_0"],
        ),
    ],
    ids=[
        "json",
        "unknown-input",
        "dtype",
        "rank",
        "dim",
        "empty-batch",
        "image",
        "count",
        "unknown-output",
    ],
)
def test_bad_requests_get_400_naming_the_tensor(server, body, words):
    response = requests.post(infer_url(server), data=body)
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    for word in words:
        assert word in message
    assert requests.get(f"{server.url}/v2/health/ready").status_code == 200


@pytest.mark.parametrize("path, words", [
    ("/v2/models/other/infer", ["'other'", "shapes-detector"]),
    ("/v2/models/shapes-detector/versions/v-nope/infer", ["'v-nope'"]),
    ("/v2/nothing/here", ["/v2/nothing/here"]),
])
def test_unknown_model_version_or_route_is_404(server, path, words):
    response = requests.post(f"{server.url}{path}", data=b"{}")
    assert response.status_code == 404
    for word in words:
        assert word in response.json()["error"]
    assert requests.get(f"{server.url}/v2/models/other").status_code == 404


def test_a_version_without_a_probe_set_says_so_with_404(server):
    """The paired answers probe asks the stable for its probe images (`serving/probe.py`);
    this export ships none, and a wrong version is refused like on the infer route."""
    base = f"{server.url}/v2/models/{server.model_name}"
    response = requests.get(f"{base}/versions/{server.model_version}/probe")
    assert response.status_code == 404 and "ships no probe images" in response.json()["error"]
    response = requests.get(f"{base}/versions/v-nope/probe")
    assert response.status_code == 404 and "'v-nope'" in response.json()["error"]


def test_body_over_the_limit_is_413(server):
    big = b" " * (MAX_BODY + 1)
    response = requests.post(infer_url(server), data=big)
    assert response.status_code == 413 and str(MAX_BODY) in response.json()["error"]

    def chunks():  # no Content-Length: the server must count while streaming
        for _ in range(80):
            yield b" " * 65536

    streamed = requests.post(infer_url(server), data=chunks())
    assert streamed.status_code == 413
    assert requests.get(f"{server.url}/v2/health/ready").status_code == 200


def test_metrics_count_requests_by_status(server, val_images, trained_model):
    requests.post(infer_url(server), data=image_body(val_images[:1]))
    requests.post(infer_url(server), data=b"{nope")
    text = requests.get(f"{server.url}/metrics").text
    labels = {"model_name": server.model_name, "model_version": server.model_version}
    assert metric_value(text, "model_requests_total", status_code="200", **labels) >= 1
    assert metric_value(text, "model_requests_total", status_code="400", **labels) >= 1
    assert metric_value(text, "model_request_duration_seconds_count", **labels) >= 2
    assert metric_value(text, "model_inference_duration_seconds_count", **labels) >= 1
    assert 'model_request_duration_seconds_bucket{le="0.001"' in text
    assert 'le="1.0"' in text and 'le="5.0"' in text
    assert metric_value(text, "model_ready", **labels) == 1
    assert metric_value(text, "model_in_flight_requests", **labels) == 0
    record = yaml.safe_load((trained_model.model_dir / "model.yaml").read_text())
    assert metric_value(text, "model_info", weights_sha256=record["weights_sha256"],
                        paddle_version="3.3.1", **labels) == 1


def quality_series(text, labels):
    """The quality families of one version, as {(name, label value): value}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(("model_detections_per_image",
                                                         "model_top_score",
                                                         "model_class_detections_total",
                                                         "model_input_")):
            continue
        head, value = line.rsplit(" ", 1)
        name = head.split("{")[0]
        sample = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if all(sample.get(k) == v for k, v in labels.items()):
            out[(name, sample.get("le") or sample.get("class"))] = float(value)
    return out


def test_metrics_record_the_quality_of_real_answers(server, val_images, trained_model):
    """Real encoded images through both image routes: the quality series of this version
    move by exactly what the clients received; raw tensors and errors move nothing."""
    labels = {"model_name": server.model_name, "model_version": server.model_version}
    black = np.zeros((160, 200, 3), np.uint8)  # 200x160: resized for the model, no shapes
    buffer = io.BytesIO()
    Image.fromarray(black).save(buffer, format="PNG")
    sent = [*val_images[:3], buffer.getvalue()]
    before = quality_series(requests.get(f"{server.url}/metrics").text, labels)

    oip = requests.post(infer_url(server), data=image_body(sent[:3]))
    assert oip.status_code == 200, oip.text
    outputs = {o["name"]: o["data"] for o in oip.json()["outputs"]}
    per_image = list(outputs["bbox_num"])
    scores = np.asarray(outputs["bbox"], np.float32).reshape(-1, 6)[:, 1].tolist()
    names = list(outputs["labels"])
    compat = requests.post(f"{server.url}/GeneralModelService/inference", json={
        "feed": [{"image": base64.b64encode(sent[3]).decode()}],
        "fetch": ["bbox", "bbox_num", "labels"]})
    assert compat.status_code == 200, compat.text
    result = compat.json()["result"]
    per_image += result["bbox_num"]
    scores += [row[1] for row in result["bbox"]]
    names += result["labels"]
    # neither a raw-tensor answer nor an error is a detection answer
    raw = requests.post(infer_url(server), data=raw_body(np.zeros((2, 3, 128, 128), np.float32)))
    assert raw.status_code == 200
    assert requests.post(infer_url(server), data=image_body([b"not a png"])).status_code == 400
    after = quality_series(requests.get(f"{server.url}/metrics").text, labels)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}

    assert sum(per_image) > 0 and len(per_image) == len(sent)
    # the detections a user would draw: those at the model's draw_threshold or above
    threshold = InferConfig.model_validate(
        yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())).draw_threshold
    rows = np.cumsum([0, *per_image])
    # top scores: per image, the best of what the client got (0.0 without any)
    tops = [max(scores[rows[k]:rows[k + 1]], default=0.0) for k in range(len(sent))]
    kept = [i for i, score in enumerate(scores) if score >= threshold]
    per_image = [sum(1 for i in kept if rows[k] <= i < rows[k + 1]) for k in range(len(sent))]
    names = [names[i] for i in kept]
    assert delta[("model_detections_per_image_count", None)] == len(sent)
    assert delta[("model_detections_per_image_sum", None)] == sum(per_image)
    for bound in ("0.0", "1.0", "2.0", "3.0", "5.0", "10.0", "100.0", "+Inf"):
        expected = sum(1 for n in per_image if n <= float(bound))
        assert delta[("model_detections_per_image_bucket", bound)] == expected, bound
    assert delta[("model_top_score_count", None)] == len(sent)
    assert delta[("model_top_score_sum", None)] == pytest.approx(sum(tops), abs=1e-4)
    assert delta[("model_top_score_bucket", "0.05")] == sum(1 for t in tops if t <= 0.05)
    # by class: exactly the labels returned, on the model's names plus `other`
    classes = {key[1] for key in after if key[0] == "model_class_detections_total"}
    assert classes == {"circle", "square", "triangle", "other"}
    for name in classes:
        assert delta[("model_class_detections_total", name)] == names.count(name), name
    assert sum(delta[("model_class_detections_total", n)] for n in classes) == len(kept)
    # inputs: the val images are 128x128 (2^14 pixels), the black one 200x160 and dark
    assert delta[("model_input_pixels_count", None)] == len(sent)
    assert delta[("model_input_pixels_bucket", "8192.0")] == 0
    assert delta[("model_input_pixels_bucket", "16384.0")] == 3
    assert delta[("model_input_pixels_bucket", "32768.0")] == 4
    assert delta[("model_input_pixels_sum", None)] == 3 * 128 * 128 + 200 * 160
    brightness = [np.asarray(Image.open(io.BytesIO(i)).convert("RGB")).mean() / 255
                  for i in sent]
    assert brightness[3] == 0 and min(brightness[:3]) > 0.05
    assert delta[("model_input_brightness_count", None)] == len(sent)
    assert delta[("model_input_brightness_sum", None)] == pytest.approx(sum(brightness),
                                                                         abs=1e-4)
    assert delta[("model_input_brightness_bucket", "0.05")] == 1  # the black image only


# ---- 500, 503, shutdown: servers of their own ---------------------------------------


def test_inference_failure_is_500_and_the_server_survives(model_server, tiny_model_dir):
    server = model_server(tiny_model_dir)
    bad = requests.post(infer_url(server), data=raw_body(np.zeros((1, 3, 64, 64), np.float32)))
    assert bad.status_code == 500, bad.text
    assert "inference failed" in bad.json()["error"]
    good = requests.post(infer_url(server), data=raw_body(np.zeros((1, 3, 128, 128), np.float32)))
    assert good.status_code == 200
    text = requests.get(f"{server.url}/metrics").text
    assert metric_value(text, "model_requests_total", status_code="500") == 1


def test_burst_past_the_in_flight_limit_gets_503s(model_server, trained_model):
    server = model_server(trained_model.model_dir, "--max-in-flight", "2", "--threads", "1")
    body = raw_body(np.zeros((16, 3, 128, 128), np.float32))  # ~0.1 s of inference each
    rss_before = server.rss_bytes()
    barrier = threading.Barrier(24)

    def fire(_):
        barrier.wait()
        return requests.post(infer_url(server), data=body, timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        codes = list(pool.map(fire, range(24)))
    assert set(codes) <= {200, 503}
    assert codes.count(503) >= 1 and codes.count(200) >= 2
    overloaded = requests.post(infer_url(server), data=b"{}")  # still answering, properly
    assert overloaded.status_code == 400
    assert requests.get(f"{server.url}/v2/health/ready").status_code == 200
    assert server.rss_bytes() - rss_before < 300 * 2**20
    text = requests.get(f"{server.url}/metrics").text
    assert metric_value(text, "model_requests_total", status_code="503") == codes.count(503)


def test_sigterm_finishes_in_flight_requests(model_server, trained_model):
    server = model_server(trained_model.model_dir, "--threads", "1",
                          "--max-body-bytes", str(64 * 2**20))
    x = np.zeros((64, 3, 128, 128), np.float32)  # ~0.5 s of inference
    body, length = encode_request([Tensor("image", "FP32", x.shape, x)], binary=True)
    headers = {"Inference-Header-Content-Length": str(length)}
    result = {}

    def slow():
        response = requests.post(infer_url(server), data=body, headers=headers, timeout=60)
        result["status"] = response.status_code

    worker = threading.Thread(target=slow)
    worker.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the request is admitted
        text = requests.get(f"{server.url}/metrics").text
        if metric_value(text, "model_in_flight_requests") >= 1:
            break
        time.sleep(0.005)
    server.process.send_signal(signal.SIGTERM)
    worker.join(60)
    assert result.get("status") == 200
    # uvicorn re-raises the signal after its graceful shutdown: exit "by SIGTERM", as asked.
    assert server.process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "Finished server process" in server.log()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}/v2/health/live", timeout=2)


def test_not_ready_until_loaded():
    """In-process app whose model is never loaded (the ASGI lifespan, which starts the
    loader, is not run): live, but 503 on readiness, metadata and inference."""

    # lazy (collection cost): httpx loads only when this runs
    import httpx

    # lazy (collection cost): it pulls opencv
    from serving.dataplane import ServerSettings, ServerState

    # lazy (collection cost): it pulls opencv, starlette, uvicorn
    from serving.server import build_app

    state = ServerState(ServerSettings("m", "1"), model=None)

    async def exercise():
        transport = httpx.ASGITransport(app=build_app(state))
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            assert (await client.get("/v2/health/live")).status_code == 200
            assert (await client.get("/v2/health/ready")).status_code == 503
            response = await client.post("/v2/models/m/infer", content=b"{}")
            assert response.status_code == 503 and "not ready" in response.json()["error"]
            assert (await client.get("/v2/models/m")).status_code == 503
            return (await client.get("/metrics")).text

    metrics = asyncio.run(exercise())
    assert 'model_requests_total{model_name="m",model_version="1",status_code="503"} 1.0' in metrics
    assert 'model_ready{model_name="m",model_version="1"} 0.0' in metrics
