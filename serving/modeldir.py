"""Read a model directory: the Paddle export, `infer_cfg.yml` and `model.yaml`.

The directory is the training step's artifact contract (docs/design.md §4, "Model
artifact"; names in `contracts.artifact`); PaddleDetection's own export names are read
too (`UPSTREAM_EXPORTS`). `infer_cfg.yml` is validated once into a typed `InferConfig`,
errors naming the file and field; tensor shapes come from the program itself. An
optional `fault:` section declares a drill. Why: docs/inside-serving.md.
"""

import dataclasses
import json
import pathlib
from typing import Any, Literal

import pydantic
import yaml

from contracts.artifact import (
    INFER_CFG_FILE,
    PARAMS_FILE,
    PROGRAM_FILES,
    ArtifactError,
    program_file,
    read_record_data,
    sha256_file,
)
from serving.errors import ModelDirError
from serving.fault import FaultConfig
from serving.options import ServingOptions
from serving.ppdet_config import PPDetConfig, is_ppdet_config


class InputConfig(pydantic.BaseModel):
    """How an encoded image becomes the model's input tensor."""

    model_config = pydantic.ConfigDict(extra="ignore")

    name: str | None = None  # model input fed with the image; default: the first input
    size: tuple[int, int] = (128, 128)  # height, width
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    scale: float = 1.0 / 255.0  # applied to 0..255 pixels before mean/std; "1/255" accepted
    channel_order: Literal["RGB", "BGR"] = "RGB"

    @pydantic.field_validator("scale", mode="before")
    @classmethod
    def _fraction(cls, value: Any) -> Any:
        if isinstance(value, str) and "/" in value:
            num, _, den = value.partition("/")
            try:
                return float(num) / float(den)
            except (ValueError, ZeroDivisionError):
                raise ValueError(f"not a number or a fraction: {value!r}") from None
        return value


