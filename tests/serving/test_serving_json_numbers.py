"""JSON tensor numbers read by simdjson (`serving.json_numbers`) give the same request
as the orjson-only path: same arrays, same dtypes, same refusals (no server)."""

import numpy as np
import orjson
import pytest

from serving import json_numbers
from serving.errors import BadRequest
from serving.protocol import parse_infer_request

NUMERIC = ["FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64",
           "UINT8", "UINT16", "UINT32", "UINT64"]


@pytest.fixture
def orjson_only(monkeypatch):
    """Parse as a client-only install does (no simdjson): the reference path."""
    def parse(body):
        with monkeypatch.context() as patch:
            patch.setattr(json_numbers, "simdjson", None)
            return parse_infer_request(body)
    return parse


def _values(datatype, rng, count):
    if datatype.startswith("FP"):
        return (rng.standard_normal(count) * 1e3).tolist()
    info = np.iinfo(datatype.lower().replace("fp", "float"))
    return rng.integers(info.min, info.max, count, dtype=np.int64 if info.min < 0
                        else np.uint64, endpoint=True).tolist()


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
@pytest.mark.parametrize("datatype", NUMERIC)
def test_fast_path_equals_the_orjson_path(datatype, nested, orjson_only):
    rng = np.random.default_rng(len(datatype))
    values = _values(datatype, rng, 24)
    data = np.asarray(values, dtype=object).reshape(2, 3, 4).tolist() if nested else values
    body = orjson.dumps({"id": "r", "inputs": [
        {"name": "x", "datatype": datatype, "shape": [2, 3, 4], "data": data,
         "parameters": {"note": [1, 2]}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
    assert isinstance(json_numbers.load_request(body)["inputs"][0]["data"], np.ndarray)
    fast, slow = parse_infer_request(body), orjson_only(body)
    assert (fast.id, fast.outputs, fast.binary_outputs) == (slow.id, slow.outputs,
                                                            slow.binary_outputs)
    (a,), (b,) = fast.inputs, slow.inputs
    assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape == (2, 3, 4)
    np.testing.assert_array_equal(a.data, b.data)
    a.data[0, 0, 0] = 0  # a tensor the model code may write to, not simdjson's buffer


@pytest.mark.parametrize("data", [
    [1, True, 2.5],  # a boolean among numbers
    [1, "2", 3],  # a string
    [1, None, 3],
    [1.5, 2.0, 3],  # not integers for an integer tensor: the general path decides
], ids=["bool", "string", "null", "fractions"])
@pytest.mark.parametrize("datatype", ["FP32", "INT32"])
def test_what_simdjson_does_not_take_goes_the_general_way(datatype, data, orjson_only):
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": [3],
                                     "data": data}]})
    try:
        want = orjson_only(body).inputs[0].data
    except BadRequest as exc:
        with pytest.raises(BadRequest) as info:
            parse_infer_request(body)
        assert info.value.message == exc.message
    else:
        np.testing.assert_array_equal(parse_infer_request(body).inputs[0].data, want)


@pytest.mark.parametrize("datatype, value", [
    ("INT8", 128), ("INT8", -129), ("UINT8", 256), ("UINT8", -1), ("INT32", 2**31),
    ("UINT16", 70000), ("INT64", 2**63),
])
def test_integers_out_of_range_are_a_400_naming_the_input(datatype, value, orjson_only):
    body = orjson.dumps({"inputs": [{"name": "counts", "datatype": datatype, "shape": [2],
                                     "data": [1, value]}]})
    for parse in (parse_infer_request, orjson_only):  # was a 500 (OverflowError) before
        with pytest.raises(BadRequest) as info:
            parse(body)
        assert "'counts'" in info.value.message and datatype in info.value.message


@pytest.mark.parametrize("data", [b"[1e400]", b"[1,]"], ids=["too-large", "invalid-json"])
def test_what_neither_parser_reads_is_refused_as_orjson_words_it(data, orjson_only):
    body = (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": '
            + data + b"}]}")
    with pytest.raises(BadRequest) as slow:
        orjson_only(body)
    with pytest.raises(BadRequest) as fast:
        parse_infer_request(body)
    assert fast.value.message == slow.value.message
    assert "not valid JSON" in fast.value.message


def test_nested_numbers_are_taken_in_row_major_order_like_triton():
    """Triton's ReadDataFromJsonHelper (src/http_server.cc) recurses into every array and
    checks the count only; so do we on the fast path (numpy refused this ragged list)."""
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2],
                                     "data": [[1], [2, 3, 4]]}]})
    np.testing.assert_array_equal(parse_infer_request(body).inputs[0].data, [[1, 2], [3, 4]])
    short = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2],
                                      "data": [[1], [2, 3]]}]})
    with pytest.raises(BadRequest, match="4 elements, data has 3"):
        parse_infer_request(short)


def test_documents_that_are_not_objects_parse_as_json():
    assert json_numbers.load_request(b"[1, 2]") == [1, 2]
    assert json_numbers.load_request(b'{"inputs": 3}') == {"inputs": 3}
    assert json_numbers.load_request(b'{"inputs": [3]}') == {"inputs": [3]}


@pytest.mark.parametrize("body", [
    b'{"id": 1180591620717411303424, "inputs": []}',  # BIGINT_ERROR, a RuntimeError
    b'{"inputs": [{"name": "x", "\\u0000": 1}]}',  # keys() lists it, item[key] does not find it
], ids=["bigint", "nul-key"])
def test_what_simdjson_raises_on_reading_goes_the_orjson_way(body):
    """Found by the request fuzzing (issue 26): both were 500s."""
    assert json_numbers.load_request(body) == orjson.loads(body)
