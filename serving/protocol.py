"""Open Inference Protocol v2 (KServe/Triton) request and response bodies.

Pure functions over bytes and numpy arrays, shared by the server, the client and the
benchmark, so "parse the same body" means the same code. JSON bodies are parsed with
simdjson and orjson (`serving.json_numbers`); the binary tensor extension
(`Inference-Header-Content-Length`) is supported both ways. BYTES tensors carry encoded
images: base64 strings in JSON, length-prefixed raw bytes (4-byte little-endian) in the
binary form. Why not `json`: docs/inside-serving.md.
"""

import base64
import binascii
import dataclasses
import math
import struct
from typing import Any

import numpy as np
import orjson

from serving.errors import BadRequest
from serving.json_numbers import load_request

HEADER_LENGTH = "inference-header-content-length"
#: Encoded images (BYTES elements) one request may carry: decoding is the cost a client
#: controls (1,000 1x1 PNGs took 920 MB and 2.7 s). Checked on the declared shape, before
#: any element is base64-decoded or sliced (1.2 M elements in an 8 MB body took 1.9 s
#: and 90 MB to decode before the count was checked).
MAX_IMAGES = 32

# OIP v2 datatype <-> numpy dtype. BYTES maps to object arrays of `bytes`.
DATATYPE_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
NUMPY_TO_DATATYPE: dict[np.dtype[Any], str] = {v: k for k, v in DATATYPE_TO_NUMPY.items()}


def numpy_to_datatype(dtype: np.dtype[Any]) -> str:
    """The OIP datatype of a numpy dtype (str/bytes/object arrays are BYTES)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "BYTES"
    try:
        return NUMPY_TO_DATATYPE[dtype]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no Open Inference Protocol datatype") from None


def datatype_to_numpy(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of an OIP datatype; `ValueError` for an unknown one."""
    try:
        return DATATYPE_TO_NUMPY[datatype]
    except KeyError:
        raise ValueError(f"unknown datatype {datatype!r}") from None


