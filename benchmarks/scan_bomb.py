"""The progressive-JPEG scan bomb (issue 26, finding 2; issue 41, finding 2): its cost
before and after.

    python benchmarks/scan_bomb.py [--repeats 200000] [--out benchmarks/results/scan_bomb.json]

The bomb: a 2048x2048 progressive JPEG whose smallest AC scan (12 bytes) is repeated
`--repeats` times (`tests/serving/test_serving_input_limits.py` `scan_bomb`). Before: what the
server used to spend on it, its decode by Pillow (the example's path) and by OpenCV
(a PaddleDetection export's), measured here in-process on `--decode-repeats` repeats
(fewer, the cost is linear in scans) and the same image with its 10 scans. After: a
real `mlops serve` (the tiny detector, defaults) answering the full bomb, and a normal
request sent right after two bombs whose clients hung up (the review's 21 s wait).
Issue 41: the same bomb as an MPO (an APP2 "MPF" segment: Pillow's format "MPO", which
the scan count skipped) and with one junk byte between two segments (which the count's
walk over the segments could not get past): their decode cost before, measured as
above, and the server's answer now.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pathlib
import socket
import sys
import tempfile
import time

import cv2
import numpy as np
import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from tests.fixtures.serving import build_tiny_export, start_server, stop_server  # noqa: E402
from tests.serving.test_serving_input_limits import (  # noqa: E402
    scan_bomb,
    with_junk,
    with_mpf,
)


def _decode_seconds(data: bytes) -> dict[str, float]:
    start = time.perf_counter()
    Image.open(io.BytesIO(data)).load()
    pil = time.perf_counter() - start
    start = time.perf_counter()
    cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return {"pillow": round(pil, 3), "opencv": round(time.perf_counter() - start, 3)}


def _body(image: bytes) -> bytes:
    return json.dumps({"inputs": [{"name": "image_bytes", "shape": [1], "datatype": "BYTES",
                                   "data": [base64.b64encode(image).decode()]}]}).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200_000)
    parser.add_argument("--decode-repeats", type=int, default=20_000)
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "scan_bomb.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    bomb = scan_bomb(2048, args.repeats)
    before = {
        "normal_10_scans": _decode_seconds(scan_bomb(2048, 0)),
        f"bomb_{args.decode_repeats}_repeats": _decode_seconds(scan_bomb(2048,
                                                                         args.decode_repeats)),
    }
    for name, disguise in (("mpo", with_mpf), ("junk_byte", with_junk)):
        before[f"{name}_bomb_{args.decode_repeats}_repeats"] = _decode_seconds(
            disguise(scan_bomb(2048, args.decode_repeats)))
    per_scan = before[f"bomb_{args.decode_repeats}_repeats"]["pillow"] / args.decode_repeats
    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-bomb-"))
    server = start_server(build_tiny_export(base / "model", sturdy=True), log_dir=base)
    try:
        url = f"{server.url}/v2/models/{server.model_name}/infer"
        body = _body(bomb)
        start = time.perf_counter()
        answer = requests.post(url, data=body, timeout=120)
        refused = time.perf_counter() - start
        for _ in range(2):  # send and hang up, as the review did
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(f"POST /v2/models/{server.model_name}/infer HTTP/1.1\r\n"
                             f"Host: x\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        normal = _body(scan_bomb(256, 0))
        start = time.perf_counter()
        after_two = requests.post(url, data=normal, timeout=120)
        waited = time.perf_counter() - start
        disguised = {}
        for name, disguise in (("mpo", with_mpf), ("junk_byte", with_junk)):
            start = time.perf_counter()
            refused_too = requests.post(url, data=_body(disguise(bomb)), timeout=120)
            disguised[name] = {"status": refused_too.status_code,
                               "error": refused_too.json().get("error"),
                               "seconds_to_answer": round(time.perf_counter() - start, 3)}
    finally:
        stop_server(server)
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "command": f"python benchmarks/scan_bomb.py --repeats {args.repeats}",
        "bomb": {"side": 2048, "repeats": args.repeats, "bytes": len(bomb),
                 "scans": args.repeats + 10},
        "before_decode_seconds": before,
        "before_full_bomb_pillow_seconds_estimated": round(per_scan * args.repeats, 1),
        "after": {"status": answer.status_code, "error": answer.json().get("error"),
                  "seconds_to_answer": round(refused, 3),
                  "normal_request_after_two_abandoned_bombs": {
                      "status": after_two.status_code, "seconds": round(waited, 3)},
                  "disguised_bombs": disguised},
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "note": "2 cores shared with other jobs running at the same time"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
