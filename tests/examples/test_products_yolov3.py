"""The second example model repo, examples/products-yolov3: its data, training, export and serving.

Fast tests check the generator and the training step in-process; the `slow` ones run
`train.py` briefly (one process, 16 steps on 64 images, then the export and
bbox.json) and check the PaddleDetection-format export, that `mlops serve` answers
encoded images as the exported program does in-process, and that the pipeline's
mAP on the example's own files equals pycocotools'.
"""

import base64
import contextlib
import importlib
import io
import json
import pathlib
import random
import shutil
import subprocess
import sys

import cv2
import numpy as np
import orjson
import pytest
import requests
import yaml
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from serving.ppdet_config import PPDetConfig
from tests.fixtures.serving import start_server, stop_server
from tests.fixtures.training import training_env
from workflows.evaluation import evaluate_detections

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "products-yolov3"
SMALL = {"num_train": 64, "num_val": 24}


#: The example's modules: both examples have a `model.py` and a `train.py`, and the
#: shapes example's fixtures import theirs by the same bare names in this process.
_OWN = tuple(p.stem for p in EXAMPLE.glob("*.py"))
_loaded: dict = {}


@contextlib.contextmanager
def _example_imports():
    """Bare-name imports (and the example's own lazy ones) resolve to this example's
    modules inside; outside, the names are as they were (another example's or none)."""
    saved = {n: sys.modules.pop(n) for n in _OWN if n in sys.modules}
    sys.modules.update(_loaded)  # one module object per name across tests
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLE))
        for n in _OWN:
            module = sys.modules.pop(n, None)
            if module is not None and str(getattr(module, "__file__", "")).startswith(
                    str(EXAMPLE)):
                _loaded.setdefault(n, module)
        sys.modules.update(saved)


def example_module(name):
    """One of the example's modules, imported from its directory (it is not a package)."""
    with _example_imports():
        return importlib.import_module(name)


@pytest.fixture(autouse=True)
def _imports_are_this_examples():
    with _example_imports():
        yield


def small_params():
    shelf_data = example_module("shelf_data")
    return dict(shelf_data.DEFAULT_PARAMS, **SMALL)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("shelves") / "data"
    digest = example_module("shelf_data").ensure_dataset(root, small_params())
    return root, digest


# ---- the data ---------------------------------------------------------------------------------

def test_generation_is_deterministic_and_idempotent(small_data, tmp_path):
    shelf_data = example_module("shelf_data")
    root, digest = small_data
    again = shelf_data.ensure_dataset(tmp_path / "data", small_params())
    assert again == digest
    for split in ("train.json", "val.json"):
        assert (root / split).read_bytes() == (tmp_path / "data" / split).read_bytes()
    assert (root / "val/000003.png").read_bytes() == (tmp_path / "data/val/000003.png").read_bytes()
    before = (root / "train/000000.png").stat().st_mtime_ns
    assert shelf_data.ensure_dataset(root, small_params()) == digest  # found, not redrawn
    assert (root / "train/000000.png").stat().st_mtime_ns == before
    other = shelf_data.ensure_dataset(tmp_path / "other", dict(small_params(), seed=1))
    assert other != digest


def test_the_annotations_are_valid_coco_with_every_class_at_several_scales(small_data):
    root, _ = small_data
    coco = json.loads((root / "train.json").read_text())
    with contextlib.redirect_stdout(io.StringIO()):
        api = COCO(str(root / "train.json"))  # pycocotools accepts it
    assert len(api.getImgIds()) == SMALL["num_train"]
    size = coco["images"][0]["width"]
    boxes = np.array([a["bbox"] for a in coco["annotations"]], np.float64)
    assert np.all(boxes[:, :2] >= 0) and np.all(boxes[:, 0] + boxes[:, 2] <= size)
    assert np.all(boxes[:, 1] + boxes[:, 3] <= size) and np.all(boxes[:, 2:] > 0)
    cats = {a["category_id"] for a in coco["annotations"]}
    assert cats == {c["id"] for c in coco["categories"]} and len(cats) >= 4
    heights = boxes[:, 3]
    assert heights.max() / heights.min() > 4  # scale variation (1-3 shelves)
    per_image = np.bincount([a["image_id"] for a in coco["annotations"]])[1:]
    assert per_image.min() >= 1 and per_image.max() >= 8
    ids = [a["id"] for a in coco["annotations"]]
    assert len(set(ids)) == len(ids)


