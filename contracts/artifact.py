"""The model artifact: one trained model's directory, named, read and checked here.

    inference.json | inference.pdmodel   the program (`paddle.jit.save`: PIR or legacy)
    inference.pdiparams                  the weights
    infer_cfg.yml                        preprocessing, labels, serving settings
    model.yaml                           name, version, weights_sha256, metrics, lineage
    probe/                               optional: a few real input images (PNG/JPEG, at
                                         most 32) the canary's paired answers check
                                         sends to stable and canary alike

Training writes it, the evaluate step adds `metrics` to `model.yaml`, publish
copies it onto the models volume, propose reads its record, serving loads it.
Every room reads these names and this record through this module, so a field
or a file is renamed in one place, and counts (detections, images) stay
integers from the evaluation to the PR.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cogs.files import atomic_write_text
from contracts.errors import ExitCode, MlopsError

__all__ = [
    "INFER_CFG_FILE",
    "LOCK_FILE",
    "PARAMS_FILE",
    "PROBE_DIR",
    "PROBE_MAX_BYTES",
    "PROBE_MAX_IMAGES",
    "PROGRAM_FILES",
    "RECORD_FILE",
    "ArtifactError",
    "ModelRecord",
    "WeightsMismatch",
    "missing_files",
    "program_file",
    "read_record",
    "read_record_data",
    "sha256_file",
    "verify_weights",
    "write_record_data",
]

PROGRAM_FILES = ("inference.json", "inference.pdmodel")  # Paddle 3 PIR first, then legacy
PARAMS_FILE = "inference.pdiparams"
INFER_CFG_FILE = "infer_cfg.yml"
RECORD_FILE = "model.yaml"
#: The data pins a version was trained on, beside its record (`workflows.steps.data_lineage`
#: writes it; the PR's data section diffs it against production's).
LOCK_FILE = "datalock.json"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
#: The probe set (`promotion/decision/answers.py`): images of the validation set, shipped with the
#: version so the controller (which has no models volume in a cluster) can ask its server
#: for them. One inference request carries them all (`serving.protocol.MAX_IMAGES`).
PROBE_DIR = "probe"
PROBE_MAX_IMAGES = 32
PROBE_MAX_BYTES = 4 << 20


class ArtifactError(MlopsError):
    """A model directory or its `model.yaml` is not what training should have written."""

    exit_code = ExitCode.BAD_INPUT


class WeightsMismatch(ArtifactError):
    """The weights on disk are not the ones `model.yaml` says were evaluated."""

    exit_code = ExitCode.DIGEST_MISMATCH


class ModelRecord(BaseModel):
    """`model.yaml`: the fields every room relies on; the rest (hyperparameters,
    paddle_version, ...) is carried along as written."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    weights_sha256: str = Field(pattern=SHA256_PATTERN)
    training_commit: str = ""
    workflow_id: str = ""
    dataset_digest: str = ""
    metrics: dict[str, int | float] = Field(default_factory=dict)  # counts stay integers

    def as_dict(self) -> dict[str, Any]:
        """Every field, including the extra ones."""
        return self.model_dump()


def sha256_file(path: pathlib.Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with pathlib.Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def program_file(model_dir: pathlib.Path) -> pathlib.Path | None:
    """The exported program, PIR (`inference.json`) before legacy; None if neither."""
    for name in PROGRAM_FILES:
        if (pathlib.Path(model_dir) / name).is_file():
            return pathlib.Path(model_dir) / name
    return None


def missing_files(model_dir: pathlib.Path) -> list[str]:
    """What a complete artifact has and `model_dir` lacks (empty: complete)."""
    root = pathlib.Path(model_dir)
    missing = [f for f in (PARAMS_FILE, INFER_CFG_FILE, RECORD_FILE) if not (root / f).is_file()]
    if program_file(root) is None:
        missing.append(" (or ".join(PROGRAM_FILES) + ")")
    return missing


def read_record_data(model_dir: pathlib.Path, *, required: bool = True) -> dict[str, Any]:
    """`model.yaml` as the mapping training wrote (`{}` when absent and not required)."""
    path = pathlib.Path(model_dir) / RECORD_FILE
    if not path.is_file():
        if not required:
            return {}
        raise ArtifactError(f"{path}: not found; a trained model directory holds "
                            f"{RECORD_FILE}, {PARAMS_FILE}, {INFER_CFG_FILE} and the program")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ArtifactError(f"{path}: not valid YAML: {exc}") from None
    if data is None and not required:
        return {}
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: expected a mapping")
    return data


def write_record_data(model_dir: pathlib.Path, data: dict[str, Any]) -> None:
    """Replace `model.yaml` atomically (a crash leaves the old or the new, never half)."""
    path = pathlib.Path(model_dir) / RECORD_FILE
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))


def verify_weights(model_dir: pathlib.Path, record: ModelRecord) -> None:
    """Refuse weights other than the evaluated ones (`WeightsMismatch`)."""
    params = pathlib.Path(model_dir) / PARAMS_FILE
    if not params.is_file():
        raise ArtifactError(f"{params}: not found; cannot check the evaluated weights")
    actual = sha256_file(params)
    if actual != record.weights_sha256:
        raise WeightsMismatch(
            f"{params}: sha256 {actual[:12]}... is not the evaluated weights_sha256 "
            f"{record.weights_sha256[:12]}... in {params.parent / RECORD_FILE}; "
            "re-run evaluation on these weights before proposing them")


def read_record(model_dir: pathlib.Path, *, check_weights: bool = True) -> ModelRecord:
    """`model.yaml`, validated (every problem named with its field), and by default the
    weights' digest checked against it."""
    data = read_record_data(model_dir)
    try:
        record = ModelRecord.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        raise ArtifactError(f"{pathlib.Path(model_dir) / RECORD_FILE}: {problems}") from None
    if check_weights:
        verify_weights(model_dir, record)
    return record
