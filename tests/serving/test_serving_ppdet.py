"""PaddleDetection exports served natively (issue 13, item 1).

The ops (`serving/ppdet.py`) are checked one by one against hand-computed
expectations on real PNG and JPEG images, and the whole preprocessing against
a transcription of PaddleDetection's own deploy code (release/2.7
`deploy/python/preprocess.py` and `infer.py` `create_inputs`, below). The
real `mlops serve` on a PaddleDetection-format export (`tests/ppdet_export.py`)
must then answer encoded images with exactly the detections the exported
program gives in-process after that reference preprocessing.
"""

import base64
import copy
import io
import re
import shutil
import subprocess
import sys

import cv2
import numpy as np
import orjson
import pytest
import requests
import yaml
from PIL import Image

from serving.errors import BadRequest, ModelDirError
from serving.modeldir import InferConfig, load_model_dir
from serving.ppdet import (
    ImInfo,
    PPDetImages,
    apply_ops,
    create_inputs,
    decode_image,
    normalize,
    pad_stride,
    permute,
    resize,
)
from serving.ppdet_config import NormalizeImageOp, PadStrideOp, PPDetConfig, ResizeOp
from tests.fixtures.serving import served, server_env
from tests.ppdet_export import LABELS, infer_cfg

# ---- images ---------------------------------------------------------------------------