# ---- training ---------------------------------------------------------------------------------

def test_a_few_training_steps_reduce_the_yolo_loss(small_data):
    # lazy (collection cost): paddle loads only when this runs
    import paddle

    model = example_module("model")
    train = example_module("train")
    shelf_data = example_module("shelf_data")
    root, _ = small_data
    images, coco, entries = shelf_data.load_split(root, "train")
    boxes = train.boxes_by_image(coco, entries)
    ops = train.infer_cfg(coco["categories"], model.INPUT_SIZE)["Preprocess"]
    paddle.seed(0)
    net = model.YOLOv3Small(num_classes=4)
    opt = paddle.optimizer.AdamW(learning_rate=3e-3, parameters=net.parameters())
    idx = np.arange(8)
    x, gt_box, gt_label = train.make_batch(images, boxes, idx, np.zeros(8, bool), ops,
                                           model.INPUT_SIZE)
    assert gt_label.dtype == np.int32 and gt_box.shape == (8, model.MAX_BOXES, 4)
    assert 0 < gt_box[..., 2:].max() <= 1  # normalised by the input size
    losses = []
    for _ in range(12):
        loss, parts = model.yolo_losses(net(paddle.to_tensor(x)), paddle.to_tensor(gt_box),
                                        paddle.to_tensor(gt_label), 4)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    assert len(parts) == 2 and np.isfinite(losses).all()
    assert losses[-1] < 0.5 * losses[0], losses


def test_a_flip_mirrors_the_targets(small_data):
    model = example_module("model")
    train = example_module("train")
    shelf_data = example_module("shelf_data")
    root, _ = small_data
    images, coco, entries = shelf_data.load_split(root, "train", 2)
    boxes = train.boxes_by_image(coco, entries)
    ops = train.infer_cfg(coco["categories"], model.INPUT_SIZE)["Preprocess"]
    plain = train.make_batch(images, boxes, np.arange(2), np.array([False, False]), ops, 160)
    flipped = train.make_batch(images, boxes, np.arange(2), np.array([True, False]), ops, 160)
    assert np.allclose(flipped[0][0], plain[0][0][:, :, ::-1])
    assert np.array_equal(flipped[0][1], plain[0][1])
    n = len(boxes[0])
    assert np.allclose(flipped[1][0, :n, 0], 1 - plain[1][0, :n, 0])
    assert np.allclose(flipped[1][0, :n, 1:], plain[1][0, :n, 1:])


def test_the_preprocessing_is_the_servers(small_data):
    """The example's own copy of PaddleDetection's preprocessing equals serving.ppdet's."""
    # lazy (collection cost): it pulls pillow, pysimdjson
    from serving.ppdet import apply_ops

    model = example_module("model")
    train = example_module("train")
    preprocess = example_module("preprocess")
    cfg = train.infer_cfg([{"name": n} for n in ("box", "bottle", "can", "jar")],
                          model.INPUT_SIZE)
    typed = PPDetConfig.model_validate(cfg)
    rng = np.random.default_rng(3)
    for h, w in ((160, 160), (120, 200), (333, 97)):
        im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        ours, im_shape, scale = preprocess.preprocess(im, cfg["Preprocess"])
        theirs, their_info = apply_ops(im, typed.preprocess)
        assert ours.shape == (3, 160, 160)
        assert np.array_equal(ours, theirs)
        assert np.array_equal(im_shape, their_info.im_shape)
        assert np.array_equal(scale, their_info.scale_factor)


