"""OIP v2 conformance, checked with an independent implementation: `tritonclient.http`.

Triton's own HTTP client parses our health, metadata and infer responses,
in JSON and with the binary tensor extension, and the shapes and dtypes of
what it gets back match what was sent and what the metadata declares.
"""

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def server(shapes_server):
    return shapes_server


@pytest.fixture(scope="module")
def client(server):
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


def test_health_and_metadata(client, server):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(server.model_name)
    assert client.is_model_ready(server.model_name, server.model_version)
    assert not client.is_model_ready("other-model")
    meta = client.get_model_metadata(server.model_name)
    assert meta["name"] == server.model_name and server.model_version in meta["versions"]
    assert meta["inputs"][0] == {"name": "image", "datatype": "FP32", "shape": [-1, 3, 128, 128]}
    assert client.get_server_metadata()["name"]


@pytest.mark.parametrize("binary_in", [True, False], ids=["bin-in", "json-in"])
@pytest.mark.parametrize("binary_out", [True, False], ids=["bin-out", "json-out"])
@pytest.mark.parametrize("batch", [1, 3])
def test_raw_tensor_round_trip(client, server, binary_in, binary_out, batch):
    x = np.random.default_rng(batch).normal(size=(batch, 3, 128, 128)).astype(np.float32)
    tensor = triton.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary_in)
    meta = client.get_model_metadata(server.model_name)
    wanted = [triton.InferRequestedOutput(o["name"], binary_data=binary_out)
              for o in meta["outputs"]]
    result = client.infer(server.model_name, [tensor], outputs=wanted, request_id="t-1",
                          model_version=server.model_version)
    response = result.get_response()
    assert response["model_name"] == server.model_name and response["id"] == "t-1"
    for spec in meta["outputs"]:
        array = result.as_numpy(spec["name"])
        assert array.dtype == np.float32
        assert list(array.shape) == [batch, *spec["shape"][1:]]
        assert np.isfinite(array).all()


def test_results_identical_across_encodings(client, server):
    x = np.random.default_rng(9).normal(size=(1, 3, 128, 128)).astype(np.float32)
    results = []
    for binary in (True, False):
        tensor = triton.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        out = triton.InferRequestedOutput("fetch_name_0", binary_data=binary)
        results.append(client.infer(server.model_name, [tensor], outputs=[out])
                       .as_numpy("fetch_name_0"))
    np.testing.assert_array_equal(results[0], results[1])


def test_encoded_images_as_bytes_tensor(client, server, trained_model):
    paths = sorted((trained_model.data_dir / "val").glob("*.png"))[:2]
    images = np.array([p.read_bytes() for p in paths], dtype=object)
    tensor = triton.InferInput("image_bytes", [2], "BYTES")
    tensor.set_data_from_numpy(images, binary_data=True)
    result = client.infer(server.model_name, [tensor])
    bbox, counts, labels = (result.as_numpy(n) for n in ("bbox", "bbox_num", "labels"))
    assert bbox.dtype == np.float32 and bbox.shape == (int(counts.sum()), 6)
    assert counts.dtype == np.int32 and counts.shape == (2,)
    assert labels.shape == (len(bbox),)
    assert {label.decode() for label in labels} <= {"circle", "square", "triangle"}


def test_errors_surface_as_exceptions_with_the_message(client, server):
    x = np.zeros((1, 4, 128, 128), np.float32)
    tensor = triton.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException, match="'image'"):
        client.infer(server.model_name, [tensor])
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("other-model")
