"""OIP v2 and Paddle Serving bodies: parsing, encoding, binary extension, errors (no server)."""

import base64

import numpy as np
import orjson
import pytest

from serving import compat
from serving.client import decode_response, encode_request
from serving.errors import BadRequest
from serving.protocol import (
    Tensor,
    datatype_to_numpy,
    encode_infer_response,
    numpy_to_datatype,
    parse_infer_request,
)

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_datatype_mapping_round_trips(dtype):
    assert datatype_to_numpy(numpy_to_datatype(np.dtype(dtype))) == np.dtype(dtype)


def test_strings_and_bytes_map_to_bytes():
    assert numpy_to_datatype(np.array([b"a"]).dtype) == "BYTES"
    assert numpy_to_datatype(np.array(["a"]).dtype) == "BYTES"
    assert numpy_to_datatype(np.array([b"a"], dtype=object).dtype) == "BYTES"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float64])
def test_request_round_trip(binary, dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    body, length = encode_request([Tensor("x", numpy_to_datatype(array.dtype), array.shape, array)],
                                  binary=binary, request_id="r1")
    request = parse_infer_request(body, None if length is None else str(length))
    assert request.id == "r1"
    (tensor,) = request.inputs
    assert tensor.name == "x" and tensor.shape == (2, 3, 4)
    assert tensor.data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(tensor.data, array)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_bytes_tensor_round_trip(binary):
    data = np.empty(2, dtype=object)
    data[:] = [b"\x89PNG\x00\xff", b""]
    body, length = encode_request([Tensor("img", "BYTES", (2,), data)], binary=binary)
    request = parse_infer_request(body, None if length is None else str(length))
    assert list(request.inputs[0].data) == [b"\x89PNG\x00\xff", b""]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_response_round_trip(binary):
    outputs = [
        Tensor("bbox", "FP32", (2, 6), np.arange(12, dtype=np.float32).reshape(2, 6)),
        Tensor("bbox_num", "INT32", (1,), np.array([2], np.int32)),
        Tensor("labels", "BYTES", (2,), np.array([b"circle", b"square"], dtype=object)),
    ]
    names = {t.name for t in outputs} if binary else set()
    body, length = encode_infer_response("m", "1", outputs, "id-9", names)
    assert (length is not None) == binary
    decoded = decode_response(body, None if length is None else str(length))
    np.testing.assert_array_equal(decoded["bbox"], outputs[0].data)
    assert decoded["bbox"].dtype == np.float32 and decoded["bbox_num"].dtype == np.int32
    assert list(decoded["labels"]) == [b"circle", b"square"]
    header = orjson.loads(body[:length] if length else body)
    assert header["model_name"] == "m" and header["model_version"] == "1" and header["id"] == "id-9"


def test_nested_json_data_is_accepted():
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2],
                                     "data": [[1, 2], [3, 4]]}]})
    (tensor,) = parse_infer_request(body).inputs
    np.testing.assert_array_equal(tensor.data, [[1, 2], [3, 4]])


@pytest.mark.parametrize("body, words", [
    (b"{not json", ["not valid JSON"]),
    (b"[]", ["JSON object"]),
    (b'{"inputs": []}', ["non-empty 'inputs'"]),
    (b'{"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]}', ["inputs[0]", "name"]),
    (b'{"inputs": [{"name": "image", "datatype": "FP33", "shape": [1], "data": [1]}]}',
     ["'image'", "FP33"]),
    (b'{"inputs": [{"name": "image", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3]}]}',
     ["'image'", "4 elements", "3"]),
    (b'{"inputs": [{"name": "image", "datatype": "FP32", "shape": [-1], "data": [1]}]}',
     ["'image'", "non-negative"]),
    (b'{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1], "data": ["a"]}]}',
     ["'image'", "FP32 numbers"]),
    (b'{"inputs": [{"name": "image", "datatype": "FP32", "shape": [1]}]}', ["'image'", "data"]),
    (b'{"inputs": [{"name": "pic", "datatype": "BYTES", "shape": [1], "data": ["@@@"]}]}',
     ["'pic'", "base64"]),
    (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}], "outputs": 3}',
     ["outputs"]),
])
def test_malformed_requests_name_the_problem(body, words):
    with pytest.raises(BadRequest) as info:
        parse_infer_request(body)
    for word in words:
        assert word in info.value.message


def test_binary_size_mismatch_names_the_tensor():
    header = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4],
                                       "parameters": {"binary_data_size": 16}}]})
    with pytest.raises(BadRequest, match="'x'"):
        parse_infer_request(header + b"\0" * 8, str(len(header)))
    with pytest.raises(BadRequest, match="binary data"):
        parse_infer_request(header + b"\0" * 20, str(len(header)))
    with pytest.raises(BadRequest, match="Inference-Header-Content-Length|outside"):
        parse_infer_request(header, str(len(header) + 5))


def test_requested_outputs_and_binary_flags():
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                         "outputs": [{"name": "a", "parameters": {"binary_data": True}},
                                     {"name": "b"}]})
    request = parse_infer_request(body)
    assert request.outputs == ["a", "b"] and request.binary_outputs == {"a"}


def test_paddle_serving_tensor_form():
    doc = {"tensor": [{"name": "image", "alias_name": "image", "elem_type": 1, "shape": [1, 2],
                       "float_data": [0.5, 1.5]}], "fetch_var_names": ["out"], "log_id": 7}
    request = compat.parse_compat_request(doc)
    assert request.form == "tensor" and request.fetch == ["out"] and request.log_id == 7
    np.testing.assert_array_equal(request.inputs[0].data, np.array([[0.5, 1.5]], np.float32))
    reply = compat.encode_compat_response(
        request, [Tensor("out", "FP32", (1, 2), np.array([[1, 2]], np.float32))])
    assert reply["err_no"] == 0 and reply["log_id"] == 7
    (tensor,) = reply["outputs"][0]["tensor"]
    assert tensor["elem_type"] == 1 and tensor["shape"] == [1, 2]
    assert list(tensor["float_data"]) == [1.0, 2.0]


def test_paddle_serving_feed_form_with_images():
    image = base64.b64encode(b"png-bytes").decode()
    request = compat.parse_compat_request({"feed": [{"image": image}, {"image": image}],
                                           "fetch": ["bbox"]})
    assert request.form == "feed"
    (tensor,) = request.inputs
    assert tensor.datatype == "BYTES" and list(tensor.data) == [b"png-bytes", b"png-bytes"]


@pytest.mark.parametrize("doc, words", [
    ({"nothing": 1}, ["'tensor'", "'feed'"]),
    ({"tensor": [{"name": "x", "elem_type": 1, "shape": [3], "float_data": [1, 2]}]},
     ["'x'", "shape"]),
    ({"tensor": [{"name": "x", "elem_type": 42, "float_data": [1]}]}, ["'x'", "elem_type"]),
    ({"tensor": [{"name": "x", "elem_type": 1, "shape": [1]}]}, ["'x'", "float_data"]),
    ({"feed": [{"image": "@@"}]}, ["'image'", "base64"]),
    ({"feed": []}, ["feed"]),
])
def test_paddle_serving_errors_name_the_field(doc, words):
    with pytest.raises(BadRequest) as info:
        compat.parse_compat_request(doc)
    for word in words:
        assert word in info.value.message