def scene(height, width, seed):
    """An RGB uint8 image with a background, two coloured boxes and a noisy corner."""
    rng = np.random.default_rng(seed)
    im = np.empty((height, width, 3), np.uint8)
    im[:] = rng.integers(20, 200, size=3)
    for _ in range(2):
        y, x = rng.integers(0, height // 2), rng.integers(0, width // 2)
        im[y:y + height // 3, x:x + width // 3] = rng.integers(0, 256, size=3)
    im[height // 2:, width // 2:] = rng.integers(0, 256, size=(height - height // 2,
                                                              width - width // 2, 3))
    return im


def encode(im, fmt):
    buffer = io.BytesIO()
    Image.fromarray(im).save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


#: (height, width, format): non-square, smaller and larger than the target, both formats
SHAPES = [(120, 200, "PNG"), (300, 160, "JPEG"), (64, 64, "PNG"), (90, 250, "JPEG"),
          (50, 70, "PNG")]


@pytest.fixture(scope="module")
def images():
    return [encode(scene(h, w, seed), fmt) for seed, (h, w, fmt) in enumerate(SHAPES)]


@pytest.fixture(scope="module")
def grey():
    return encode(np.full((70, 90, 3), 128, np.uint8), "PNG")


# ---- PaddleDetection's deploy code, transcribed (the reference) ------------------------
# PaddleDetection release/2.7 deploy/python/preprocess.py (decode_image, Resize,
# NormalizeImage, Permute, PadStride, preprocess) and deploy/python/infer.py
# (Detector.preprocess building the ops from infer_cfg.yml, create_inputs), with the
# classes reduced to functions of (im, im_info, **infer_cfg.yml keys).

def ref_resize(im, im_info, target_size, keep_ratio=True, interp=cv2.INTER_LINEAR):
    if isinstance(target_size, int):
        target_size = [target_size, target_size]
    origin_shape = im.shape[:2]
    if keep_ratio:
        im_size_min = np.min(origin_shape)
        im_size_max = np.max(origin_shape)
        target_size_min = np.min(target_size)
        target_size_max = np.max(target_size)
        im_scale = float(target_size_min) / float(im_size_min)
        if np.round(im_scale * im_size_max) > target_size_max:
            im_scale = float(target_size_max) / float(im_size_max)
        im_scale_x = im_scale
        im_scale_y = im_scale
    else:
        resize_h, resize_w = target_size
        im_scale_y = resize_h / float(origin_shape[0])
        im_scale_x = resize_w / float(origin_shape[1])
    im = cv2.resize(im, None, None, fx=im_scale_x, fy=im_scale_y, interpolation=interp)
    im_info['im_shape'] = np.array(im.shape[:2]).astype('float32')
    im_info['scale_factor'] = np.array([im_scale_y, im_scale_x]).astype('float32')
    return im, im_info


def ref_normalize(im, im_info, mean, std, is_scale=True, norm_type='mean_std'):
    im = im.astype(np.float32, copy=False)
    if is_scale:
        scale = 1.0 / 255.0
        im *= scale
    if norm_type == 'mean_std':
        mean = np.array(mean)[np.newaxis, np.newaxis, :]
        std = np.array(std)[np.newaxis, np.newaxis, :]
        im -= mean
        im /= std
    return im, im_info


def ref_permute(im, im_info):
    return im.transpose((2, 0, 1)).copy(), im_info


def ref_pad_stride(im, im_info, stride=0):
    coarsest_stride = stride
    if coarsest_stride <= 0:
        return im, im_info
    im_c, im_h, im_w = im.shape
    pad_h = int(np.ceil(float(im_h) / coarsest_stride) * coarsest_stride)
    pad_w = int(np.ceil(float(im_w) / coarsest_stride) * coarsest_stride)
    padding_im = np.zeros((im_c, pad_h, pad_w), dtype=np.float32)
    padding_im[:, :im_h, :im_w] = im
    return padding_im, im_info


REF_OPS = {"Resize": ref_resize, "NormalizeImage": ref_normalize, "Permute": ref_permute,
           "PadStride": ref_pad_stride}


def ref_preprocess(data, preprocess_infos):
    im_info = {'scale_factor': np.array([1., 1.], dtype=np.float32), 'im_shape': None}
    im = cv2.imdecode(np.frombuffer(data, dtype='uint8'), 1)  # BGR mode, but need RGB mode
    im = cv2.cvtColor(im, cv2.COLOR_BGR2RGB)
    im_info['im_shape'] = np.array(im.shape[:2], dtype=np.float32)
    im_info['scale_factor'] = np.array([1., 1.], dtype=np.float32)
    for op_info in preprocess_infos:
        new_op_info = op_info.copy()
        op_type = new_op_info.pop('type')
        im, im_info = REF_OPS[op_type](im, im_info, **new_op_info)
    return im, im_info


def ref_create_inputs(imgs, im_info):
    inputs = {}
    if len(imgs) == 1:
        inputs['image'] = np.array((imgs[0], )).astype('float32')
        inputs['im_shape'] = np.array((im_info[0]['im_shape'], )).astype('float32')
        inputs['scale_factor'] = np.array((im_info[0]['scale_factor'], )).astype('float32')
        return inputs
    inputs['im_shape'] = np.concatenate(
        [np.array((e['im_shape'], )).astype('float32') for e in im_info], axis=0)
    inputs['scale_factor'] = np.concatenate(
        [np.array((e['scale_factor'], )).astype('float32') for e in im_info], axis=0)
    max_shape_h = max(e.shape[1] for e in imgs)
    max_shape_w = max(e.shape[2] for e in imgs)
    padding_imgs = []
    for img in imgs:
        im_c, im_h, im_w = img.shape[:]
        padding_im = np.zeros((im_c, max_shape_h, max_shape_w), dtype=np.float32)
        padding_im[:, :im_h, :im_w] = img
        padding_imgs.append(padding_im)
    inputs['image'] = np.stack(padding_imgs, axis=0)
    return inputs


def reference_inputs(encoded, cfg):
    done = [ref_preprocess(data, cfg["Preprocess"]) for data in encoded]
    return ref_create_inputs([im for im, _ in done], [info for _, info in done])


# ---- the ops, one by one ----------------------------------------------------------------

def test_decode_is_opencv_bgr_turned_rgb(images):
    png = scene(40, 60, 9)
    assert np.array_equal(decode_image(encode(png, "PNG"), "x"), png)  # lossless: exact
    red = np.zeros((32, 48, 3), np.uint8)
    red[..., 0] = 230
    decoded = decode_image(encode(red, "JPEG"), "x")
    assert decoded.shape == (32, 48, 3) and decoded.dtype == np.uint8
    assert decoded[..., 0].min() > 200 and decoded[..., 2].max() < 30  # R stays R
    grey_png = encode(np.full((10, 12), 77, np.uint8), "PNG")  # one channel -> three
    assert np.array_equal(decode_image(grey_png, "x"), np.full((10, 12, 3), 77, np.uint8))


def test_decode_refuses_what_is_not_a_png_or_jpeg():
    with pytest.raises(BadRequest, match="element 3: not a decodable PNG or JPEG"):
        decode_image(b"GIF89a....", "element 3")
    bmp = io.BytesIO()
    Image.fromarray(scene(8, 8, 0)).save(bmp, format="BMP")  # cv2 reads it; we do not
    with pytest.raises(BadRequest, match="not a decodable PNG or JPEG"):
        decode_image(bmp.getvalue(), "x")


@pytest.mark.parametrize("interp", [0, 1, 2, 3])
@pytest.mark.parametrize("height,width", [(120, 200), (300, 160), (64, 64), (37, 501)])
def test_resize_to_the_target_size(height, width, interp):
    im = scene(height, width, 1)
    op = ResizeOp(type="Resize", target_size=(96, 128), keep_ratio=False, interp=interp)
    out, info = resize(im, ImInfo(np.zeros(2, np.float32), np.ones(2, np.float32)), op)
    assert out.shape == (96, 128, 3)
    assert np.array_equal(out, cv2.resize(im, (128, 96), interpolation=interp))
    assert info.im_shape.tolist() == [96.0, 128.0] and info.im_shape.dtype == np.float32
    assert info.scale_factor.dtype == np.float32
    assert np.allclose(info.scale_factor, [96 / height, 128 / width], rtol=1e-6)


@pytest.mark.parametrize("height,width,scale,shape", [
    (120, 200, 0.64, (77, 128)),  # 96/120 would make the long side 160 > 128: 128/200
    (300, 160, 128 / 300, (128, 68)),
    (50, 70, 128 / 70, (91, 128)),  # upscaled: 96/50 makes 134 > 128
    (100, 120, 0.96, (96, 115)),  # the short side decides: 120 * 0.96 = 115.2 <= 128
])
def test_resize_keeping_the_ratio(height, width, scale, shape):
    im = scene(height, width, 2)
    op = ResizeOp(type="Resize", target_size=(96, 128), keep_ratio=True, interp=1)
    out, info = resize(im, ImInfo(np.zeros(2, np.float32), np.ones(2, np.float32)), op)
    assert out.shape[:2] == shape
    assert info.im_shape.tolist() == list(map(float, shape))
    assert np.allclose(info.scale_factor, [scale, scale], rtol=1e-6)
    assert np.array_equal(out, cv2.resize(im, None, fx=scale, fy=scale,
                                          interpolation=cv2.INTER_LINEAR))


def test_normalize_scales_then_subtracts_mean_and_divides_by_std():
    im = scene(20, 30, 3)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = normalize(im, NormalizeImageOp(type="NormalizeImage", mean=mean, std=std))
    expected = (im.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)
    assert out.dtype == np.float32 and out.shape == (20, 30, 3)
    assert np.abs(out - expected).max() < 1e-5
    unscaled = normalize(im, NormalizeImageOp(type="NormalizeImage", mean=(100, 110, 120),
                                              std=(50, 60, 70), is_scale=False))
    assert np.abs(unscaled - (im - np.array([100, 110, 120])) / np.array([50, 60, 70])).max() \
        < 1e-4
    plain = normalize(im, NormalizeImageOp(type="NormalizeImage", norm_type="none"))
    assert np.abs(plain - im / 255.0).max() < 1e-6


def test_permute_and_pad_stride():
    im = np.arange(5 * 7 * 3, dtype=np.float32).reshape(5, 7, 3)
    chw = permute(im)
    assert chw.shape == (3, 5, 7) and chw[2, 4, 6] == im[4, 6, 2] and chw[1, 0, 3] == im[0, 3, 1]
    padded = pad_stride(chw, PadStrideOp(type="PadStride", stride=4))
    assert padded.shape == (3, 8, 8) and padded.dtype == np.float32
    assert np.array_equal(padded[:, :5, :7], chw)
    assert not padded[:, 5:, :].any() and not padded[:, :, 7:].any()
    assert pad_stride(chw, PadStrideOp(type="PadStride", stride=0)) is chw


def test_a_batch_is_padded_to_its_largest_image():
    a, b = np.ones((3, 4, 6), np.float32), np.full((3, 5, 2), 2, np.float32)
    inputs = create_inputs([a, b], [ImInfo(np.array([4, 6], np.float32), np.ones(2, np.float32)),
                                    ImInfo(np.array([5, 2], np.float32),
                                           np.array([0.5, 2], np.float32))])
    assert inputs["image"].shape == (2, 3, 5, 6)
    batch = inputs["image"]
    assert np.array_equal(batch[0, :, :4, :], a) and not batch[0, :, 4:].any()
    assert np.array_equal(batch[1, :, :, :2], b) and not batch[1, :, :, 2:].any()
    assert inputs["im_shape"].tolist() == [[4, 6], [5, 2]]
    assert inputs["scale_factor"].tolist() == [[1, 1], [0.5, 2]]
    assert all(v.dtype == np.float32 for v in inputs.values())


CONFIGS = {
    "fixed-cubic-stride32": infer_cfg(target_size=(96, 128), keep_ratio=False, interp=2),
    "keep-ratio-linear": infer_cfg(target_size=(96, 128), keep_ratio=True, interp=1, stride=0),
    "keep-ratio-area-stride8": infer_cfg(target_size=(80, 100), keep_ratio=True, interp=3,
                                         stride=8),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_whole_preprocessing_equals_paddledetections(name, images):
    """Every image alone and all of them as one batch: exactly the reference's arrays."""

    cfg = CONFIGS[name]
    typed = PPDetConfig.model_validate(cfg)
    ours = PPDetImages(typed, "test", ["image", "im_shape", "scale_factor"], ["bbox", "num"])
    for batch in [[image] for image in images] + [images]:
        prepared = ours.prepare(batch)
        expected = reference_inputs(batch, cfg)
        assert prepared.feeds.keys() == expected.keys()
        for key, array in expected.items():
            assert prepared.feeds[key].dtype == array.dtype == np.float32
            assert np.array_equal(prepared.feeds[key], array), (name, key)
        assert len(prepared.stats) == len(batch)


def test_quality_stats_are_taken_on_0_to_255_pixels(images):
    seen = []
    rgb = decode_image(images[0], "x")
    ops = PPDetConfig.model_validate(CONFIGS["fixed-cubic-stride32"]).preprocess
    apply_ops(rgb, ops, seen.append)
    assert len(seen) == 1 and seen[0].shape == (96, 128, 3) and seen[0].dtype == np.uint8


# ---- infer_cfg.yml ------------------------------------------------------------------------

def model_files(path, cfg_text):
    """Just enough of a model directory for load_model_dir to reach infer_cfg.yml."""
    path.mkdir(parents=True)
    (path / "inference.json").write_text("{}")
    (path / "inference.pdiparams").write_bytes(b"\0")
    (path / "infer_cfg.yml").write_text(cfg_text)
    return path


def test_the_format_is_recognised_and_the_examples_still_loads(tmp_path):
    ppdet = load_model_dir(model_files(tmp_path / "a", yaml.safe_dump(infer_cfg()))).infer_cfg
    assert isinstance(ppdet, PPDetConfig)
    assert ppdet.arch == "YOLO" and ppdet.label_list == LABELS and ppdet.draw_threshold == 0.5
    assert [op.type for op in ppdet.preprocess] == ["Resize", "NormalizeImage", "Permute",
                                                    "PadStride"]
    assert ppdet.preprocess[0] == ResizeOp(type="Resize", target_size=(96, 128),
                                           keep_ratio=False, interp=2)
    assert ppdet.label_names() == {0: "circle", 1: "square", 2: "triangle"}
    example = load_model_dir(model_files(tmp_path / "b", "labels: [circle]\n")).infer_cfg
    assert isinstance(example, InferConfig) and example.class_names() == ["circle"]
    square = copy.deepcopy(infer_cfg())
    square["Preprocess"][0]["target_size"] = 64  # an int is a square, as upstream reads it
    typed = load_model_dir(model_files(tmp_path / "c", yaml.safe_dump(square))).infer_cfg
    assert isinstance(typed, PPDetConfig) and typed.preprocess[0].target_size == (64, 64)


def _without_target_size(cfg):
    del cfg["Preprocess"][0]["target_size"]


def _unknown_op(cfg):
    cfg["Preprocess"].insert(1, {"type": "RandomDistort", "prob": 0.5})


def _no_permute(cfg):
    del cfg["Preprocess"][2]


def _bad_interp(cfg):
    cfg["Preprocess"][0]["interp"] = 7


def _no_labels(cfg):
    del cfg["label_list"]


@pytest.mark.parametrize("mutate,words", [
    (_unknown_op, ["Preprocess", "item 1", "'RandomDistort' is not supported",
                   "Resize, NormalizeImage, Permute, PadStride"]),
    (_without_target_size, ["Preprocess.0.Resize.target_size", "Field required"]),
    (_no_permute, ["Preprocess", "exactly one Permute"]),
    (_bad_interp, ["Preprocess.0.Resize.interp", "7 is not a cv2 interpolation flag"]),
    (_no_labels, ["label_list", "Field required"]),
], ids=["unknown-op", "no-target-size", "no-permute", "bad-interp", "no-labels"])
def test_a_bad_infer_cfg_names_the_file_and_the_field(tmp_path, mutate, words):
    cfg = copy.deepcopy(infer_cfg())
    mutate(cfg)
    model = model_files(tmp_path / "m", yaml.safe_dump(cfg))
    with pytest.raises(ModelDirError) as caught:
        load_model_dir(model)
    message = str(caught.value)
    assert message.startswith(f"{model / 'infer_cfg.yml'}: "), message
    for word in words:
        assert word in message, message


def test_serve_refuses_an_unknown_op_naming_it(ppdet_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ppdet_model_dir, model)
    cfg = yaml.safe_load((model / "infer_cfg.yml").read_text())
    _unknown_op(cfg)
    (model / "infer_cfg.yml").write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "mlops", "serve", str(model), "--port", "0"],
                          capture_output=True, text=True, env=server_env(), timeout=120)
    assert done.returncode != 0
    assert f"{model / 'infer_cfg.yml'}: Preprocess" in done.stderr, done.stderr
    assert "'RandomDistort' is not supported" in done.stderr


# ---- the server, against the exported program in-process ----------------------------------

@pytest.fixture(scope="module")
def predictor(ppdet_model_dir):
    # lazy (collection cost): paddle loads only when this runs
    import paddle.inference as paddle_infer

    config = paddle_infer.Config(str(ppdet_model_dir / "inference.json"),
                                 str(ppdet_model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_glog_info()
    return paddle_infer.create_predictor(config)


def run_program(predictor, inputs):
    """The exported program in-process, as PaddleDetection's Detector.predict runs it."""
    for name in predictor.get_input_names():
        handle = predictor.get_input_handle(name)
        handle.reshape(list(inputs[name].shape))
        handle.copy_from_cpu(inputs[name])
    predictor.run()
    names = predictor.get_output_names()
    return (predictor.get_output_handle(names[0]).copy_to_cpu(),
            predictor.get_output_handle(names[1]).copy_to_cpu())


@pytest.fixture(scope="module")
def server(ppdet_model_dir, tmp_path_factory):
    with served(ppdet_model_dir, "--threads", "1",
                log_dir=tmp_path_factory.mktemp("ppdet-server")) as running:
        yield running


def infer_url(server):
    return f"{server.url}/v2/models/{server.model_name}/infer"


def image_body(images):
    return orjson.dumps({"inputs": [{"name": "image_bytes", "datatype": "BYTES",
                                     "shape": [len(images)],
                                     "data": [base64.b64encode(i).decode() for i in images]}]})


def detect(server, images):
    response = requests.post(infer_url(server), data=image_body(images), timeout=60)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert set(outputs) == {"bbox", "bbox_num", "labels"}
    bbox = np.asarray(outputs["bbox"]["data"], np.float32).reshape(outputs["bbox"]["shape"])
    return bbox, np.asarray(outputs["bbox_num"]["data"]), outputs["labels"]["data"]


def test_images_are_answered_as_paddledetection_would(server, predictor, ppdet_model_dir,
                                                      images, grey):
    cfg = yaml.safe_load((ppdet_model_dir / "infer_cfg.yml").read_text())
    sent = [*images, grey]
    counts_seen = []
    for batch in [[image] for image in sent] + [sent]:
        bbox, counts, labels = detect(server, batch)
        expected_bbox, expected_counts = run_program(predictor, reference_inputs(batch, cfg))
        assert counts.tolist() == expected_counts.tolist()
        assert bbox.shape == expected_bbox.shape == (int(counts.sum()), 6)
        assert np.abs(bbox - expected_bbox).max(initial=0.0) < 1e-4
        assert labels == [LABELS[int(c)] for c in expected_bbox[:, 0]]
        counts_seen.append(counts.tolist())
    singles = [c[0] for c in counts_seen[:-1]]
    assert max(singles) > 0 and singles[-1] == 0, singles  # boxes, and none on flat grey
    # the boxes are in each image's own pixels (the graph used im_shape / scale_factor)
    for image, (h, w, _) in zip(images, SHAPES):
        bbox, _, _ = detect(server, [image])
        assert np.all(bbox[:, [2, 4]] <= w) and np.all(bbox[:, [3, 5]] <= h)


def test_raw_three_input_tensors_are_the_programs_own(server, predictor, ppdet_model_dir,
                                                     images):
    cfg = yaml.safe_load((ppdet_model_dir / "infer_cfg.yml").read_text())
    inputs = reference_inputs(images[:2], cfg)
    body = orjson.dumps({"inputs": [
        {"name": name, "datatype": "FP32", "shape": list(array.shape), "data": array.ravel()}
        for name, array in inputs.items()]}, option=orjson.OPT_SERIALIZE_NUMPY)
    response = requests.post(infer_url(server), data=body, timeout=60)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    bbox = np.asarray(outputs[0]["data"], np.float32).reshape(outputs[0]["shape"])
    expected_bbox, expected_counts = run_program(predictor, inputs)
    assert outputs[1]["data"] == expected_counts.tolist() and outputs[1]["datatype"] == "INT32"
    assert np.abs(bbox - expected_bbox).max(initial=0.0) < 1e-4 and len(bbox) > 0
    missing = orjson.dumps({"inputs": [
        {"name": "image", "datatype": "FP32", "shape": list(inputs["image"].shape),
         "data": inputs["image"].ravel()}]}, option=orjson.OPT_SERIALIZE_NUMPY)
    response = requests.post(infer_url(server), data=missing, timeout=60)
    assert response.status_code == 400 and "im_shape, scale_factor" in response.text


def test_metadata_describes_the_three_inputs_and_the_preprocessing(server):
    meta = requests.get(f"{server.url}/v2/models/{server.model_name}", timeout=10).json()
    assert meta["inputs"] == [
        {"name": "image", "datatype": "FP32", "shape": [-1, 3, -1, -1]},
        {"name": "im_shape", "datatype": "FP32", "shape": [-1, 2]},
        {"name": "scale_factor", "datatype": "FP32", "shape": [-1, 2]},
    ]
    params = meta["parameters"]
    assert [label["name"] for label in params["labels"]] == LABELS
    assert params["image_input"]["format"] == "PaddleDetection (YOLO)"
    assert [op["type"] for op in params["image_input"]["preprocess"]] == [
        "Resize", "NormalizeImage", "Permute", "PadStride"]


def test_warm_up_feeds_a_preprocessed_black_image(ppdet_model_dir):
    cfg = load_model_dir(ppdet_model_dir).infer_cfg
    assert isinstance(cfg, PPDetConfig)
    feeds = PPDetImages(cfg, "t", ["image", "im_shape", "scale_factor"], ["b"]).warm_up_feeds()
    assert feeds["image"].shape == (1, 3, 96, 128)  # the target size; 128 already /32
    assert feeds["im_shape"].tolist() == [[96, 128]]
    assert feeds["scale_factor"].tolist() == [[1, 1]]
    mean = np.array([0.485, 0.456, 0.406]) / np.array([0.229, 0.224, 0.225])
    assert np.allclose(feeds["image"][0, :, 0, 0], -mean, atol=1e-6)  # black, normalised


def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_quality_signals_count_detections_at_the_draw_threshold(server, images):
    before = requests.get(f"{server.url}/metrics", timeout=10).text
    bbox, counts, labels = detect(server, images[:3])
    after = requests.get(f"{server.url}/metrics", timeout=10).text

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    confident = bbox[:, 1] >= 0.5  # infer_cfg.yml draw_threshold
    assert 0 < confident.sum() and delta("model_detections_per_image_count") == 3
    assert delta("model_detections_per_image_sum") == confident.sum()
    for name in LABELS:
        drawn = sum(1 for label, keep in zip(labels, confident) if keep and label == name)
        assert delta("model_class_detections_total", **{"class": name}) == drawn


def test_paddle_serving_route_and_the_request_limits_apply(server, images):
    """The compat route answers as the OIP route does; the pixel budget is checked from the
    header before OpenCV decodes anything."""
    bbox, counts, labels = detect(server, images[:1])
    compat = requests.post(f"{server.url}/GeneralModelService/inference", timeout=60, json={
        "feed": [{"image": base64.b64encode(images[0]).decode()}],
        "fetch": ["bbox", "bbox_num", "labels"]})
    assert compat.status_code == 200, compat.text
    result = compat.json()["result"]
    assert result["bbox_num"] == counts.tolist() and result["labels"] == labels
    assert np.abs(np.asarray(result["bbox"], np.float32).reshape(-1, 6) - bbox).max() < 1e-6
    huge = io.BytesIO()
    Image.new("1", (4100, 4100)).save(huge, format="PNG")  # 16.8 Mpx in a few KB
    response = requests.post(infer_url(server), data=image_body([huge.getvalue()]), timeout=60)
    assert response.status_code == 400 and "4100x4100 image is too large" in response.text
    response = requests.post(infer_url(server), data=image_body([b"\x89PNG broken"]), timeout=60)
    assert response.status_code == 400 and "element 0: not a decodable PNG or JPEG" in response.text