@dataclasses.dataclass
class Tensor:
    """One named tensor of a request or a response."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]  # BYTES: object array of `bytes`


@dataclasses.dataclass
class InferRequest:
    """A parsed infer request."""

    id: str | None
    inputs: list[Tensor]
    outputs: list[str] | None  # requested output names; None = all
    binary_outputs: set[str]  # outputs to return with the binary extension
    binary_default: bool  # request-level `binary_data_output`


def check_unique(names: list[str], field: str) -> None:
    """`BadRequest` naming `field`[i] when an output is asked for a second time: each
    repeat was one more copy of the whole tensor in the answer (a 245 KB request was
    answered with 64 MB)."""
    first: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in first:
            raise BadRequest(f"{field}[{index}]: output '{name}' is asked for more than once "
                             f"(also {field}[{first[name]}]); name each output once")
        first[name] = index


def parse_infer_request(body: bytes, header_length: str | None = None) -> InferRequest:
    """Parse an OIP v2 infer body (JSON, optionally followed by binary tensors).

    Every problem is a `BadRequest` whose message names the offending tensor
    or field.
    """
    json_part, binary_part = _split_body(body, header_length)
    try:
        doc = load_request(json_part)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object with an 'inputs' list")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequest("request needs a non-empty 'inputs' list")
    inputs: list[Tensor] = []
    offset = 0
    for index, raw in enumerate(raw_inputs):
        tensor, used = _parse_input(raw, index, binary_part, offset)
        offset += used
        inputs.append(tensor)
    if offset != len(binary_part):
        raise BadRequest(
            f"binary data is {len(binary_part)} bytes but the inputs declare {offset}"
        )
    params = doc.get("parameters") or {}
    binary_default = (
        bool(params.get("binary_data_output", False)) if isinstance(params, dict) else False
    )
    outputs: list[str] | None = None
    binary_outputs: set[str] = set()
    raw_outputs = doc.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise BadRequest("'outputs' must be a list of {name: ...} objects")
        outputs = []
        for index, out in enumerate(raw_outputs):
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise BadRequest(f"outputs[{index}] must be an object with a string 'name'")
            outputs.append(out["name"])
            out_params = out.get("parameters") or {}
            if isinstance(out_params, dict) and out_params.get("binary_data", binary_default):
                binary_outputs.add(out["name"])
        check_unique(outputs, "outputs")
    request_id = doc.get("id")
    return InferRequest(
        id=str(request_id) if request_id is not None else None,
        inputs=inputs,
        outputs=outputs,
        binary_outputs=binary_outputs,
        binary_default=binary_default,
    )


def _split_body(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    if header_length is None:
        return body, b""
    try:
        length = int(header_length)
    except ValueError:
        raise BadRequest(f"{HEADER_LENGTH} header is not an integer: {header_length!r}") from None
    if not 0 <= length <= len(body):
        raise BadRequest(f"{HEADER_LENGTH} {length} is outside the body of {len(body)} bytes")
    return body[:length], body[length:]


def _parse_input(raw: Any, index: int, binary: bytes, offset: int) -> tuple[Tensor, int]:
    if not isinstance(raw, dict):
        raise BadRequest(f"inputs[{index}] must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"inputs[{index}] needs a string 'name'")
    datatype = raw.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPE_TO_NUMPY:  # a dict: unhashable
        raise BadRequest(f"input '{name}': unknown datatype {datatype!r}")
    shape_raw = raw.get("shape")
    if not isinstance(shape_raw, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape_raw
    ):
        raise BadRequest(f"input '{name}': 'shape' must be a list of non-negative integers")
    shape = tuple(shape_raw)
    # Python ints: np.prod in int64 wraps around for huge shapes (2**40 x 2**40 -> 0).
    count = math.prod(shape)
    if datatype == "BYTES" and count > MAX_IMAGES:
        raise BadRequest(f"input '{name}': {count} images; at most {MAX_IMAGES} per request")
    params = raw.get("parameters") or {}
    binary_size = params.get("binary_data_size") if isinstance(params, dict) else None
    if binary_size is not None:
        if not isinstance(binary_size, int) or binary_size < 0:
            raise BadRequest(f"input '{name}': binary_data_size must be a non-negative integer")
        chunk = binary[offset:offset + binary_size]
        if len(chunk) != binary_size:
            raise BadRequest(f"input '{name}': binary data shorter than binary_data_size")
        data = binary_to_array(name, datatype, count, chunk)
        used = binary_size
    else:
        if "data" not in raw:
            raise BadRequest(f"input '{name}': missing 'data'")
        data = _from_json(name, datatype, count, raw["data"])
        used = 0
    return Tensor(name, datatype, shape, data.reshape(shape)), used


def _from_json(name: str, datatype: str, count: int, values: Any) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        flat = _flatten(values)
        if len(flat) != count:
            raise BadRequest(f"input '{name}': shape holds {count} elements, data has {len(flat)}")
        out = np.empty(count, dtype=object)
        for i, item in enumerate(flat):
            if not isinstance(item, str):
                raise BadRequest(f"input '{name}': BYTES elements must be base64 strings")
            try:
                out[i] = base64.b64decode(item, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(f"input '{name}': element {i} is not valid base64") from None
        return out
    if isinstance(values, np.ndarray):  # read by simdjson: float64, int64 or uint64
        array = _narrow(name, datatype, values)
    else:
        try:  # numpy's own recursion on a deep list ends in RecursionError: the client's fault
            array = np.asarray(values, dtype=DATATYPE_TO_NUMPY[datatype])
        except OverflowError:  # numpy 2 refuses a Python int outside the dtype
            raise BadRequest(f"input '{name}': a value is out of range for {datatype}") from None
        except (ValueError, TypeError, RecursionError):
            raise BadRequest(
                f"input '{name}': data is not a (nested) list of {datatype} numbers"
            ) from None
    if array.size != count:
        raise BadRequest(
            f"input '{name}': shape holds {count} elements, data has {array.size}"
        )
    return array.reshape(-1)


def _narrow(name: str, datatype: str, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """simdjson's wide numbers in the tensor's dtype; integers out of its range are
    refused (as numpy refuses them from a list), floats round as numpy rounds them."""
    dtype = DATATYPE_TO_NUMPY[datatype]
    if dtype.kind in "iu" and values.size and values.dtype != dtype:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise BadRequest(f"input '{name}': a value is out of range for {datatype}")
    return values.astype(dtype)  # a copy: simdjson's buffer is read-only


#: Deeper nesting than any tensor has: a client's deep list is a 400, not a RecursionError.
MAX_NESTING = 32


def _flatten(values: Any) -> list[Any]:
    """Leaves of a nested list, depth-first, without recursion."""
    if not isinstance(values, list):
        return [values]
    out: list[Any] = []
    stack: list[tuple[Any, int]] = [(iter(values), 1)]
    while stack:
        items, depth = stack[-1]
        item = next(items, _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if depth >= MAX_NESTING:
                raise BadRequest(f"data is nested deeper than {MAX_NESTING} levels")
            stack.append((iter(item), depth + 1))
        else:
            out.append(item)
    return out


_END = object()


def binary_to_array(name: str, datatype: str, count: int, chunk: bytes) -> np.ndarray[Any, Any]:
    """Flat array of `count` elements from binary-extension bytes; `BadRequest` if malformed."""
    if datatype == "BYTES":
        # Each element has a 4-byte length prefix: check the count against the data
        # before allocating (a 111-byte request with shape [2**27] asked for 1 GiB).
        if count * 4 > len(chunk):
            raise BadRequest(f"input '{name}': shape holds {count} BYTES elements, "
                             f"{len(chunk)} binary bytes cannot")
        out = np.empty(count, dtype=object)
        pos = 0
        for i in range(count):
            if pos + 4 > len(chunk):
                raise BadRequest(f"input '{name}': binary BYTES data ends early at element {i}")
            (length,) = struct.unpack_from("<I", chunk, pos)
            pos += 4
            out[i] = chunk[pos:pos + length]
            if len(out[i]) != length:
                raise BadRequest(f"input '{name}': binary BYTES element {i} is truncated")
            pos += length
        if pos != len(chunk):
            raise BadRequest(f"input '{name}': binary BYTES data has trailing bytes")
        return out
    dtype = DATATYPE_TO_NUMPY[datatype].newbyteorder("<")
    if len(chunk) != count * dtype.itemsize:
        raise BadRequest(
            f"input '{name}': {len(chunk)} binary bytes, shape needs {count * dtype.itemsize}"
        )
    return np.frombuffer(chunk, dtype=dtype)


def encode_infer_response(
    model_name: str,
    model_version: str,
    outputs: list[Tensor],
    request_id: str | None = None,
    binary_outputs: set[str] | frozenset[str] = frozenset(),
) -> tuple[bytes, int | None]:
    """Serialise a response; returns (body, JSON header length or None).

    Outputs named in `binary_outputs` are appended raw after the JSON (the
    binary extension), and the caller must send the returned length as the
    `Inference-Header-Content-Length` header.
    """
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        doc["id"] = request_id
    blobs: list[bytes] = []
    entries = []
    for tensor in outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.name in binary_outputs:
            blob = tensor_to_binary(tensor)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif tensor.datatype == "BYTES":
            entry["data"] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in tensor.data.reshape(-1)
            ]
        else:
            entry["data"] = np.ascontiguousarray(tensor.data).reshape(-1)
        entries.append(entry)
    doc["outputs"] = entries
    body = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return body, None
    return body + b"".join(blobs), len(body)


def tensor_to_binary(tensor: Tensor) -> bytes:
    """Raw bytes of a tensor for the binary extension (BYTES: length-prefixed)."""
    if tensor.datatype == "BYTES":
        parts = []
        for value in tensor.data.reshape(-1):
            raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
            parts.append(struct.pack("<I", len(raw)) + raw)
        return b"".join(parts)
    dtype = DATATYPE_TO_NUMPY[tensor.datatype].newbyteorder("<")
    return np.ascontiguousarray(tensor.data, dtype=dtype).tobytes()


def encode_json(doc: Any) -> bytes:
    """orjson with numpy support: the one serialiser of every route."""
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
