"""The model artifact's one home (`contracts.artifact`): names, record, digest.

Pure file checks on small directories written here; the trained example's
export is checked against the same contract in tests/examples/test_training_export.py.
"""

import hashlib

import pytest

from contracts.artifact import (
    ArtifactError,
    ModelRecord,
    WeightsMismatch,
    missing_files,
    program_file,
    read_record,
    read_record_data,
    write_record_data,
)
from contracts.errors import ExitCode
from promotion.gitrepo import propose
from workflows.steps import publish

WEIGHTS = b"weights"


def _artifact(tmp_path, **record):
    d = tmp_path / "model"
    d.mkdir()
    (d / "inference.json").write_text("{}")
    (d / "inference.pdiparams").write_bytes(WEIGHTS)
    (d / "infer_cfg.yml").write_text("input: {}\n")
    write_record_data(d, {"name": "shapes", "version": "v1",
                          "weights_sha256": hashlib.sha256(WEIGHTS).hexdigest(), **record})
    return d


def test_a_complete_artifact_reads_and_counts_stay_integers(tmp_path):
    d = _artifact(tmp_path, metrics={"map50": 0.91, "detections": 8000}, epochs=12)
    assert missing_files(d) == [] and program_file(d) == d / "inference.json"
    record = read_record(d)
    assert record.metrics == {"map50": 0.91, "detections": 8000}
    assert isinstance(record.metrics["detections"], int)
    assert record.as_dict()["epochs"] == 12  # lineage and hyperparameters are carried along
    data = read_record_data(d)
    data["metrics"]["images"] = 200
    write_record_data(d, data)
    assert read_record(d).metrics["images"] == 200
    assert [p.name for p in d.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_missing_files_name_each_one_and_the_program_alternatives(tmp_path):
    d = _artifact(tmp_path)
    (d / "inference.json").unlink()
    (d / "infer_cfg.yml").unlink()
    assert missing_files(d) == ["infer_cfg.yml", "inference.json (or inference.pdmodel)"]
    (d / "inference.pdmodel").write_bytes(b"legacy")
    assert program_file(d) == d / "inference.pdmodel"


def test_a_bad_record_names_the_file_and_the_field(tmp_path):
    d = _artifact(tmp_path, weights_sha256="abc")
    with pytest.raises(ArtifactError, match=r"model\.yaml: weights_sha256: String should match"):
        read_record(d)
    (d / "model.yaml").write_text("- a list\n")
    with pytest.raises(ArtifactError, match="expected a mapping"):
        read_record_data(d)
    (d / "model.yaml").unlink()
    assert read_record_data(d, required=False) == {}
    with pytest.raises(ArtifactError, match="model.yaml: not found"):
        read_record(d)


def test_weights_other_than_the_evaluated_ones_are_a_digest_mismatch(tmp_path):
    d = _artifact(tmp_path)
    (d / "inference.pdiparams").write_bytes(b"other weights")
    with pytest.raises(WeightsMismatch, match="not the evaluated weights_sha256") as raised:
        read_record(d)
    assert raised.value.exit_code == ExitCode.DIGEST_MISMATCH
    assert read_record(d, check_weights=False).version == "v1"


def test_the_record_model_is_the_one_every_room_imports():
    """One home: propose, publish and the controller fixtures use this class, not a twin."""

    assert propose.ModelRecord is ModelRecord and publish.ModelRecord is ModelRecord
