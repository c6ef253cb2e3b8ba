"""Model server overhead: the HTTP server against a bare in-process loop doing the same work.

    python benchmarks/serving.py [--model-dir DIR] [--images DIR] [--seconds 4] [--rounds 3]

Both sides do identical work per request with identical code: parse the
same request body (orjson on the raw bytes), decode + resize + normalise
the image (encoded-image form, base64 in JSON) or take the FP32 tensor
(raw form: JSON numbers, and again with the binary tensor extension), run a
Paddle Inference predictor (1 math thread each, as many predictors as
concurrent requests), decode detections, serialise the JSON reply. The bare
loop calls `ModelService.infer_body` from N threads; the server is a real
`mlops serve` process driven by a closed-loop client with N connections
(N = 1 and 2), on the same 2-core machine, so the client's own CPU time is
charged to the server side (pessimistic). Measurements alternate between
bare and server for `--rounds` rounds and report the median round.

Also measured: where the bare path's time goes (parse, preprocess,
predictor, decode, serialise) and what the standard `json` module would
cost for the same raw body, and an open-loop run (the load generator) at
about 70 % of the measured server throughput for latency under load.

Without `--model-dir`, the example is trained briefly (the test fixture's
small config, ~2 minutes) into a temporary directory. Results go to
benchmarks/results/serving.json. Targets: server >= 80 % of the bare
loop's throughput and <= 2 ms added at p50, for both input forms.
"""

import argparse
import base64
import http.client
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import orjson

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the server runs (before paddle loads)

from cogs.ports import free_port  # noqa: E402
from serving.client import encode_request  # noqa: E402
from serving.loadgen import run_load  # noqa: E402
from serving.modeldir import load_model_dir  # noqa: E402
from serving.postprocess import decode_centernet  # noqa: E402
from serving.preprocess import preprocess_images  # noqa: E402
from serving.protocol import (  # noqa: E402
    Tensor,
    encode_infer_response,
    parse_infer_request,  # noqa: E402
)
from serving.runtime import PredictorPool  # noqa: E402
from serving.service import ModelService  # noqa: E402

EXAMPLE = ROOT / "examples" / "shapes-detector"
RESULTS = ROOT / "benchmarks" / "results" / "serving.json"
SMALL_TRAIN = ["--subset", "320", "--epochs", "4", "--batch-size", "32", "--lr", "4e-3"]


def env_one_thread():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    env.update(OMP_NUM_THREADS="1", GLOG_minloglevel="2", PYTHONUNBUFFERED="1")
    return env


def train_small(work):
    """Train the example briefly; returns (model dir, val images dir)."""
    data = work / "data"
    subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--data-dir", str(data)],
                   check=True, env=env_one_thread(), capture_output=True)
    subprocess.run([sys.executable, "train.py", "--output-dir", str(work / "out"),
                    "--checkpoint-dir", str(work / "ckpt"), "--data-dir", str(data),
                    *SMALL_TRAIN], cwd=EXAMPLE, check=True, env=env_one_thread(),
                   capture_output=True)
    return work / "out" / "model", data / "val"


def image_bodies_for(images):
    """Encoded-image form: one base64 PNG in a BYTES tensor, JSON (what a curl user sends)."""
    return [(orjson.dumps({"inputs": [{"name": "image_bytes", "datatype": "BYTES", "shape": [1],
                                       "data": [base64.b64encode(image).decode()]}]}), None)
            for image in images]


def raw_bodies_for(images, cfg, binary=False):
    """Raw form: the preprocessed FP32 tensor, as JSON numbers or binary-extension bytes."""
    out = []
    for image in images:
        tensor, _ = preprocess_images([image], cfg.input)
        if binary:
            body, length = encode_request([Tensor("image", "FP32", tensor.shape, tensor)],
                                          binary=True)
            out.append((body, str(length)))
        else:
            out.append((orjson.dumps({"inputs": [{"name": "image", "datatype": "FP32",
                                                  "shape": list(tensor.shape),
                                                  "data": tensor.ravel()}]},
                                     option=orjson.OPT_SERIALIZE_NUMPY), None))
    return out