class OutputRole(pydantic.BaseModel):
    """Which exported tensor plays which decoder role (heatmap, size, offset)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    name: str  # the role
    tensor: str | None = None  # the predictor's output name (e.g. fetch_name_0)


class Label(pydantic.BaseModel):
    """One class: its index in the heatmap, its (COCO category) id and name."""

    model_config = pydantic.ConfigDict(extra="ignore")

    index: int | None = None
    id: int
    name: str


class DecodeConfig(pydantic.BaseModel):
    """A CenterNet-family decoder: peaks of a per-class heatmap, size and offset maps."""

    model_config = pydantic.ConfigDict(extra="ignore")

    type: Literal["centernet"] = "centernet"
    stride: float = 4
    top_k: int = pydantic.Field(default=100, ge=1)
    score_threshold: float = 0.05
    nms_kernel: int = pydantic.Field(default=3, ge=1)  # max-pool window that stands in for NMS
    size_unit: Literal["cells", "pixels"] = "cells"  # size head in grid cells or input pixels
    heatmap_activation: Literal["none", "sigmoid"] = "none"  # "none": already in (0, 1)


class InferConfig(pydantic.BaseModel):
    """The typed `infer_cfg.yml` (the format `examples/shapes-detector/train.py` writes)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    input: InputConfig = InputConfig()
    outputs: list[OutputRole] = []
    labels: list[Label] = []
    decode: DecodeConfig = DecodeConfig()
    draw_threshold: float = pydantic.Field(default=0.5, ge=0, le=1)
    """PaddleDetection's name: detections scoring at least this are the ones a user
    draws; the quality metrics count those (`serving.quality`)."""
    fault: FaultConfig | None = None  # absent: no drill (the normal case)
    serving: ServingOptions | None = None  # workers, batching (`serving.options`)

    @pydantic.field_validator("labels", mode="before")
    @classmethod
    def _plain_names(cls, value: Any) -> Any:
        """A bare list of names means ids 0, 1, 2, ..."""
        if isinstance(value, list):
            return [
                {"index": i, "id": i, "name": v} if isinstance(v, str) else v
                for i, v in enumerate(value)
            ]
        return value

    def category_ids(self) -> list[int]:
        """Category id of each heatmap channel, in channel order."""
        ordered = sorted(
            enumerate(self.labels),
            key=lambda item: item[1].index if item[1].index is not None else item[0],
        )
        return [label.id for _, label in ordered]

    def label_names(self) -> dict[int, str]:
        """Category id -> class name."""
        return {label.id: label.name for label in self.labels}

    def class_names(self) -> list[str]:
        """The model's class names, each once, in `labels:` order: the bounded label
        set of the quality metrics (`serving.quality`)."""
        return list(dict.fromkeys(label.name for label in self.labels))

    def labels_doc(self) -> list[dict[str, Any]]:
        """`labels:` as the metadata document lists them."""
        return [label.model_dump() for label in self.labels]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A model input or output as OIP metadata describes it."""

    name: str
    datatype: str  # OIP v2 datatype, e.g. "FP32"
    shape: tuple[int, ...]  # -1 for a dynamic dimension


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """Everything the server needs from a model directory, checked."""

    path: pathlib.Path
    program_file: pathlib.Path
    params_file: pathlib.Path
    infer_cfg: InferConfig | PPDetConfig  # the example's format or PaddleDetection's
    record: dict[str, Any]  # model.yaml as written by training (free-form lineage)
    program_inputs: dict[str, TensorSpec]  # from the program; may be empty for legacy files
    program_outputs: list[TensorSpec]

    @property
    def weights_sha256(self) -> str:
        """The digest of the weights file as it is now (never model.yaml's claim)."""
        return sha256_file(self.params_file)


#: (program, weights) as PaddleDetection's `tools/export_model.py` names them: its
#: `Trainer.export` (ppdet/engine/trainer.py) calls `paddle.jit.save(..., save_dir/'model')`,
#: and its deploy/python/infer.py `load_predictor` looks for `model.pdiparams` first.
UPSTREAM_EXPORTS = (("model.json", "model.pdiparams"), ("model.pdmodel", "model.pdiparams"))


def export_files(root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(program, weights) of a model directory: ours (`contracts.artifact`), else
    PaddleDetection's own names; `ModelDirError` naming every name looked for."""
    program = program_file(root)
    if program is not None:
        params = root / PARAMS_FILE
        if not params.is_file():
            raise ModelDirError(f"{root}: missing {PARAMS_FILE} (beside {program.name})")
        return program, params
    for program_name, params_name in UPSTREAM_EXPORTS:
        if (root / program_name).is_file():
            if not (root / params_name).is_file():
                raise ModelDirError(f"{root}: missing {params_name} (beside {program_name})")
            return root / program_name, root / params_name
    names = [*PROGRAM_FILES, *dict.fromkeys(name for name, _ in UPSTREAM_EXPORTS)]
    raise ModelDirError(f"{root}: no {', '.join(names[:-1])} or {names[-1]} "
                        "(a paddle.jit.save export, or PaddleDetection's export_model.py)")


def load_model_dir(path: str | pathlib.Path) -> ModelDir:
    """Check and read a model directory; raises `ModelDirError` naming what is wrong."""
    root = pathlib.Path(path)
    if not root.is_dir():
        raise ModelDirError(f"model directory {root} does not exist")
    program, params = export_files(root)
    infer_cfg = _load_infer_cfg(root / INFER_CFG_FILE)
    try:
        record = read_record_data(root, required=False)
    except ArtifactError as exc:
        raise ModelDirError(str(exc)) from None
    inputs, outputs = program_signature(program)
    return ModelDir(root, program, params, infer_cfg, record, inputs, outputs)


def _load_yaml(path: pathlib.Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise ModelDirError(f"{path} is missing")
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ModelDirError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelDirError(f"{path}: expected a mapping at the top level")
    return data


def _load_infer_cfg(path: pathlib.Path) -> InferConfig | PPDetConfig:
    data = _load_yaml(path, required=True)
    kind: type[InferConfig] | type[PPDetConfig] = (
        PPDetConfig if is_ppdet_config(data) else InferConfig
    )
    try:
        return kind.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ModelDirError(f"{path}: {problems}") from exc


_PIR_DTYPES = {
    "float32": "FP32", "float64": "FP64", "float16": "FP16", "bfloat16": "BF16",
    "int64": "INT64", "int32": "INT32", "int16": "INT16", "int8": "INT8",
    "uint8": "UINT8", "bool": "BOOL",
}
_PIR_TYPE_TAGS = {
    "0.t_f32": "FP32", "0.t_f64": "FP64", "0.t_f16": "FP16", "0.t_bf16": "BF16",
    "0.t_i64": "INT64", "0.t_i32": "INT32", "0.t_i16": "INT16", "0.t_i8": "INT8",
    "0.t_ui8": "UINT8", "0.t_bool": "BOOL",
}


def program_signature(program: pathlib.Path) -> tuple[dict[str, TensorSpec], list[TensorSpec]]:
    """Input and output specs from a PIR JSON program; empty for other formats.

    The PIR JSON stores each feed as a `data` op (attributes `name`, `shape`,
    `dtype`) and each fetch as a `fetch` op whose output type carries dtype and
    shape. Anything unexpected yields empty specs and the caller falls back to
    shapes observed during warm-up.
    """
    if program.suffix != ".json":
        return {}, []
    try:
        doc = json.loads(program.read_text())
        ops = doc["program"]["regions"][0]["blocks"][0]["ops"]
        inputs: dict[str, TensorSpec] = {}
        outputs: list[tuple[int, TensorSpec]] = []
        for op in ops:
            kind = op.get("#", "")
            if kind.endswith(".data"):
                attrs = {a["N"]: a["AT"]["D"] for a in op.get("A", [])}
                name = str(attrs["name"])
                dtype = _PIR_DTYPES.get(str(attrs.get("dtype")), "FP32")
                inputs[name] = TensorSpec(name, dtype, tuple(int(d) for d in attrs["shape"]))
            elif kind.endswith(".fetch"):
                attrs = {a["N"]: a["AT"]["D"] for a in op.get("A", [])}
                dense = op["O"][0]["TT"]["D"] if isinstance(op["O"], list) else op["O"]["TT"]["D"]
                dtype = _PIR_TYPE_TAGS.get(dense[0].get("#", ""), "FP32")
                spec = TensorSpec(str(attrs["name"]), dtype, tuple(int(d) for d in dense[1]))
                outputs.append((int(attrs.get("col", len(outputs))), spec))
        return inputs, [spec for _, spec in sorted(outputs, key=lambda item: item[0])]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return {}, []
