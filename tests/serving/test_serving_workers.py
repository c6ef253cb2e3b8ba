"""Several worker processes behind one port (`mlops serve --workers N`).

Real `mlops serve` subprocesses on free loopback ports, serving the session's
trained example model. What the canary controller relies on is checked
exactly: K requests sent to a 2-worker server are K in `/metrics`' request
counter and in every histogram, whichever worker answered the scrape. And
no worker outlives its supervisor, stopped by SIGTERM or killed by SIGKILL.
"""

import base64
import concurrent.futures
import pathlib
import shutil
import signal
import threading
import time

import numpy as np
import orjson
import pytest
import requests
import yaml

from mlops.cli import main
from serving.runtime import Batcher
from tests.serving.test_serving_fault import metric


def children(pid):
    """Pids of the live processes whose parent is `pid`."""
    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def image_body(pngs):
    return orjson.dumps({"inputs": [{
        "name": "image", "datatype": "BYTES", "shape": [len(pngs)],
        "data": [base64.b64encode(p).decode() for p in pngs]}]})


def some(items, i):
    """One or two of `items` (by i), for requests of one and of several images."""
    return [items[i % len(items)], items[(i + 1) % len(items)]][: 1 + i % 2]


@pytest.fixture(scope="module")
def pngs(trained_model):
    return [p.read_bytes() for p in sorted((trained_model.data_dir / "val").glob("*.png"))[:4]]


def test_two_workers_count_every_request_exactly_once(model_server, trained_model, pngs):
    server = model_server(trained_model.model_dir, "--workers", "2")
    workers = children(server.process.pid)
    url = f"{server.url}/v2/models/{server.model_name}/infer"
    bodies = [image_body(some(pngs, i)) for i in range(24)]  # 1 or 2 images
    images = sum(len(some(pngs, i)) for i in range(24))

    def send(body):  # a new connection each: the kernel spreads them over the workers
        return requests.post(url, data=body, timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(send, bodies))
    assert statuses == [200] * len(bodies)
    assert requests.post(url, data=b"not json", timeout=10).status_code == 400

    labels = {"model_name": server.model_name, "model_version": server.model_version}
    for _ in range(6):  # every scrape, whichever worker answers it, sees the whole server
        text = requests.get(f"{server.url}/metrics", timeout=10).text
        assert metric(text, "model_requests_total", status_code="200", **labels) == 24
        assert metric(text, "model_requests_total", status_code="400", **labels) == 1
        assert metric(text, "model_request_duration_seconds_count", **labels) == 25
        assert metric(text, "model_inference_duration_seconds_count", **labels) == 24
        assert metric(text, "model_detections_per_image_count", **labels) == images
        assert metric(text, "model_input_pixels_count", **labels) == images
        assert metric(text, "model_ready", **labels) == 1
        assert metric(text, "model_in_flight_requests", **labels) == 0
        assert metric(text, "model_info", **labels) == 1
        assert 'pid="' not in text  # the same series as a single process
        assert requests.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200

    # Stopped by SIGTERM: every worker drains and exits with the supervisor.
    from tests.fixtures.serving import stop_server

    assert len([p for p in workers if "spawn_main" in _cmdline(p)]) == 2
    assert stop_server(server) == 0
    assert wait_gone(workers) == []
    assert "Finished server process" in server.log()


