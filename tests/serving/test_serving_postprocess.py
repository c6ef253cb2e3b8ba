"""The server's decoder and preprocessing agree with the example model repo's own.

The server may not import `examples/` (the arrow points the other way), so it
implements the CenterNet decode family from `infer_cfg.yml`. These tests load
the example's `postprocess.py` by path and check both give the same
detections on the same heads, and the same input tensor for the same image.
"""

import importlib.util
import io

import numpy as np
import pytest
from PIL import Image

from serving.modeldir import InferConfig
from serving.postprocess import decode_centernet
from serving.preprocess import preprocess_images
from tests.fixtures.serving import TINY_INFER_CFG
from tests.fixtures.training import EXAMPLE


def example_postprocess():
    spec = importlib.util.spec_from_file_location("example_postprocess", EXAMPLE / "postprocess.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_cfg(**decode):
    cfg = {k: v for k, v in TINY_INFER_CFG.items()}
    cfg["decode"] = {**TINY_INFER_CFG["decode"], **decode}
    return cfg


def random_heads(seed, batch=3, classes=3, grid=32):
    rng = np.random.default_rng(seed)
    heat = rng.random((batch, classes, grid, grid), dtype=np.float32) ** 6
    size = rng.uniform(1, 10, (batch, 2, grid, grid)).astype(np.float32)
    offset = rng.random((batch, 2, grid, grid), dtype=np.float32)
    return heat, size, offset


def as_example_format(bbox, counts):
    """Serving rows (id, score, x1, y1, x2, y2) -> example dicts, per image."""
    out, start = [], 0
    for n in counts:
        rows = bbox[start:start + n]
        start += n
        out.append([(int(r[0]), float(r[1]), [float(r[2]), float(r[3]), float(r[4] - r[2]),
                                               float(r[5] - r[3])]) for r in rows])
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("decode", [{}, {"top_k": 5}, {"score_threshold": 0.0}],
                         ids=["default", "top5", "no-threshold"])
def test_decoder_matches_the_examples(seed, decode):
    heat, size, offset = random_heads(seed)
    raw_cfg = example_cfg(**decode)
    cfg = InferConfig.model_validate(raw_cfg)
    bbox, counts = decode_centernet(heat, size, offset, cfg.decode, cfg.input.size,
                                    cfg.category_ids())
    theirs = example_postprocess().decode({"heatmap": heat, "size": size, "offset": offset},
                                          raw_cfg)
    ours = as_example_format(bbox, counts)
    assert [len(d) for d in ours] == [len(d) for d in theirs]
    assert sum(counts) > 0
    for image_ours, image_theirs in zip(ours, theirs):
        for (cat, score, box), det in zip(image_ours, image_theirs):
            assert cat == det["category_id"]
            assert score == pytest.approx(det["score"], abs=1e-5)  # theirs is rounded to 5 places
            assert box == pytest.approx(det["bbox"], abs=0.01)  # theirs is rounded to 2 places


def test_boxes_scale_back_to_the_original_image():
    heat, size, offset = random_heads(3, batch=1)
    cfg = InferConfig.model_validate(example_cfg())
    small, _ = decode_centernet(heat, size, offset, cfg.decode, (128, 128), [1, 2, 3])
    big, _ = decode_centernet(heat, size, offset, cfg.decode, (128, 128), [1, 2, 3],
                              np.array([[256, 512]], np.float32))
    np.testing.assert_allclose(big[:, [2, 4]], small[:, [2, 4]] * 4, rtol=1e-6)
    np.testing.assert_allclose(big[:, [3, 5]], small[:, [3, 5]] * 2, rtol=1e-6)
    np.testing.assert_array_equal(big[:, :2], small[:, :2])


def test_preprocessing_matches_the_examples():
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    cfg = InferConfig.model_validate(example_cfg())
    ours, sizes = preprocess_images([buffer.getvalue()], cfg.input)
    theirs = example_postprocess().preprocess(pixels[None], example_cfg())
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    assert sizes.tolist() == [[128, 128]]
