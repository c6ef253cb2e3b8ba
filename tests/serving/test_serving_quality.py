"""Model-quality signals: the pure functions of `serving.quality`, the preprocessing that
feeds them, and `ServerMetrics` observing their records. No server, no Paddle.

The real server sending these as metrics is tested in test_serving_server.py.
"""

import io

import numpy as np
import pytest
from PIL import Image

from serving.metrics import ServerMetrics
from serving.modeldir import InferConfig
from serving.preprocess import prepare_images, preprocess_images
from serving.quality import (
    BRIGHTNESS_BUCKETS,
    DETECTION_BUCKETS,
    OTHER,
    PIXEL_BUCKETS,
    SCORE_BUCKETS,
    AnswerSignals,
    InputStats,
    answer_signals,
    class_label,
    input_stats,
    split_answers,
)
from tests.fixtures.serving import TINY_INFER_CFG

CLASSES = frozenset({"circle", "square", "triangle"})


def png(array):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def sample(metrics, name, **labels):
    value = metrics.registry.get_sample_value(
        name, {"model_name": "m", "model_version": "v1", **labels})
    return 0.0 if value is None else value


# ---- the record of one answer ------------------------------------------------------


def test_counts_top_score_and_classes():
    scores = np.array([0.9, 0.4, 0.7], np.float32)
    record = answer_signals(scores, [b"circle", b"square", b"circle"], CLASSES)
    assert record.detections == 3
    assert record.top_score == pytest.approx(0.9)
    assert dict(record.classes) == {"circle": 2, "square": 1}
    assert record.image is None


def test_only_detections_at_the_draw_threshold_count_but_the_top_score_is_any():
    """A decoder that keeps every peak above 0.02 returns ~40 rows per image; the
    count that moves when a model goes blind is of the confident ones."""
    scores = np.array([0.9, 0.4, 0.7, 0.49, 0.5], np.float32)
    names = [b"circle", b"square", b"circle", b"square", b"triangle"]
    record = answer_signals(scores, names, CLASSES, min_score=0.5)
    assert record.detections == 3
    assert dict(record.classes) == {"circle": 2, "triangle": 1}
    blind = answer_signals(np.array([0.3, 0.2], np.float32), names[:2], CLASSES, min_score=0.5)
    assert (blind.detections, blind.classes) == (0, ())
    assert blind.top_score == pytest.approx(0.3)


def test_top_score_is_the_highest_not_the_first():
    record = answer_signals(np.array([0.2, 0.8, 0.5]), ["circle"] * 3, CLASSES)
    assert record.top_score == pytest.approx(0.8)


def test_empty_answer_is_zero_detections_and_top_score_zero():
    record = answer_signals(np.zeros(0, np.float32), np.empty(0, dtype=object), CLASSES)
    assert record == AnswerSignals(detections=0, top_score=0.0, classes=())


def test_unknown_class_is_other():
    record = answer_signals(np.array([0.5, 0.6, 0.7]), [b"circle", b"7", "hexagon"], CLASSES)
    assert dict(record.classes) == {"circle": 1, OTHER: 2}
    assert class_label(b"triangle", CLASSES) == "triangle"
    assert class_label("Triangle", CLASSES) == OTHER  # exact names only
    assert answer_signals(np.array([0.5]), ["circle"], frozenset()).classes == ((OTHER, 1),)


def test_scores_and_labels_must_pair_up():
    with pytest.raises(ValueError, match="2 scores for 1 labels"):
        answer_signals(np.array([0.5, 0.6]), ["circle"], CLASSES)


def test_brightness_of_known_synthetic_images():
    half = np.zeros((10, 20, 3), np.uint8)
    half[:, 10:] = 255  # half black, half white
    assert input_stats(half, 20, 10) == InputStats(brightness=pytest.approx(0.5), pixels=200)
    grey = np.full((4, 4, 3), 51, np.float32)  # 51 / 255 = 0.2
    assert input_stats(grey, 640, 480).brightness == pytest.approx(0.2)
    assert input_stats(grey, 640, 480).pixels == 640 * 480  # the decoded size, as given


def test_split_answers_gives_one_record_per_image():
    bbox = np.array([[1, 0.9, 0, 0, 1, 1], [2, 0.3, 0, 0, 1, 1], [3, 0.6, 0, 0, 1, 1]],
                    np.float32)
    counts = np.array([2, 0, 1], np.int32)
    names = np.array([b"circle", b"square", b"5"], dtype=object)
    stats = [InputStats(0.1, 100), InputStats(0.2, 200), InputStats(0.3, 300)]
    first, empty, last = split_answers(bbox, counts, names, CLASSES, stats)
    assert (first.detections, first.top_score) == (2, pytest.approx(0.9))
    assert dict(first.classes) == {"circle": 1, "square": 1} and first.image == stats[0]
    assert (empty.detections, empty.top_score, empty.classes) == (0, 0.0, ())
    assert empty.image == stats[1]
    assert dict(last.classes) == {OTHER: 1} and last.top_score == pytest.approx(0.6)
    with pytest.raises(ValueError, match="adds up to 2"):
        split_answers(bbox, np.array([1, 1], np.int32), names, CLASSES)


