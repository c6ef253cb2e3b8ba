"""Paddle Serving's JSON request on `POST /GeneralModelService/inference`.

Both shapes existing callers send, the C++ Serving protobuf `Request` as JSON
(`{"tensor": [...], "fetch_var_names": [...]}`) and the Python web service's samples
(`{"feed": [...], "fetch": [...]}`), are converted to the OIP `Tensor`s the rest of the
server understands and answered in the caller's own shape; errors stay HTTP errors.
"""

import base64
import binascii
import dataclasses
import math
from typing import Any

import numpy as np

from serving.errors import BadRequest
from serving.protocol import MAX_IMAGES, Tensor, check_unique, datatype_to_numpy

# Paddle Serving elem_type -> (OIP datatype, JSON field holding the values)
ELEM_TYPES: dict[int, tuple[str, str]] = {
    0: ("INT64", "int64_data"),
    1: ("FP32", "float_data"),
    2: ("INT32", "int_data"),
    3: ("FP64", "float64_data"),
    9: ("BOOL", "bool_data"),
    20: ("BYTES", "data"),
}
DATATYPE_TO_ELEM: dict[str, tuple[int, str]] = {v[0]: (k, v[1]) for k, v in ELEM_TYPES.items()}
DATATYPE_TO_ELEM["UINT8"] = (7, "int_data")
DATATYPE_TO_ELEM["INT8"] = (8, "int_data")


@dataclasses.dataclass
class CompatRequest:
    """A Paddle Serving request converted to OIP tensors."""

    form: str  # "tensor" (C++ Serving) or "feed" (Python web service)
    inputs: list[Tensor]
    fetch: list[str] | None
    log_id: int


def parse_compat_request(doc: Any) -> CompatRequest:
    """Convert a parsed JSON body; `BadRequest` naming the field on bad input."""
    if not isinstance(doc, dict):
        raise BadRequest("Paddle Serving request must be a JSON object")
    if "tensor" in doc:
        return _parse_tensor_form(doc)
    if "feed" in doc:
        return _parse_feed_form(doc)
    raise BadRequest("Paddle Serving request needs 'tensor' (C++ Serving) or 'feed' (web service)")


def _parse_tensor_form(doc: dict[str, Any]) -> CompatRequest:
    raw_tensors = doc["tensor"]
    if not isinstance(raw_tensors, list) or not raw_tensors:
        raise BadRequest("'tensor' must be a non-empty list")
    inputs = []
    for index, raw in enumerate(raw_tensors):
        if not isinstance(raw, dict):
            raise BadRequest(f"tensor[{index}] must be an object")
        name = raw.get("alias_name") or raw.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"tensor[{index}] needs a 'name'")
        elem_type = raw.get("elem_type", 1)
        if not isinstance(elem_type, int) or elem_type not in ELEM_TYPES:  # a list: unhashable
            raise BadRequest(f"tensor '{name}': unsupported elem_type {elem_type!r}")
        datatype, field = ELEM_TYPES[elem_type]
        values = raw.get(field)
        if values is None:
            raise BadRequest(f"tensor '{name}': elem_type {elem_type} needs '{field}'")
        shape = raw.get("shape")
        if datatype == "BYTES":
            data = _decode_images(name, values)
            shape = shape or [len(data)]
        else:
            try:  # OverflowError: an integer outside INT64
                data = np.asarray(values, dtype=datatype_to_numpy(datatype))
            except (TypeError, ValueError, RecursionError, OverflowError):
                raise BadRequest(f"tensor '{name}': '{field}' must be a list of numbers") from None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BadRequest(f"tensor '{name}': 'shape' must be a list of non-negative integers")
        if math.prod(shape) != data.size:  # Python ints: no int64 wrap-around
            raise BadRequest(f"tensor '{name}': shape {shape} does not match {data.size} values")
        inputs.append(Tensor(name, datatype, tuple(shape), data.reshape(shape)))
    fetch = doc.get("fetch_var_names") or None
    if fetch is not None and (not isinstance(fetch, list)
                              or not all(isinstance(n, str) for n in fetch)):
        raise BadRequest("'fetch_var_names' must be a list of strings")
    check_unique(fetch or [], "fetch_var_names")
    return CompatRequest("tensor", inputs, fetch, _log_id(doc))


def _parse_feed_form(doc: dict[str, Any]) -> CompatRequest:
    samples = doc["feed"]
    if isinstance(samples, dict):
        samples = [samples]
    if (
        not isinstance(samples, list)
        or not samples
        or not all(isinstance(s, dict) for s in samples)
    ):
        raise BadRequest("'feed' must be a non-empty list of {input name: value} objects")
    names = list(samples[0])
    inputs = []
    for name in names:
        values = [sample.get(name) for sample in samples]
        if any(v is None for v in values):
            raise BadRequest(f"feed input '{name}' is missing from some samples")
        if all(isinstance(v, str) for v in values):
            data = _decode_images(name, values)
            inputs.append(Tensor(name, "BYTES", (len(data),), data))
            continue
        try:
            array = np.asarray(values, dtype=np.float32)
        except (TypeError, ValueError, RecursionError, OverflowError):
            raise BadRequest(f"feed input '{name}' must be numbers (or base64 images)") from None
        inputs.append(Tensor(name, "FP32", tuple(array.shape), array))
    fetch = doc.get("fetch") or None
    if fetch is not None and (
        not isinstance(fetch, list) or not all(isinstance(n, str) for n in fetch)
    ):
        raise BadRequest("'fetch' must be a list of output names")
    check_unique(fetch or [], "fetch")
    return CompatRequest("feed", inputs, fetch, _log_id(doc))


def _log_id(doc: dict[str, Any]) -> int:
    """Paddle Serving's request id: an integer (a client's "abc" is a 400, not a 500)."""
    value = doc.get("log_id") or 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'log_id' must be an integer, got {value!r}")
    return value


def _decode_images(name: str, values: Any) -> np.ndarray:
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise BadRequest(f"tensor '{name}': images must be base64 strings")
    if len(values) > MAX_IMAGES:  # before decoding any (a million base64 strings took 2 s)
        raise BadRequest(f"tensor '{name}': {len(values)} images; at most {MAX_IMAGES} "
                         "per request")
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        try:
            out[i] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"tensor '{name}': element {i} is not valid base64") from None
    return out


def encode_compat_response(request: CompatRequest, outputs: list[Tensor]) -> dict[str, Any]:
    """The response document for the request's form."""
    if request.form == "feed":
        return {"result": {t.name: _plain(t) for t in outputs}}
    tensors = []
    for t in outputs:
        elem_type, field = DATATYPE_TO_ELEM.get(t.datatype, (1, "float_data"))
        tensors.append({
            "name": t.name,
            "alias_name": t.name,
            "elem_type": elem_type,
            "shape": list(t.shape),
            field: _plain(t, flat=True),
        })
    return {
        "outputs": [{"tensor": tensors, "engine_name": "general_infer_0"}],
        "err_no": 0,
        "err_msg": "",
        "log_id": request.log_id,
    }


def _plain(tensor: Tensor, flat: bool = False) -> Any:
    if tensor.datatype == "BYTES":
        return [v.decode("utf-8", "replace") for v in np.asarray(tensor.data).reshape(-1)]
    data = np.ascontiguousarray(tensor.data)  # orjson serialises C-contiguous arrays only
    return data.reshape(-1) if flat else data