def _cmdline(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_workers_die_with_a_killed_supervisor(model_server, trained_model):
    server = model_server(trained_model.model_dir, "--workers", "2", "--threads", "1")
    spawned = children(server.process.pid)  # the workers and multiprocessing's tracker
    assert len([p for p in spawned if "spawn_main" in _cmdline(p)]) == 2
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(timeout=10)
    assert wait_gone(spawned) == []  # PR_SET_PDEATHSIG: SIGTERM from the kernel


def test_a_worker_that_cannot_load_stops_the_server(model_server, trained_model):
    with pytest.raises(RuntimeError, match="server exited with 1") as failure:
        model_server(trained_model.model_dir, "--workers", "2", "--weights-sha256", "0" * 64)
    assert "refusing to serve other weights" in str(failure.value)


def test_infer_cfg_serving_section_and_fault_drill_across_workers(model_server, trained_model,
                                                                   pngs, tmp_path):
    """`serving: {workers: 2}` in infer_cfg.yml starts two workers; a drill failing every
    request is counted once per request across them."""
    model = tmp_path / "model"
    shutil.copytree(trained_model.model_dir, model)
    cfg = yaml.safe_load((model / "infer_cfg.yml").read_text())
    cfg["serving"] = {"workers": 2}
    cfg["fault"] = {"error_rate": 1.0, "error_status": 503}
    (model / "infer_cfg.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    server = model_server(model, "--threads", "1")
    assert len([p for p in children(server.process.pid) if "spawn_main" in _cmdline(p)]) == 2
    url = f"{server.url}/v2/models/{server.model_name}/infer"
    statuses = [requests.post(url, data=image_body(pngs[:1]), timeout=30).status_code
                for _ in range(10)]
    assert statuses == [503] * 10
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    assert metric(text, "model_requests_total", status_code="503") == 10
    assert metric(text, "model_fault_error_ratio") == 1.0


# ---- adaptive batching ---------------------------------------------------------------------


def _answers(server, bodies):
    """Send every body at once (each on its own connection); the decoded answers."""
    url = f"{server.url}/v2/models/{server.model_name}/infer"

    def send(body):
        response = requests.post(url, data=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def _raw_body(seed, n):
    image = np.random.default_rng(seed).random((n, 3, 128, 128), dtype=np.float32)
    return tensor_body(image)


def tensor_body(image):
    return orjson.dumps({"inputs": [{"name": "image", "datatype": "FP32",
                                     "shape": list(image.shape),
                                     "data": image.reshape(-1).tolist()}]})


def _assert_same(batched, alone):
    assert len(batched) == len(alone)
    for got, want in zip(batched, alone):
        assert [o["name"] for o in got["outputs"]] == [o["name"] for o in want["outputs"]]
        for g, w in zip(got["outputs"], want["outputs"]):
            assert g["shape"] == w["shape"], g["name"]
            if g["datatype"] == "BYTES":
                assert g["data"] == w["data"]
            else:  # a batched run may round differently in the last bits
                np.testing.assert_allclose(np.asarray(g["data"], np.float64),
                                           np.asarray(w["data"], np.float64),
                                           rtol=1e-4, atol=1e-4)


def test_batching_answers_equal_unbatched_answers(model_server, shapes_server, trained_model,
                                                  pngs):
    batched = model_server(trained_model.model_dir, "--batch-max-size", "4",
                           "--batch-timeout-ms", "50", "--max-body-bytes", "4000000")
    # Images (one or two per request: both count toward the 4) and raw tensors of a batch
    # of one and of two (the model's input size is fixed: other shapes are unit-tested).
    bodies = [image_body(some(pngs, i)) for i in range(6)]
    bodies += [_raw_body(i, 1 + i % 2) for i in range(4)]
    for _ in range(2):
        _assert_same(_answers(batched, bodies), _answers(shapes_server, bodies))
    text = requests.get(f"{batched.url}/metrics", timeout=10).text
    assert metric(text, "model_requests_total", status_code="200") == 2 * len(bodies)
    assert metric(text, "model_inference_duration_seconds_count") == 2 * len(bodies)


def test_batching_on_a_paddledetection_export(model_server, ppdet_model_dir):
    """Boxes of a batched run go back to their requests by bbox_num."""
    # lazy (collection cost): it pulls pillow, opencv, pysimdjson
    from tests.serving.test_serving_ppdet import SHAPES, encode, scene

    pngs = [encode(scene(h, w, seed), fmt) for seed, (h, w, fmt) in enumerate(SHAPES)]
    alone = model_server(ppdet_model_dir)
    batched = model_server(ppdet_model_dir, "--batch-max-size", "8", "--batch-timeout-ms", "50")
    bodies = [image_body(some(pngs, i)) for i in range(6)]
    bodies.append(image_body(pngs[:2]))
    _assert_same(_answers(batched, bodies), _answers(alone, bodies))


def test_bad_flags_are_user_errors(trained_model, capsys):
    """In-process, through the console script's entry point (`mlops.cli.main`): the flags
    are refused before anything is served, so no subprocess start-up is needed to see it."""
    for flags, words in ((["--workers", "0"], "--workers 0: must be at least 1"),
                         (["--batch-max-size", "0"], "--batch-max-size 0: must be at least 1"),
                         (["--inline-max-ms", "-1"], "--inline-max-ms -1: must be at least 0")):
        code = main(["serve", str(trained_model.model_dir), "--port", "1", *flags])
        assert code != 0
        assert words in capsys.readouterr().err



# ---- the batcher alone (a fake predictor: fast, and every batch is visible) ----------------


class FakePredictor:
    """Doubles its input; records the batch size of each run; fails on a negative value."""

    def __init__(self):
        self.runs = []
        self.gate = __import__("threading").Event()

    def __call__(self, feeds):
        self.gate.wait(10)
        x = feeds["x"]
        self.runs.append(len(x))
        if (x < 0).any():
            raise ValueError("negative input")
        return [x * 2, x.sum(axis=tuple(range(1, x.ndim)))]


def _batched(batcher, inputs):
    """Submit every input from its own thread while the predictor is held, then release it."""

    results = [None] * len(inputs)

    def call(i):
        try:
            results[i] = batcher.infer({"x": inputs[i]})[0]
        except Exception as exc:  # noqa: BLE001
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
        time.sleep(0.05)  # queued in this order (no timing is asserted)
    batcher._run.gate.set()
    for t in threads:
        t.join(30)
    return results


def test_batcher_stacks_fitting_requests_and_splits_the_answers():
    fake = FakePredictor()
    batcher = Batcher(fake, max_size=4, timeout=0.0)
    try:
        inputs = [np.full((1, 2), 1.0), np.full((2, 2), 2.0), np.full((1, 3), 3.0),
                  np.full((1, 2), 4.0), np.full((1, 2), 5.0)]
        results = _batched(batcher, inputs)
    finally:
        batcher.close()
    for got, sent in zip(results, inputs):
        np.testing.assert_array_equal(got[0], sent * 2)
        np.testing.assert_array_equal(got[1], sent.sum(axis=1))
    # The first input runs alone (the predictor was held while the rest queued); then the
    # three [n, 2] requests fill a batch of 4 (the 2-image request counts twice); the
    # [1, 3] input, queued among them, never joins them and runs alone.
    assert fake.runs == [1, 4, 1]


def test_batcher_runs_a_failed_batch_one_by_one():
    fake = FakePredictor()
    batcher = Batcher(fake, max_size=8, timeout=0.0)
    try:
        results = _batched(batcher, [np.ones((1, 2)), np.ones((1, 2)), -np.ones((1, 2)),
                                     np.ones((1, 2))])
    finally:
        batcher.close()
    assert isinstance(results[2], ValueError)
    for i in (0, 1, 3):
        np.testing.assert_array_equal(results[i][0], np.full((1, 2), 2.0))


def test_ppdet_split_sends_boxes_back_by_bbox_num():
    # lazy (collection cost): it pulls pillow, opencv, pysimdjson
    from serving.ppdet import split_ppdet_batch

    bbox = np.arange(6 * 6, dtype=np.float32).reshape(6, 6)
    counts = np.array([2, 0, 3, 1], np.int32)
    parts = split_ppdet_batch([bbox, counts], [1, 2, 1])
    assert [p[0].shape[0] for p in parts] == [2, 3, 1]
    assert [p[1].tolist() for p in parts] == [[2], [0, 3], [1]]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), bbox)
    with pytest.raises(ValueError):
        split_ppdet_batch([bbox], [1, 3])


def test_ready_only_when_every_worker_is():
    """Each worker answers the probes; none says ready before all are, or once one stops."""
    # lazy (collection cost): it pulls pillow, opencv, pysimdjson
    from serving.dataplane import ServerSettings, ServerState

    peers = [0, 0]  # the supervisor's shared flags, one per worker
    first = ServerState(ServerSettings("m", "1"), None, peers, 0)
    second = ServerState(ServerSettings("m", "1"), None, peers, 1)
    first.set_ready(True)
    assert not first.serving_ready() and not second.serving_ready()
    second.set_ready(True)
    assert first.serving_ready() and second.serving_ready()
    second.shutting_down = True
    second.set_ready(False)
    assert not first.serving_ready()
