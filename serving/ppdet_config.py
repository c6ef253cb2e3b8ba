"""PaddleDetection's `infer_cfg.yml`, typed.

The file PaddleDetection's `tools/export_model.py` writes next to an export
(`ppdet/engine/export_utils.py` `_dump_infer_config`, release/2.7) and its deploy code
reads (`deploy/python/infer.py` `PredictConfig`): `draw_threshold`, `arch`, the
`Preprocess:` ops (`Resize`, `NormalizeImage`, `Permute`, `PadStride`) and `label_list`.
`serving.modeldir` recognises it by its `Preprocess:` or `arch:` key; an op the server
does not implement (`serving.ppdet`) is refused at load, naming it; keys it has no use
for are ignored, as `PredictConfig` does. Why: docs/inside-serving.md.
"""

from typing import Annotated, Any, Literal, Union

import pydantic

from serving.fault import FaultConfig
from serving.options import ServingOptions

#: cv2's interpolation flags PaddleDetection's Resize passes through (`interp:`):
#: INTER_NEAREST, INTER_LINEAR, INTER_CUBIC, INTER_AREA, INTER_LANCZOS4.
INTERPOLATIONS = (0, 1, 2, 3, 4)


class _Op(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", allow_inf_nan=False)


class ResizeOp(_Op):
    """`Resize`: to `target_size` (height, width), or keeping the aspect ratio within it."""

    type: Literal["Resize"]
    target_size: tuple[Annotated[int, pydantic.Field(gt=0)], Annotated[int, pydantic.Field(gt=0)]]
    keep_ratio: bool = True  # upstream's default
    interp: int = 1  # cv2.INTER_LINEAR, upstream's default

    @pydantic.field_validator("target_size", mode="before")
    @classmethod
    def _square(cls, value: Any) -> Any:
        """An int means a square, as upstream's `Resize.__init__` reads it."""
        return [value, value] if isinstance(value, int) else value

    @pydantic.field_validator("interp")
    @classmethod
    def _known_interp(cls, value: int) -> int:
        if value not in INTERPOLATIONS:
            raise ValueError(f"{value} is not a cv2 interpolation flag {list(INTERPOLATIONS)}")
        return value


class NormalizeImageOp(_Op):
    """`NormalizeImage`: /255 when `is_scale`, then (x - mean) / std per channel."""

    type: Literal["NormalizeImage"]
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    is_scale: bool = True
    norm_type: Literal["mean_std", "none"] = "mean_std"

    @pydantic.field_validator("std")
    @classmethod
    def _nonzero(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s == 0 for s in value):
            raise ValueError("a std of 0 divides by zero")
        return value


class PermuteOp(_Op):
    """`Permute`: HWC -> CHW."""

    type: Literal["Permute"]


class PadStrideOp(_Op):
    """`PadStride`: zero-pad the CHW image's height and width up to a multiple of `stride`."""

    type: Literal["PadStride"]
    stride: int = pydantic.Field(default=0, ge=0)  # 0: no padding


PreprocessOp = Annotated[
    Union[ResizeOp, NormalizeImageOp, PermuteOp, PadStrideOp],
    pydantic.Field(discriminator="type"),
]
OP_TYPES = ("Resize", "NormalizeImage", "Permute", "PadStride")


class PPDetConfig(pydantic.BaseModel):
    """PaddleDetection's `infer_cfg.yml` (the keys `deploy/python/infer.py` reads)."""

    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True)

    mode: str = "paddle"
    draw_threshold: float = pydantic.Field(default=0.5, ge=0, le=1)
    metric: str = "COCO"
    use_dynamic_shape: bool = False
    arch: str
    min_subgraph_size: int = 3
    preprocess: list[PreprocessOp] = pydantic.Field(alias="Preprocess", min_length=1)
    label_list: list[str]
    fault: FaultConfig | None = None  # the drill section both formats accept
    serving: ServingOptions | None = None  # workers, batching (`serving.options`)

    @pydantic.field_validator("preprocess", mode="before")
    @classmethod
    def _known_ops(cls, value: Any) -> Any:
        """Name an op the server does not implement (pydantic's own message is a union's)."""
        if not isinstance(value, list):
            return value
        for i, op in enumerate(value):
            if not isinstance(op, dict) or "type" not in op:
                raise ValueError(f"item {i}: an op is a mapping with a `type:`")
            if op["type"] not in OP_TYPES:
                raise ValueError(
                    f"item {i}: op type {op['type']!r} is not supported by the server "
                    f"(supported: {', '.join(OP_TYPES)})"
                )
        return value

    @pydantic.field_validator("preprocess")
    @classmethod
    def _chw_last(cls, ops: list[Any]) -> list[Any]:
        """The model's `image` is CHW: exactly one Permute, and PadStride only after it."""
        kinds = [op.type for op in ops]
        if kinds.count("Permute") != 1:
            raise ValueError(
                f"needs exactly one Permute (HWC -> CHW), has {kinds.count('Permute')}")
        permute = kinds.index("Permute")
        if kinds[permute + 1:].count("PadStride") != len(kinds) - permute - 1:
            raise ValueError(f"only PadStride may follow Permute (the order is {', '.join(kinds)})")
        if "PadStride" in kinds[:permute]:
            raise ValueError("PadStride pads a CHW image, so it follows Permute")
        return ops

    def label_names(self) -> dict[int, str]:
        """Class index (the `bbox` rows' first column) -> name."""
        return dict(enumerate(self.label_list))

    def class_names(self) -> list[str]:
        """The model's class names, each once: the quality metrics' bounded label set."""
        return list(dict.fromkeys(self.label_list))

    def labels_doc(self) -> list[dict[str, Any]]:
        """`label_list` in the metadata's `labels` form (index = id = class index)."""
        return [{"index": i, "id": i, "name": n} for i, n in enumerate(self.label_list)]


def is_ppdet_config(data: dict[str, Any]) -> bool:
    """True for PaddleDetection's shape of `infer_cfg.yml` (it has `Preprocess:` or `arch:`)."""
    return "Preprocess" in data or "arch" in data
