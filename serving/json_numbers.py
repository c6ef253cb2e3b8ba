"""An OIP v2 request's JSON with its tensor numbers read straight into numpy.

simdjson (`pysimdjson`) hands each input's numeric `data` over as one buffer, with no
Python float per element; everything else, and whatever the fast path does not take,
goes through orjson, so `serving.protocol` validates and words errors as before. Nested
`data` is counted against the shape as Triton does (`ReadDataFromJsonHelper`,
triton-inference-server/server `src/http_server.cc`). Why: docs/inside-serving.md.
"""

from typing import Any, Literal

import numpy as np
import orjson

try:  # the serve extra; a client-only install parses with orjson alone
    import simdjson
except ImportError:  # pragma: no cover - the test environment has every extra
    simdjson = None  # type: ignore[assignment]

# OIP datatype -> the buffer simdjson fills (double, int64, uint64): the caller narrows it.
BUFFER_TYPES: dict[str, Literal["d", "i", "u"]] = {
    "FP16": "d", "FP32": "d", "FP64": "d",
    "INT8": "i", "INT16": "i", "INT32": "i", "INT64": "i",
    "UINT8": "u", "UINT16": "u", "UINT32": "u", "UINT64": "u",
}
BUFFER_DTYPES = {"d": np.dtype(np.float64), "i": np.dtype(np.int64), "u": np.dtype(np.uint64)}


def load_request(json_part: bytes) -> Any:
    """The request document; an input's numeric `data` is a flat numpy array
    (float64, int64 or uint64) when simdjson could read it as one, else the
    JSON value as orjson gives it. `orjson.JSONDecodeError` if not JSON."""
    if simdjson is None:
        return orjson.loads(json_part)
    # Invalid JSON, or a number simdjson cannot hold (1e400, 2**64), is a ValueError;
    # an integer wider than 64 bits anywhere is its BIGINT_ERROR, a RuntimeError (from
    # the parse or from reading the value); a key with a NUL in it is listed by keys()
    # but not found by its own name, a KeyError. orjson reads those and words the errors.
    try:
        return _document(simdjson.Parser().parse(json_part))
    except (ValueError, RuntimeError, KeyError):
        return orjson.loads(json_part)


def _document(root: Any) -> Any:
    if not isinstance(root, simdjson.Object):
        return _plain(root)
    doc = {key: _plain(root[key]) for key in root.keys() if key != "inputs"}
    if "inputs" in root:
        inputs = root["inputs"]
        doc["inputs"] = ([_input(item) for item in inputs]
                         if isinstance(inputs, simdjson.Array) else _plain(inputs))
    return doc


def _input(item: Any) -> Any:
    if not isinstance(item, simdjson.Object):
        return _plain(item)
    out = {key: _plain(item[key]) for key in item.keys() if key != "data"}
    if "data" in item:
        out["data"] = _numbers(item["data"], out.get("datatype"))
    return out


def _numbers(data: Any, datatype: Any) -> Any:
    """A flat array of `data`'s numbers, or the plain value when it is not one."""
    kind = BUFFER_TYPES.get(datatype) if isinstance(datatype, str) else None
    if kind is not None and isinstance(data, simdjson.Array):
        try:
            return np.frombuffer(data.as_buffer(of_type=kind), dtype=BUFFER_DTYPES[kind])
        except (TypeError, ValueError):  # not all numbers of that kind: the general path
            pass
    return _plain(data)


def _plain(value: Any) -> Any:
    """A simdjson value as plain Python (dict, list, str, int, float, bool, None)."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