def test_bucket_bounds_are_the_contract():
    assert DETECTION_BUCKETS == (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
    assert len(SCORE_BUCKETS) == 20 and SCORE_BUCKETS[0] == 0.05 and SCORE_BUCKETS[-1] == 1.0
    assert SCORE_BUCKETS[6] == 0.35  # rounded, not 0.35000000000000003
    assert BRIGHTNESS_BUCKETS == SCORE_BUCKETS
    assert PIXEL_BUCKETS[0] == 1024 and PIXEL_BUCKETS[-1] == 2**24 and len(PIXEL_BUCKETS) == 15


# ---- preprocessing hands over the stats ---------------------------------------------


def test_prepare_images_measures_before_normalisation_and_keeps_the_decoded_size():
    cfg = InferConfig.model_validate(TINY_INFER_CFG)  # mean 0.5, std 0.25: normalised != raw
    dark = np.full((64, 96, 3), 51, np.uint8)  # 96x64, resized to 128x128 for the model
    light = np.full((128, 128), 204, np.uint8)  # greyscale, converted to RGB
    prepared = prepare_images([png(dark), png(light)], cfg.input)
    assert [s.pixels for s in prepared.stats] == [96 * 64, 128 * 128]
    assert prepared.stats[0].brightness == pytest.approx(0.2, abs=1e-6)
    assert prepared.stats[1].brightness == pytest.approx(0.8, abs=1e-6)
    # the tensor itself is still what it was: normalised, and equal to the old entry point's
    assert prepared.batch[0].mean() == pytest.approx((0.2 - 0.5) / 0.25, abs=1e-5)
    batch, sizes = preprocess_images([png(dark), png(light)], cfg.input)
    np.testing.assert_array_equal(batch, prepared.batch)
    np.testing.assert_array_equal(sizes, prepared.sizes)
    assert sizes.tolist() == [[64, 96], [128, 128]]


# ---- ServerMetrics observes a record ------------------------------------------------


def test_server_metrics_observe_answer():
    metrics = ServerMetrics("m", "v1", ["circle", "square", "triangle"])
    for name in ("circle", "square", "triangle", OTHER):  # every class series from the start
        assert metrics.registry.get_sample_value(
            "model_class_detections_total",
            {"model_name": "m", "model_version": "v1", "class": name}) == 0.0
    metrics.observe_answer(AnswerSignals(3, 0.92, (("circle", 2), (OTHER, 1)),
                                         InputStats(0.42, 128 * 128)))
    metrics.observe_answer(AnswerSignals(0, 0.0, ()))  # an empty answer, raw-free
    assert sample(metrics, "model_detections_per_image_count") == 2
    assert sample(metrics, "model_detections_per_image_sum") == 3
    assert sample(metrics, "model_detections_per_image_bucket", le="0.0") == 1
    assert sample(metrics, "model_detections_per_image_bucket", le="2.0") == 1
    assert sample(metrics, "model_detections_per_image_bucket", le="3.0") == 2
    assert sample(metrics, "model_top_score_bucket", le="0.05") == 1
    assert sample(metrics, "model_top_score_bucket", le="0.9") == 1
    assert sample(metrics, "model_top_score_bucket", le="0.95") == 2
    assert sample(metrics, "model_class_detections_total", **{"class": "circle"}) == 2
    assert sample(metrics, "model_class_detections_total", **{"class": OTHER}) == 1
    assert sample(metrics, "model_class_detections_total", **{"class": "square"}) == 0
    assert sample(metrics, "model_input_brightness_count") == 1  # only the decoded image
    assert sample(metrics, "model_input_brightness_bucket", le="0.4") == 0
    assert sample(metrics, "model_input_brightness_bucket", le="0.45") == 1
    assert sample(metrics, "model_input_pixels_count") == 1
    assert sample(metrics, "model_input_pixels_bucket", le="8192.0") == 0
    assert sample(metrics, "model_input_pixels_bucket", le="16384.0") == 1


def test_server_metrics_class_label_stays_bounded():
    """A record naming a class the server does not know (a bug upstream) still lands in
    `other`: the registry never grows a series per stray name."""
    metrics = ServerMetrics("m", "v1", ["circle"])
    for i in range(50):
        metrics.observe_answer(AnswerSignals(1, 0.5, ((f"stray-{i}", 1),)))
    assert sample(metrics, "model_class_detections_total", **{"class": OTHER}) == 50
    classes = {
        s.labels["class"]
        for family in metrics.registry.collect() if family.name == "model_class_detections"
        for s in family.samples
    }
    assert classes == {"circle", OTHER}


def test_server_metrics_count_images_per_class_once():
    """`model_class_images_total`: one image, one count per class it names, however many
    boxes of it (a crowd of one class is one trial for the canary's class-mix check); a
    stray name counts once in `other`, even with two strays in one image."""
    metrics = ServerMetrics("m", "v1", ["circle", "square"])
    for name in ("circle", "square", OTHER):  # every class series from the start
        assert metrics.registry.get_sample_value(
            "model_class_images_total",
            {"model_name": "m", "model_version": "v1", "class": name}) == 0.0
    metrics.observe_answer(AnswerSignals(15, 0.9, (("circle", 15),)))
    metrics.observe_answer(AnswerSignals(3, 0.8, (("circle", 1), ("square", 2))))
    metrics.observe_answer(AnswerSignals(2, 0.7, (("stray-a", 1), ("stray-b", 1))))
    metrics.observe_answer(AnswerSignals(0, 0.0, ()))
    assert sample(metrics, "model_class_images_total", **{"class": "circle"}) == 2
    assert sample(metrics, "model_class_images_total", **{"class": "square"}) == 1
    assert sample(metrics, "model_class_images_total", **{"class": OTHER}) == 1
    assert sample(metrics, "model_class_detections_total", **{"class": "circle"}) == 16
