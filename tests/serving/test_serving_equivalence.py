"""Detections over HTTP equal the in-process predictor's on the same images.

The reference path uses Paddle Inference directly in this process (its own
predictor, same model directory), the same preprocessing and the same
decoder; the server must return the same rows. The reference decode is also
compared with the example repo's own `postprocess.decode` (what produced
the training run's `bbox.json`), so "same" is anchored to the trainer.
"""

import importlib.util

import numpy as np
import pytest
import yaml

from serving.client import ModelClient
from serving.modeldir import load_model_dir
from serving.postprocess import decode_centernet
from serving.preprocess import preprocess_images
from serving.runtime import create_predictor, run_predictor
from tests.fixtures.training import EXAMPLE


@pytest.fixture(scope="module")
def server(shapes_server):
    return shapes_server


@pytest.fixture(scope="module")
def reference(trained_model):
    model = load_model_dir(trained_model.model_dir)
    return model, create_predictor(model)


def in_process(reference, images):
    model, predictor = reference
    cfg = model.infer_cfg
    batch, sizes = preprocess_images(images, cfg.input)
    heat, size, offset = run_predictor(predictor, {"image": batch})
    bbox, counts = decode_centernet(heat, size, offset, cfg.decode, cfg.input.size,
                                    cfg.category_ids(), sizes)
    return (heat, size, offset), bbox, counts


def test_http_detections_equal_in_process(server, reference, trained_model):
    client = ModelClient(server.url, server.model_name)
    paths = sorted((trained_model.data_dir / "val").glob("*.png"))[:12]
    total = 0
    for path in paths:
        image = path.read_bytes()
        got = client.infer(image)
        _, bbox, counts = in_process(reference, [image])
        assert got["bbox_num"].tolist() == counts.tolist()
        np.testing.assert_array_equal(got["bbox"][:, 0], bbox[:, 0])
        np.testing.assert_allclose(got["bbox"], bbox, rtol=0, atol=1e-4)
        total += int(counts.sum())
    assert total > 0


def test_http_batch_equals_in_process_batch(server, reference, trained_model):
    client = ModelClient(server.url, server.model_name)
    images = [p.read_bytes() for p in sorted((trained_model.data_dir / "val").glob("*.png"))[:4]]
    got = client.infer(images)
    _, bbox, counts = in_process(reference, images)
    assert got["bbox_num"].tolist() == counts.tolist()
    np.testing.assert_allclose(got["bbox"], bbox, rtol=0, atol=1e-4)


def test_raw_outputs_equal_in_process(server, reference):
    x = np.random.default_rng(3).normal(size=(2, 3, 128, 128)).astype(np.float32)
    got = ModelClient(server.url, server.model_name).infer({"image": x})
    expected = run_predictor(reference[1], {"image": x})
    for name, array in zip(("fetch_name_0", "fetch_name_1", "fetch_name_2"), expected):
        np.testing.assert_allclose(got[name], array, rtol=0, atol=1e-5)


def test_reference_decode_agrees_with_the_trainers(reference, trained_model):
    spec = importlib.util.spec_from_file_location("example_pp", EXAMPLE / "postprocess.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    raw_cfg = yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())
    images = [p.read_bytes() for p in sorted((trained_model.data_dir / "val").glob("*.png"))[:4]]
    (heat, size, offset), bbox, counts = in_process(reference, images)
    theirs = example.decode({"heatmap": heat, "size": size, "offset": offset}, raw_cfg)
    assert [len(d) for d in theirs] == counts.tolist()
    rows = [r for dets in theirs for r in dets]
    np.testing.assert_array_equal([r["category_id"] for r in rows], bbox[:, 0])
    np.testing.assert_allclose([r["score"] for r in rows], bbox[:, 1], atol=1e-5)
    xywh = np.stack([bbox[:, 2], bbox[:, 3], bbox[:, 4] - bbox[:, 2], bbox[:, 5] - bbox[:, 3]], 1)
    np.testing.assert_allclose([r["bbox"] for r in rows], xywh, atol=0.01)
