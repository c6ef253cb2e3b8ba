"""Production's served detections come from the cache when nothing that decides them changed.

Covers workflows/served_cache.py and its use in workflows/paired_evaluation.py: the
comparison's files (detections, paired.json, pictures) are byte-identical with
and without the cache, cold and warm; a warm run opens no predictor for an
export it has seen on those images; the key follows the export's served files,
not its record (`model.yaml`, `datalock.json`) nor a valid fault drill, and every
image's bytes; past its bound the least recently used entries go. The export is the
session's trained example (tests/fixtures/training.py), served for real on 16
of its val images.
"""

import json
import os
import pathlib
import shutil

import pytest
import yaml

from workflows.evaluation import EvaluationError
from workflows.paired_evaluation import PAIRED_FILE, EvalSet, compare_with_production
from workflows.served_cache import CachedExport, ServedCache, export_digest, images_digest

IMAGES = 16


@pytest.fixture(scope="module")
def small_val(trained_model, tmp_path_factory) -> EvalSet:
    """The first 16 val images and their boxes, in a folder of their own."""
    root = tmp_path_factory.mktemp("small-val")
    truth = json.loads(trained_model.val_json.read_text())
    images = truth["images"][:IMAGES]
    ids = {i["id"] for i in images}
    for image in images:
        (root / image["file_name"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(trained_model.val_json.parent / image["file_name"], root / image["file_name"])
    small = {**truth, "images": images,
             "annotations": [a for a in truth["annotations"] if a["image_id"] in ids]}
    (root / "val.json").write_text(json.dumps(small))
    return EvalSet("val", root / "val.json", root)


@pytest.fixture(scope="module")
def skewed(trained_model, tmp_path_factory) -> pathlib.Path:
    """The export with `train.py --drill-skew no-scale`'s serving mistake: another candidate."""
    model = tmp_path_factory.mktemp("skewed") / "model"
    shutil.copytree(trained_model.model_dir, model)
    doc = yaml.safe_load((model / "infer_cfg.yml").read_text())
    doc["input"]["scale"] = 1.0
    (model / "infer_cfg.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return model


def _files(out: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.iterdir())}


def test_the_comparison_is_byte_identical_with_the_cache_cold_and_warm(
        trained_model, small_val, skewed, tmp_path):
    runs = {}
    for name, cache in (("uncached", None), ("cold", ServedCache(tmp_path / "cache")),
                        ("warm", ServedCache(tmp_path / "cache"))):
        out = tmp_path / name
        out.mkdir()
        compare_with_production([small_val], skewed, trained_model.model_dir, "v1", out, cache)
        runs[name] = _files(out)
    assert PAIRED_FILE in runs["uncached"] and "pr-val.png" in runs["uncached"]
    assert runs["cold"] == runs["uncached"]
    assert runs["warm"] == runs["uncached"]
    # two exports on one set: two entries
    assert len(list((tmp_path / "cache" / "served").glob("*.json"))) == 2


def test_a_warm_entry_opens_no_predictor(trained_model, small_val, tmp_path):
    truth = json.loads(small_val.annotations.read_text())
    cache = ServedCache(tmp_path)
    with CachedExport(trained_model.model_dir, "production", cache) as first:
        text = first.detections_json(truth, small_val.images)
        assert first._export is not None  # computed: the predictor ran
    assert json.loads(text) and json.dumps(json.loads(text)) == text
    with CachedExport(trained_model.model_dir, "production", cache) as again:
        assert again.detections_json(truth, small_val.images) == text
        assert again._export is None  # read back: no predictor made


def test_the_key_follows_served_files_and_image_bytes_not_the_record(
        trained_model, small_val, skewed, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(trained_model.model_dir, model)
    before = export_digest(model)
    (model / "model.yaml").write_text((model / "model.yaml").read_text() + "metrics: {}\n")
    assert export_digest(model) == before  # evaluate and publish add to the record
    (model / "datalock.json").write_text("{}")
    assert export_digest(model) == before  # and evaluate puts the data's lock beside it
    assert export_digest(skewed) != before  # infer_cfg.yml decides the detections
    truth = json.loads(small_val.annotations.read_text())
    images = tmp_path / "images"
    shutil.copytree(small_val.images, images)
    same = images_digest(truth, images)
    assert same == images_digest(truth, small_val.images)
    first = images / truth["images"][0]["file_name"]
    first.write_bytes(first.read_bytes() + b"\0")
    assert images_digest(truth, images) not in (None, same)
    first.unlink()
    assert images_digest(truth, images) is None  # unreadable: no key, the run names the file



def test_a_valid_fault_drill_shares_the_exports_entry(trained_model, small_val, tmp_path):
    """A drill push (production's weights, `train.py --drill-delay-ms/--drill-error-rate`)
    declares `fault:` in infer_cfg.yml. The model server applies it to HTTP requests only
    (serving/dataplane.py; `ModelService.detect` never reads it), so the export's served
    detections are production's, computed afresh here: the key is production's. A fault
    the server refuses keeps a key of its own, so that export is run, and refused."""
    drill = tmp_path / "drill"
    shutil.copytree(trained_model.model_dir, drill)
    cfg = yaml.safe_load((drill / "infer_cfg.yml").read_text())
    fault = {"delay_ms": 250.0, "error_rate": 0.3, "error_status": 500}
    (drill / "infer_cfg.yml").write_text(yaml.safe_dump({**cfg, "fault": fault}))
    assert export_digest(drill) == export_digest(trained_model.model_dir)
    truth = json.loads(small_val.annotations.read_text())
    with (CachedExport(trained_model.model_dir, "production", None) as production,
          CachedExport(drill, "candidate", None) as candidate):
        assert (candidate.detections_json(truth, small_val.images)
                == production.detections_json(truth, small_val.images))

    (drill / "infer_cfg.yml").write_text(yaml.safe_dump({**cfg, "fault": {"delay_ms": "250"}}))
    assert export_digest(drill) != export_digest(trained_model.model_dir)
    cache = ServedCache(tmp_path / "cache")
    with CachedExport(trained_model.model_dir, "production", cache) as production:
        production.detections_json(truth, small_val.images)  # production's entry is there
    with (pytest.raises(EvaluationError, match="cannot be served: .*fault.delay_ms"),
          CachedExport(drill, "candidate", cache) as candidate):
        candidate.detections_json(truth, small_val.images)

def test_the_least_recently_used_entries_go_past_the_bound(tmp_path):
    cache = ServedCache(tmp_path, max_entries=2)
    for n, key in enumerate(("a", "b")):
        cache.put(key, f"[{n}]")
        os.utime(cache.dir / f"{key}.json", (1000 + n, 1000 + n))  # a older than b
    assert cache.get("a") == "[0]"  # a hit: a is now the most recently used
    cache.put("c", "[2]")
    assert cache.get("b") is None  # the least recently used went
    assert cache.get("a") == "[0]" and cache.get("c") == "[2]"
    (cache.dir / "c.json").write_text("[trunc")
    assert cache.get("c") is None  # unreadable: a miss, computed again
