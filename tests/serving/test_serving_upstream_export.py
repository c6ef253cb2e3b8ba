"""A PaddleDetection export served as `tools/export_model.py` writes it.

Upstream (PaddlePaddle/PaddleDetection, develop as of 2024-10): `ppdet/engine/trainer.py`
`Trainer.export` saves `paddle.jit.save(static_model, os.path.join(save_dir, 'model'))`,
so Paddle 3 writes `model.json` (PIR; Paddle 2 `model.pdmodel`) and `model.pdiparams`
beside `infer_cfg.yml`, and no `model.yaml`; `deploy/python/infer.py` `load_predictor`
looks for `model.pdiparams` first, then `inference.*`. `mlops serve DIR` used to exit
"no inference.json or inference.pdmodel" and, without a model.yaml, demand
`--model-version`.
"""

from __future__ import annotations

import base64
import io
import json
import pathlib

import pytest
import requests
from PIL import Image

from contracts.artifact import sha256_file
from serving.errors import ModelDirError
from serving.modeldir import export_files


def _as_upstream(model_dir: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """The same export under upstream's names, without our model.yaml."""
    target.mkdir()
    (target / "model.json").write_bytes((model_dir / "inference.json").read_bytes())
    (target / "model.pdiparams").write_bytes((model_dir / "inference.pdiparams").read_bytes())
    (target / "infer_cfg.yml").write_text((model_dir / "infer_cfg.yml").read_text())
    return target


def test_an_upstream_export_is_served_under_a_version_named_by_its_weights(
        model_server, ppdet_model_dir, tmp_path):
    upstream = _as_upstream(ppdet_model_dir, tmp_path / "yolov3_darknet53_270e_coco")
    server = model_server(upstream)
    digest = sha256_file(upstream / "model.pdiparams")
    assert server.model_name == "yolov3_darknet53_270e_coco"
    assert server.model_version == f"sha256-{digest[:12]}"
    assert "no model.yaml version" in server.log() and "weights' digest" in server.log()
    image = io.BytesIO()
    Image.effect_noise((160, 120), 60).convert("RGB").save(image, "PNG")
    body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1],
                        "data": [base64.b64encode(image.getvalue()).decode()]}]}
    r = requests.post(f"{server.url}/v2/models/{server.model_name}/infer",
                      data=json.dumps(body), timeout=60)
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["bbox", "bbox_num", "labels"]


def test_our_names_come_first_then_upstreams(tmp_path):
    for name in ("model.pdmodel", "model.pdiparams"):
        (tmp_path / name).write_bytes(b"x")
    assert export_files(tmp_path) == (tmp_path / "model.pdmodel", tmp_path / "model.pdiparams")
    (tmp_path / "model.json").write_bytes(b"x")
    assert export_files(tmp_path)[0] == tmp_path / "model.json"  # Paddle 3's PIR first
    for name in ("inference.json", "inference.pdiparams"):
        (tmp_path / name).write_bytes(b"x")
    assert export_files(tmp_path) == (tmp_path / "inference.json",
                                      tmp_path / "inference.pdiparams")


def test_a_missing_export_names_every_file_looked_for(tmp_path):
    with pytest.raises(ModelDirError, match="inference.json, inference.pdmodel, model.json "
                                            "or model.pdmodel"):
        export_files(tmp_path)
    (tmp_path / "model.json").write_bytes(b"x")
    with pytest.raises(ModelDirError, match=r"missing model.pdiparams \(beside model.json\)"):
        export_files(tmp_path)