def closed_loop(worker_fn, concurrency, seconds, body_list):
    """Run `worker_fn(body)` from `concurrency` threads for `seconds`; (rps, latencies s)."""
    latencies = [[] for _ in range(concurrency)]
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(concurrency + 1)

    def loop(k, state):
        barrier.wait()
        i = k
        while time.perf_counter() < stop:
            body = body_list[i % len(body_list)]
            t = time.perf_counter()
            worker_fn(body, state)
            latencies[k].append(time.perf_counter() - t)
            i += concurrency

    threads = [threading.Thread(target=loop, args=(k, {})) for k in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    flat = [x for lat in latencies for x in lat]
    return len(flat) / elapsed, flat


def bare_worker(service):
    def work(item, state):
        body, header_length = item
        service.infer_body(body, header_length)
    return work


def http_worker(port, path, timeout=None):
    """One keep-alive connection per client thread posting (body, header length) items."""
    def work(item, state):
        body, header_length = item
        conn = state.get("conn")
        if conn is None:
            conn = state["conn"] = http.client.HTTPConnection("127.0.0.1", port,
                                                              timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if header_length is not None:
            headers = {"Content-Type": "application/octet-stream",
                       "Inference-Header-Content-Length": header_length}
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
    return work


def stats(rps, latencies):
    arr = np.asarray(latencies) * 1e3
    return {"rps": round(rps, 2), "p50_ms": round(float(np.percentile(arr, 50)), 3),
            "p99_ms": round(float(np.percentile(arr, 99)), 3), "n": len(latencies)}


def median_round(rounds):
    """The round with the median throughput (keeps each round's numbers consistent)."""
    ordered = sorted(rounds, key=lambda r: r["rps"])
    return ordered[len(ordered) // 2]


def breakdown(service, image_body, raw_body, n=200):
    """Mean milliseconds per stage of the bare path, and the stdlib json alternative."""
    cfg = service.cfg
    t = {"parse_image_body": [], "preprocess": [], "predictor": [], "decode": [],
         "serialise": [], "parse_raw_body_orjson": [], "parse_raw_body_stdlib_json": []}
    for _ in range(n):
        a = time.perf_counter()
        request = parse_infer_request(image_body)
        b = time.perf_counter()
        batch, sizes = preprocess_images(list(request.inputs[0].data), cfg.input)
        c = time.perf_counter()
        arrays, _ = service.pool.infer({"image": batch})
        d = time.perf_counter()
        bbox, counts = decode_centernet(*(arrays[service.roles[r]] for r in
                                          ("heatmap", "size", "offset")),
                                        cfg.decode, cfg.input.size, cfg.category_ids(), sizes)
        e = time.perf_counter()
        encode_infer_response("m", "1", [Tensor("bbox", "FP32", bbox.shape, bbox),
                                         Tensor("bbox_num", "INT32", counts.shape, counts)])
        f = time.perf_counter()
        parse_infer_request(raw_body)
        g = time.perf_counter()
        doc = json.loads(raw_body)
        np.asarray(doc["inputs"][0]["data"], np.float32)
        h = time.perf_counter()
        for key, value in zip(t, (b - a, c - b, d - c, e - d, f - e, g - f, h - g)):
            t[key].append(value)
    return {k: round(statistics.mean(v) * 1e3, 3) for k, v in t.items()}


def scrape_means(port):
    """(request handler seconds sum, inference seconds sum, count) from the server's /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    values = {}
    for line in text.splitlines():
        for key in ("model_request_duration_seconds_sum", "model_request_duration_seconds_count",
                    "model_inference_duration_seconds_sum"):
            if line.startswith(key + "{"):
                values[key] = float(line.rsplit(" ", 1)[1])
    return (values.get("model_request_duration_seconds_sum", 0.0),
            values.get("model_inference_duration_seconds_sum", 0.0),
            values.get("model_request_duration_seconds_count", 0.0))


def start_server(model_dir, threads):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlops", "serve", str(model_dir),
                             "--port", str(port), "--threads", str(threads),
                             "--max-in-flight", "64", "--log-level", "warning"],
                            env=env_one_thread(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/v2/health/ready")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("server exited during start-up")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server not ready")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=pathlib.Path)
    parser.add_argument("--images", type=pathlib.Path)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-serving-"))
    model_dir, images_dir = args.model_dir, args.images
    if model_dir is None:
        print("training a small example model (no --model-dir) ...", flush=True)
        model_dir, trained_images = train_small(work)
        images_dir = images_dir or trained_images
    if images_dir is None:
        images_dir = EXAMPLE / "data" / "val"
    images = [p.read_bytes() for p in sorted(images_dir.glob("*.png"))[:32]]
    if not images:
        sys.exit(f"no PNG images in {images_dir}")

    threads = 2
    model = load_model_dir(model_dir)
    record = model.record
    service = ModelService(model, "bench", "1", PredictorPool(model, threads, 1))
    service.warm_up()
    image_bodies = image_bodies_for(images)
    raw_bodies = raw_bodies_for(images, service.cfg)
    forms = {"image": image_bodies, "raw": raw_bodies,
             "raw_binary": raw_bodies_for(images, service.cfg, binary=True)}
    name, version = record.get("name", model_dir.name), record.get("version")

    server, port = start_server(model_dir, threads)
    path = f"/v2/models/{name}/infer"
    results = {}
    try:
        for form, body_list in forms.items():
            for concurrency in (1, 2):
                # warm both sides for this form
                closed_loop(bare_worker(service), concurrency, 0.5, body_list)
                closed_loop(http_worker(port, path), concurrency, 0.5, body_list)
                bare_rounds, server_rounds = [], []
                before = scrape_means(port)
                for _ in range(args.rounds):
                    bare_rounds.append(stats(*closed_loop(bare_worker(service), concurrency,
                                                          args.seconds, body_list)))
                    server_rounds.append(stats(*closed_loop(http_worker(port, path), concurrency,
                                                            args.seconds, body_list)))
                after = scrape_means(port)
                handled = max(after[2] - before[2], 1)
                bare, srv = median_round(bare_rounds), median_round(server_rounds)
                key = f"{form}_c{concurrency}"
                results[key] = {
                    "bare": bare, "server": srv,
                    # inside the server: handler entry to response (mean), and the predictor
                    "server_handler_mean_ms": round((after[0] - before[0]) / handled * 1e3, 3),
                    "server_predictor_mean_ms": round((after[1] - before[1]) / handled * 1e3, 3),
                    "throughput_ratio": round(srv["rps"] / bare["rps"], 3),
                    "added_p50_ms": round(srv["p50_ms"] - bare["p50_ms"], 3),
                    "rounds": {"bare": bare_rounds, "server": server_rounds},
                }
                print(
                    f"{key:14s} bare {bare['rps']:7.1f} req/s p50 {bare['p50_ms']:6.2f} ms "
                    f"p99 {bare['p99_ms']:6.2f} | server {srv['rps']:7.1f} req/s "
                    f"p50 {srv['p50_ms']:6.2f} ms p99 {srv['p99_ms']:6.2f} | ratio "
                    f"{results[key]['throughput_ratio']:.2f}, "
                    f"+{results[key]['added_p50_ms']:.2f} ms p50; "
                    f"in server: handler {results[key]['server_handler_mean_ms']:.2f} ms, "
                    f"predictor {results[key]['server_predictor_mean_ms']:.2f} ms (means)",
                    flush=True,
                )
        best = results["image_c2"]["server"]["rps"]
        rate = max(5.0, round(0.7 * best))
        report = run_load(f"http://127.0.0.1:{port}", rps=rate, duration=max(args.seconds, 5),
                          images=images, model=name)
        results["open_loop_image"] = json.loads(report.to_json())
        print(report.summary(), flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        service.pool.shutdown()

    stages = breakdown(service, image_bodies[0][0], raw_bodies[0][0])
    print("bare path, mean ms per stage:", stages)
    doc = {
        "benchmark": "serving",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_1m": os.getloadavg()[0]},
        "model": {"dir": str(model_dir), "version": version},
        "settings": {"threads": threads, "math_threads": 1, "seconds": args.seconds,
                     "rounds": args.rounds, "client": "closed loop, http.client keep-alive",
                     "http": "uvicorn (h11) + starlette"},
        "targets": {"throughput_ratio_min": 0.8, "added_p50_ms_max": 2.0},
        "results": results,
        "bare_stage_ms": stages,
        "meets_targets": {k: (v["throughput_ratio"] >= 0.8 and v["added_p50_ms"] <= 2.0)
                          for k, v in results.items() if "throughput_ratio" in v},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