# ---- a briefly trained export (slow) ------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory, small_data):
    """train.py for 16 steps of 16 images on 64, one process; its output dir and data dir.

    The data is the module's small set (64 training images, as `--subset 64` takes, and
    24 val images), not the generator's default 2,200 images, and 16 steps give detections
    above the export's NMS score threshold (0.01): the export, the server's answers and
    the evaluation are what these tests check, not the model's score."""
    base = tmp_path_factory.mktemp("products-yolov3")
    repo = base / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    out, (data, _digest) = base / "out", small_data
    proc = subprocess.run(
        [sys.executable, "train.py", "--output-dir", str(out), "--checkpoint-dir",
         str(base / "ckpt"), "--data-dir", str(data), "--subset", "64", "--batch-size", "16",
         "--epochs", "10", "--max-steps", "16", "--lr", "3e-3"],
        cwd=repo, env=training_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, data


@pytest.mark.slow
def test_the_export_is_paddledetections(trained):
    # lazy (collection cost): paddle loads only when this runs
    from paddle import inference

    out, _ = trained
    model_dir = out / "model"
    config = inference.Config(str(model_dir / "inference.json"),
                              str(model_dir / "inference.pdiparams"))
    predictor = inference.create_predictor(config)  # the server's defaults (oneDNN on)
    assert predictor.get_input_names() == ["image", "im_shape", "scale_factor"]
    assert len(predictor.get_output_names()) == 2
    cfg = yaml.safe_load((model_dir / "infer_cfg.yml").read_text())
    assert cfg["arch"] == "YOLO" and cfg["label_list"] == ["box", "bottle", "can", "jar"]
    assert [op["type"] for op in cfg["Preprocess"]] == ["Resize", "NormalizeImage", "Permute"]
    assert cfg["Preprocess"][0]["keep_ratio"] is False and cfg["draw_threshold"] == 0.5
    record = yaml.safe_load((model_dir / "model.yaml").read_text())
    assert record["name"] == "products-yolov3" and record["version"].startswith("v-")
    dets = json.loads((out / "bbox.json").read_text())
    assert dets and {"image_id", "category_id", "bbox", "score"} <= set(dets[0])
    assert {d["category_id"] for d in dets} <= {1, 2, 3, 4}


@pytest.mark.slow
def test_the_pipelines_map_equals_pycocotools_on_the_examples_files(trained, tmp_path):
    out, data = trained
    val = data / "val.json"
    gt = json.loads(val.read_text())
    rng = random.Random(5)
    jittered = [  # a non-trivial score: ground truth moved, some dropped, some wrong class
        {"image_id": a["image_id"], "score": rng.random(),
         "category_id": a["category_id"] if rng.random() < 0.8 else rng.randint(1, 4),
         "bbox": [v + rng.uniform(-3, 3) for v in a["bbox"][:2]] + a["bbox"][2:]}
        for a in gt["annotations"] if rng.random() < 0.85]
    (tmp_path / "jittered.json").write_text(json.dumps(jittered))
    for dt in (out / "bbox.json", tmp_path / "jittered.json"):
        ours = evaluate_detections(val, dt)
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(str(val))
            ev = COCOeval(coco, coco.loadRes(str(dt)), "bbox")
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        assert ours["map"] == pytest.approx(float(ev.stats[0]), abs=1e-6)
        assert ours["map50"] == pytest.approx(float(ev.stats[1]), abs=1e-6)
    assert 0.3 < ours["map50"] < 0.95


@pytest.mark.slow
def test_mlops_serve_answers_encoded_images_as_the_export_does(trained, tmp_path):
    # lazy (collection cost): paddle loads only when this runs
    from paddle import inference

    out, data = trained
    model_dir = out / "model"
    preprocess = example_module("preprocess")
    cfg = yaml.safe_load((model_dir / "infer_cfg.yml").read_text())
    files = sorted((data / "val").glob("*.png"))[:3]
    rgb = [cv2.cvtColor(cv2.imread(str(f)), cv2.COLOR_BGR2RGB) for f in files]
    big = cv2.resize(rgb[0], (240, 200))  # served images need not be at the input size
    sent = [*rgb, big]
    encoded = [cv2.imencode(".png", cv2.cvtColor(im, cv2.COLOR_RGB2BGR))[1].tobytes()
               for im in sent]
    predictor = inference.create_predictor(
        inference.Config(str(model_dir / "inference.json"),
                         str(model_dir / "inference.pdiparams")))
    server = start_server(model_dir, "--threads", "1", log_dir=tmp_path)
    try:
        for i, (im, body) in enumerate(zip(sent, encoded)):
            payload = orjson.dumps({"inputs": [{"name": "image_bytes", "datatype": "BYTES",
                                                "shape": [1],
                                                "data": [base64.b64encode(body).decode()]}]})
            response = requests.post(
                f"{server.url}/v2/models/{server.model_name}/infer", data=payload, timeout=60)
            assert response.status_code == 200, response.text
            outputs = {o["name"]: o for o in response.json()["outputs"]}
            bbox = np.asarray(outputs["bbox"]["data"], np.float32).reshape(
                outputs["bbox"]["shape"])
            feeds = preprocess.create_inputs([im], cfg["Preprocess"])
            for name in predictor.get_input_names():
                handle = predictor.get_input_handle(name)
                handle.reshape(list(feeds[name].shape))
                handle.copy_from_cpu(feeds[name])
            predictor.run()
            names = predictor.get_output_names()
            expected = predictor.get_output_handle(names[0]).copy_to_cpu()
            expected_num = predictor.get_output_handle(names[1]).copy_to_cpu()
            assert outputs["bbox_num"]["data"] == expected_num.tolist()
            assert bbox.shape == expected.shape and len(expected) > 0
            assert np.abs(bbox - expected).max() < 1e-3
            h, w = im.shape[:2]
            assert np.all(bbox[:, [2, 4]] <= w) and np.all(bbox[:, [3, 5]] <= h)
            if i == len(sent) - 1:  # boxes in the big image's own pixels
                assert bbox[:, [2, 4]].max() > 160
    finally:
        stop_server(server)


def test_drills_are_written_in_the_shape_the_server_accepts():
    """--drill-* become infer_cfg.yml's `fault:` (PPDetConfig takes it) and --drill-skew
    swaps NormalizeImage's mean and std, or turns its is_scale off, in the served file only."""

    model = example_module("model")
    train = example_module("train")
    cfg = train.infer_cfg([{"name": n} for n in ("box", "bottle", "can", "jar")],
                          model.INPUT_SIZE)
    fault = train.drill_fault(250, 0.3, 503)
    served = PPDetConfig.model_validate(dict(cfg, fault=fault))
    assert served.fault is not None and served.fault.error_status == 503
    assert train.drill_fault() is None
    skewed = train.skewed_cfg(cfg, "mean-std")
    norm = next(op for op in skewed["Preprocess"] if op["type"] == "NormalizeImage")
    assert norm["mean"] == train.STD and norm["std"] == train.MEAN
    unscaled = train.skewed_cfg(cfg, "no-scale")
    served = PPDetConfig.model_validate(unscaled)
    norm = next(op for op in unscaled["Preprocess"] if op["type"] == "NormalizeImage")
    assert norm["is_scale"] is False and norm["mean"] == train.MEAN
    assert {k: v for k, v in unscaled.items() if k != "Preprocess"} == \
        {k: v for k, v in cfg.items() if k != "Preprocess"}
    assert train.skewed_cfg(cfg, "none") is cfg
    assert next(op for op in cfg["Preprocess"] if op["type"] == "NormalizeImage")["mean"] \
        == train.MEAN  # the clean config is untouched
    with pytest.raises(SystemExit):
        train.parse_args(["--output-dir", "o", "--checkpoint-dir", "c", "--drill-skew", "bgr"])
