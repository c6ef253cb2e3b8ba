"""Request bodies for every inference route, valid ones mutated at random (Hypothesis).

`fuzz_request(target)` is a Hypothesis strategy of `FuzzRequest`s: a valid request for
the target's model on one of the routes

* OIP v2 JSON tensors (the model's own inputs, small random sizes),
* OIP v2 with the binary tensor extension (`Inference-Header-Content-Length`),
* OIP v2 BYTES images (base64 PNG/JPEG in JSON, or raw with the binary extension),
* Paddle Serving JSON (`{"tensor": ...}` and `{"feed": ...}`),

then, most of the time, mutated: a value anywhere in the JSON replaced (huge and
negative integers, floats, strings, lists, objects, null), a key dropped or added, an
image corrupted (bytes flipped, cut short, a scan repeated, a junk byte between two
segments) or made an MPO (an APP2 "MPF" segment), the outputs asked for named twice,
the raw inputs' batch sizes made to disagree, the serialised body cut or spliced, the
headers changed (the binary header length, the content type, a chunked body, a flood
of header fields, one header past the size limit), the model name or version in the
path changed. Every answer must be
200 or 4xx: what a client sends is never the server's error (the canary counts 5xx as
the model's). `tests/serving/test_serving_fuzz.py` runs a short budget in the suite,
`benchmarks/fuzz.py` a long one.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import struct
from typing import Any

import numpy as np
import requests
from hypothesis import strategies as st
from PIL import Image

from tests.serving.test_serving_input_limits import with_junk, with_mpf

#: Output names a request may ask for: the detections', the exports' raw ones, others.
OUTPUT_NAMES = ["bbox", "bbox_num", "labels", "fetch_name_0", "fetch_name_1", "heatmap", "x"]
DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BYTES", "BF16", "", "fp32"]
ROUTES = ("json", "binary", "images_json", "images_binary", "serving_tensor", "serving_feed")


@dataclasses.dataclass(frozen=True)
class Target:
    """A running server and what its model takes."""

    url: str
    model: str
    version: str
    inputs: tuple[tuple[str, int], ...]  # raw inputs: (name, channels or -1 for an [N, 2] input)
    image_input: str  # the BYTES tensor's name in the examples


@dataclasses.dataclass
class FuzzRequest:
    """One request to send, and which route it started from."""

    route: str
    path: str
    body: bytes | list[bytes]  # a list: sent chunked
    headers: dict[str, str]
    mutations: list[str]

    def describe(self) -> dict[str, Any]:
        """What to save when it fails: enough to send it again."""
        body = self.body if isinstance(self.body, bytes) else b"".join(self.body)
        return {"route": self.route, "path": self.path, "headers": self.headers,
                "mutations": self.mutations, "chunked": not isinstance(self.body, bytes),
                "body_base64": base64.b64encode(body[:200_000]).decode(),
                "body_bytes": len(body)}


def send(target: Target, request: FuzzRequest, timeout: float = 60.0) -> requests.Response:
    """POST the request; the answer as it came."""
    body = request.body if isinstance(request.body, bytes) else iter(request.body)
    return requests.post(target.url + request.path, data=body, headers=request.headers,
                         timeout=timeout)


# ---- values and images ---------------------------------------------------------------------

# The values that broke servers first (Hypothesis tries the first branches first):
# integers past 64 bits, the edges of the integer types, wrong types for a field.
_scalars = st.one_of(
    st.sampled_from([2 ** 64, 2 ** 70, -(2 ** 63) - 1, 2 ** 63, 2 ** 63 - 1, 2 ** 32, 2 ** 31,
                     -1, 0, 1e308, -1e308, 5e-324, -0.0]),
    st.sampled_from(["", "image", "x", "FP32", "BYTES", "aGk=", "not base64!", "1/0"]),
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 80), max_value=2 ** 80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


@st.composite
def images(draw: st.DrawFn) -> bytes:
    """A PNG or JPEG of a random mode and size (mostly small), maybe corrupted."""
    fmt = draw(st.sampled_from(["PNG", "JPEG"]))
    modes = ["RGB", "L", "RGBA", "1", "P", "LA", "I;16"] if fmt == "PNG" else ["RGB", "L", "CMYK"]
    mode = draw(st.sampled_from(modes))
    width = draw(st.one_of(st.integers(1, 64), st.integers(1, 1200)))
    height = draw(st.one_of(st.integers(1, 64), st.integers(1, 1200)))
    seed = draw(st.integers(0, 2 ** 16))
    pixels = np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).resize((width, height)).convert(mode)
    out = io.BytesIO()
    options = {"progressive": draw(st.booleans())} if fmt == "JPEG" else {}
    image.save(out, fmt, **options)
    data = out.getvalue()
    how = draw(st.sampled_from(["none", "none", "flip", "cut", "repeat_scan", "garbage",
                                "header_only", "junk"]))
    if how == "flip" and data:
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        data = bytes(buf)
    elif how == "cut":
        data = data[:draw(st.integers(0, len(data)))]
    elif how == "repeat_scan" and fmt == "JPEG":
        sos = data.rfind(b"\xff\xda")
        if sos > 0:
            eoi = data.rfind(b"\xff\xd9")
            data = data[:eoi] + data[sos:eoi] * draw(st.integers(1, 200)) + data[eoi:]
    elif how == "garbage":
        data = draw(st.binary(max_size=64))
    elif how == "header_only":
        data = data[:draw(st.integers(0, min(len(data), 40)))]
    elif how == "junk" and fmt == "JPEG":
        data = with_junk(data)
    if fmt == "JPEG" and draw(st.integers(0, 3)) == 3:  # an MPO (Pillow's format "MPO")
        data = with_mpf(data)
    return data


# ---- valid requests -----------------------------------------------------------------------

@st.composite
def _raw_tensors(draw: st.DrawFn, target: Target, odd_batch: bool = False
                 ) -> list[tuple[str, list[int], np.ndarray]]:
    """The model's raw inputs: (name, shape, float32 data) of a small random batch;
    `odd_batch`: one input's batch size differs from the others' (a 500 once: issue 41)."""
    batch = draw(st.integers(1, 2))
    height, width = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    odd = draw(st.integers(0, len(target.inputs) - 1)) if odd_batch else -1
    out = []
    for index, (name, channels) in enumerate(target.inputs):
        if index == odd:
            batch = 3 - batch
        shape = [batch, 2] if channels < 0 else [batch, channels, height, width]
        if channels < 0:  # im_shape, scale_factor: what PaddleDetection's preprocessing gives
            data = np.tile(np.asarray([height, width] if name == "im_shape" else [1.0, 1.0],
                                      np.float32), (batch, 1))
        else:
            data = np.random.default_rng(draw(st.integers(0, 99))).random(shape, np.float32)
        out.append((name, shape, data))
    return out


def _oip(tensors: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "fuzz", "inputs": tensors}


@st.composite
def valid_request(draw: st.DrawFn, target: Target, odd_batch: bool = False
                  ) -> tuple[str, dict[str, Any], bytes]:
    """(route, JSON document, binary part) of a request the server answers 200 (its
    images may be corrupted, its raw inputs' batch sizes disagree: `_raw_tensors`)."""
    route = draw(st.sampled_from(ROUTES))
    if route in ("json", "binary", "serving_tensor"):
        tensors = draw(_raw_tensors(target, odd_batch))
        if route == "json":
            return route, _oip([{"name": n, "shape": s, "datatype": "FP32",
                                 "data": d.reshape(-1).tolist()} for n, s, d in tensors]), b""
        if route == "binary":
            blobs = [d.astype("<f4").tobytes() for _, _, d in tensors]
            return route, _oip([{"name": n, "shape": s, "datatype": "FP32",
                                 "parameters": {"binary_data_size": len(b)}}
                                for (n, s, _), b in zip(tensors, blobs)]), b"".join(blobs)
        return route, {"tensor": [{"name": n, "elem_type": 1, "shape": s,
                                   "float_data": d.reshape(-1).tolist()}
                                  for n, s, d in tensors],
                       "fetch_var_names": [], "log_id": 1}, b""
    encoded = draw(st.lists(images(), min_size=1, max_size=3))
    if route == "images_json":
        return route, _oip([{"name": target.image_input, "shape": [len(encoded)],
                             "datatype": "BYTES",
                             "data": [base64.b64encode(e).decode() for e in encoded]}]), b""
    if route == "images_binary":
        blob = b"".join(struct.pack("<I", len(e)) + e for e in encoded)
        return route, _oip([{"name": target.image_input, "shape": [len(encoded)],
                             "datatype": "BYTES",
                             "parameters": {"binary_data_size": len(blob)}}]), blob
    return route, {"feed": [{target.image_input: base64.b64encode(e).decode()} for e in encoded],
                   "fetch": ["bbox", "bbox_num", "labels"]}, b""


# ---- mutations ----------------------------------------------------------------------------

def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON tree (long lists: their first and last elements only)."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        indices = range(len(node)) if len(node) <= 8 else (0, len(node) - 1)
        for i in indices:
            out += _paths(node[i], prefix + (i,))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated_doc(draw: st.DrawFn, doc: dict[str, Any]) -> tuple[Any, list[str]]:
    """The document with 0 to 3 random changes, and what they were."""
    notes = []
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "replace", "drop", "add", "datatype", "shape",
                                     "outputs_twice"]))
        if kind == "outputs_twice" and isinstance(doc, dict):
            names = draw(st.lists(st.sampled_from(OUTPUT_NAMES), min_size=1, max_size=3))
            names.append(draw(st.sampled_from(names)))  # one of them again
            if "feed" in doc:
                doc["fetch"] = names
            elif "tensor" in doc:
                doc["fetch_var_names"] = names
            else:
                doc["outputs"] = [{"name": n} for n in names]
            notes.append(f"outputs asked for twice: {names}")
            continue
        if not path:
            if kind == "replace":
                doc = draw(json_values)
                notes.append("document replaced")
            continue
        parent, key = _parent(doc, path), path[-1]
        if kind == "replace":
            parent[key] = draw(json_values)
        elif kind == "drop":
            del parent[key]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["parameters", "outputs", "shape", "data", "extra",
                                         "binary_data_size", "datatype", "name"]))] = \
                draw(json_values)
        elif kind == "datatype" and isinstance(parent, dict):
            parent["datatype"] = draw(st.sampled_from(DATATYPES))
        elif kind == "shape" and isinstance(parent, dict):
            parent["shape"] = draw(st.lists(st.one_of(
                st.integers(-2, 40), st.sampled_from([0, 2 ** 31, 2 ** 62, 2 ** 70])),
                max_size=5))
        notes.append(f"{kind} at {list(path)}")
        if not isinstance(doc, (dict, list)):
            break
    return doc, notes


