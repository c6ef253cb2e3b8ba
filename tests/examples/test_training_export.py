"""The example's export: Paddle Inference reproduces the trained dygraph model, and the
artifact's metadata (model.yaml, infer_cfg.yml, bbox.json) is what the pipeline expects."""

import hashlib
import json

import numpy as np
import paddle
import yaml
from faster_coco_eval import COCO, COCOeval_faster
from paddle import inference

from tests.fixtures.training import example_module

postprocess = example_module("postprocess")
model_lib = example_module("model")
shapes_data = example_module("shapes_data")


def _predict_exported(model_dir, x):
    config = inference.Config(str(model_dir / "inference.json"),
                              str(model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(x.shape))
    handle.copy_from_cpu(x)
    predictor.run()
    return {n: predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()}


def _dygraph_from_last_checkpoint(trained_model, x):
    ckpt = sorted(trained_model.checkpoint_dir.glob("ckpt-*.pdckpt"))[-1]
    net = model_lib.ShapesNet(num_classes=3)
    net.set_state_dict(paddle.load(str(ckpt))["model"])
    net.eval()
    with paddle.no_grad():
        outs = net(paddle.to_tensor(x))
    return dict(zip(model_lib.OUTPUT_NAMES, (o.numpy() for o in outs)))


def test_exported_model_matches_dygraph(trained_model):
    cfg = yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())
    images, _, _ = shapes_data.load_split(trained_model.data_dir, "val", limit=8)
    x = postprocess.preprocess(images, cfg)
    exported = _predict_exported(trained_model.model_dir, x)
    assert sorted(exported) == sorted(o["tensor"] for o in cfg["outputs"])
    dygraph = _dygraph_from_last_checkpoint(trained_model, x)
    for spec in cfg["outputs"]:
        np.testing.assert_allclose(exported[spec["tensor"]], dygraph[spec["name"]],
                                   atol=1e-4, rtol=1e-4, err_msg=spec["name"])
        assert list(exported[spec["tensor"]].shape[1:]) == spec["shape"][1:]
    from_export = postprocess.decode(exported, cfg)
    from_dygraph = postprocess.decode(dygraph, cfg)
    assert sum(map(len, from_export)) > 0
    for a, b in zip(from_export, from_dygraph):
        assert [d["category_id"] for d in a] == [d["category_id"] for d in b]
        np.testing.assert_allclose([d["bbox"] for d in a], [d["bbox"] for d in b], atol=0.05)
        np.testing.assert_allclose([d["score"] for d in a], [d["score"] for d in b], atol=1e-3)


def test_bbox_json_is_the_decoded_export(trained_model):
    cfg = yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())
    images, _, entries = shapes_data.load_split(trained_model.data_dir, "val", limit=4)
    expected = postprocess.decode(_predict_exported(trained_model.model_dir,
                                                    postprocess.preprocess(images, cfg)), cfg)
    written = json.loads(trained_model.bbox_json.read_text())
    for entry, dets in zip(entries, expected):
        mine = [d for d in written if d["image_id"] == entry["id"]]
        assert [d["category_id"] for d in mine] == [d["category_id"] for d in dets]
        np.testing.assert_allclose([d["bbox"] for d in mine], [d["bbox"] for d in dets],
                                   atol=0.05)


def test_small_run_detects_shapes(trained_model):
    """Not the full run's quality, but clearly better than chance (COCOeval on bbox.json)."""
    gt = COCO(str(trained_model.val_json))
    dt = gt.loadRes(str(trained_model.bbox_json))
    ev = COCOeval_faster(gt, dt, "bbox", print_function=lambda *a: None)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    assert ev.stats[1] > 0.1, f"mAP@0.5 {ev.stats[1]:.3f}"


def test_model_yaml_records_lineage(trained_model):
    meta = yaml.safe_load((trained_model.model_dir / "model.yaml").read_text())
    weights = hashlib.sha256((trained_model.model_dir / "inference.pdiparams").read_bytes())
    assert meta["weights_sha256"] == weights.hexdigest()
    assert meta["version"] == "v-" + weights.hexdigest()[:12]
    assert meta["name"] == "shapes-detector"
    assert meta["training_commit"] == "0" * 40
    assert meta["workflow_id"] == "test-fixture"
    marker = json.loads((trained_model.data_dir / "DATASET.json").read_text())
    assert meta["dataset_digest"] == marker["digest"]
    assert meta["paddle_version"] == paddle.__version__
    assert meta["hyperparameters"]["subset"] == 640


def test_infer_cfg_describes_labels_and_io(trained_model):
    cfg = yaml.safe_load((trained_model.model_dir / "infer_cfg.yml").read_text())
    assert cfg["input"]["size"] == [128, 128] and cfg["input"]["channel_order"] == "RGB"
    assert [(label["id"], label["name"]) for label in cfg["labels"]] == [
        (1, "circle"), (2, "square"), (3, "triangle")]
    assert [o["name"] for o in cfg["outputs"]] == ["heatmap", "size", "offset"]
    assert cfg["decode"]["stride"] == 8


def test_decode_places_a_box_where_the_heads_say():
    """decode() alone, on hand-made heads: one peak -> one box in input pixels."""
    cfg = {"input": {"size": [128, 128]}, "decode": {"stride": 4, "top_k": 5,
                                                     "score_threshold": 0.1},
           "labels": [{"id": 1}, {"id": 2}, {"id": 3}], "outputs": []}
    heat = np.zeros((1, 3, 32, 32), np.float32)
    heat[0, 2, 10, 5] = 0.9          # triangle, grid x=5, y=10
    heat[0, 2, 10, 6] = 0.5          # suppressed neighbour (not a 3x3 peak)
    size = np.zeros((1, 2, 32, 32), np.float32)
    size[0, :, 10, 5] = (4.0, 2.0)   # 16 x 8 px
    offset = np.zeros((1, 2, 32, 32), np.float32)
    offset[0, :, 10, 5] = (0.5, 0.25)
    [dets] = postprocess.decode({"heatmap": heat, "size": size, "offset": offset}, cfg)
    assert dets == [{"category_id": 3, "score": 0.9, "bbox": [14.0, 37.0, 16.0, 8.0]}]
    [scaled] = postprocess.decode({"heatmap": heat, "size": size, "offset": offset}, cfg,
                                  image_sizes=[(256, 64)])
    assert scaled[0]["bbox"] == [7.0, 74.0, 8.0, 16.0]
