"""How a model version asks to be served: the `serving:` section of `infer_cfg.yml`.

Both `infer_cfg.yml` formats (`serving.modeldir`, `serving.ppdet_config`) accept it
(`workers`, `batch_max_size`, `batch_timeout_ms`, `max_request_pixels`, `reduced_decode`).
Every key is optional; `mlops serve` flags override it, and the version's rendered
Deployment passes the same values as flags, so every runtime serves the version the same
way. Unknown keys are refused. Why: docs/inside-serving.md.
"""

import pathlib
from typing import Annotated

import pydantic
import yaml

#: The bounds of each option, whether the model's section or a flag sets it
#: (`serving.settings.ServeSettings` has the defaults).
Workers = Annotated[int, pydantic.Field(ge=1, le=64)]
BatchMaxSize = Annotated[int, pydantic.Field(ge=1, le=256)]
BatchTimeoutMs = Annotated[float, pydantic.Field(ge=0, le=1000)]
MaxRequestPixels = Annotated[int, pydantic.Field(ge=1, le=1 << 30)]


class ServingOptions(pydantic.BaseModel):
    """The `serving:` section; None: not set (the flag or the default applies)."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)

    workers: Workers | None = pydantic.Field(default=None, strict=True)
    batch_max_size: BatchMaxSize | None = pydantic.Field(default=None, strict=True)
    batch_timeout_ms: BatchTimeoutMs | None = None
    max_request_pixels: MaxRequestPixels | None = pydantic.Field(default=None, strict=True)
    reduced_decode: bool | None = pydantic.Field(default=None, strict=True)

    def args(self) -> list[str]:
        """The `mlops serve` flags that set these values (only the ones set)."""
        out: list[str] = []
        if self.workers is not None:
            out += ["--workers", str(self.workers)]
        if self.batch_max_size is not None:
            out += ["--batch-max-size", str(self.batch_max_size)]
        if self.batch_timeout_ms is not None:
            out += ["--batch-timeout-ms", f"{self.batch_timeout_ms:g}"]
        if self.max_request_pixels is not None:
            out += ["--max-request-pixels", str(self.max_request_pixels)]
        if self.reduced_decode is not None:
            out += ["--reduced-decode" if self.reduced_decode else "--no-reduced-decode"]
        return out


def read_serving_options(model_dir: str | pathlib.Path) -> ServingOptions | None:
    """The `serving:` section of a model directory's `infer_cfg.yml` (None: absent)."""
    path = pathlib.Path(model_dir) / "infer_cfg.yml"
    if not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text()) or {}
    section = doc.get("serving") if isinstance(doc, dict) else None
    if section is None:
        return None
    try:
        return ServingOptions.model_validate(section)
    except pydantic.ValidationError as exc:
        raise ValueError(f"{path}: serving: {exc}") from None