@st.composite
def fuzz_request(draw: st.DrawFn, target: Target, mutate: float = 0.9) -> FuzzRequest:
    """A valid request for `target`, mutated with probability `mutate`."""
    odd_batch = bool(mutate) and len(target.inputs) > 1 and draw(st.integers(0, 9)) == 9
    route, doc, binary = draw(valid_request(target, odd_batch))
    notes: list[str] = ["inputs' batch sizes disagree"] if odd_batch else []
    # Hypothesis leans to boundary values (0 first): a change is drawn as "not 0".
    if mutate and draw(st.integers(0, 9)) < 10 * mutate:
        doc, changes = draw(mutated_doc(json.loads(json.dumps(doc))))
        notes += changes
    header = json.dumps(doc).encode()
    body = header + binary
    headers = {"Content-Type": "application/json"}
    if binary or route in ("binary", "images_binary"):
        headers["Inference-Header-Content-Length"] = str(len(header))
    if mutate and draw(st.integers(0, 9)) >= 7:
        what = draw(st.sampled_from(["cut", "splice", "header_length", "content_type",
                                     "no_header_length", "header_fields", "header_size"]))
        notes.append(f"body/header: {what}")
        if what == "cut":
            body = body[:draw(st.integers(0, len(body)))]
        elif what == "splice":
            at = draw(st.integers(0, len(body)))
            body = body[:at] + draw(st.binary(max_size=16)) + body[at:]
        elif what == "header_length":
            headers["Inference-Header-Content-Length"] = draw(st.one_of(
                st.integers(-5, len(body) + 5).map(str),
                st.sampled_from(["x", "1e3", str(2 ** 70), "-0", "0x10"])))
        elif what == "header_fields":  # the limit is 100 fields (`serving.limits`)
            for i in range(draw(st.integers(90, 160))):
                headers[f"X-Fuzz-{i}"] = "1"
        elif what == "header_size":  # the limit is 32 KiB of request line and headers
            headers["X-Fuzz"] = "a" * draw(st.integers(30_000, 70_000))
        elif what == "content_type":
            headers["Content-Type"] = draw(st.sampled_from(
                ["application/octet-stream", "text/plain", "", "multipart/form-data"]))
        else:
            headers.pop("Inference-Header-Content-Length", None)
    path = ("/GeneralModelService/inference" if route.startswith("serving")
            else f"/v2/models/{target.model}/infer")
    if mutate and not route.startswith("serving") and draw(st.integers(0, 19)) == 19:
        path = draw(st.sampled_from([
            f"/v2/models/{target.model}/versions/{target.version}/infer",
            f"/v2/models/{target.model}/versions/nope/infer", "/v2/models/other/infer",
            f"/v2/models/{target.model}%00/infer"]))
        notes.append(f"path {path}")
    chunked: bytes | list[bytes] = body
    if body and draw(st.integers(0, 19)) == 19:  # Transfer-Encoding: chunked
        cut = draw(st.integers(0, len(body)))
        chunked = [body[:cut], body[cut:]]
        notes.append("chunked")
    return FuzzRequest(route, path, chunked, headers, notes)
