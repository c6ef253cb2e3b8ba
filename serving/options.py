"""How a model version asks to be served: the `serving:` section of `infer_cfg.yml`.

Both `infer_cfg.yml` formats (the example's, `serving.modeldir`, and
PaddleDetection's, `serving.ppdet_config`) accept it::

    serving:
      workers: 2            # server processes behind the one port (default 1)
      batch_max_size: 8     # adaptive batching: at most 8 images per predictor run
      batch_timeout_ms: 1   # ... waiting up to 1 ms for more when idle (default 0)
      max_request_pixels: 16777216  # what one request's images may decode to
      reduced_decode: true  # JPEGs decoded at 1/2..1/8 scale when the resize shrinks them

Every key is optional; `mlops serve` flags (`--workers`, `--batch-max-size`,
`--batch-timeout-ms`, `--max-request-pixels`, `--reduced-decode`) override it,
and the Deployment rendered for the version (`serving.manifests.deployment`)
passes the same values as flags, so the pod, the local platform (which starts
the server from that container spec) and a hand-run `mlops serve` all serve
the version the same way.
Unknown keys are refused: a misspelt setting that silently did nothing would
be benchmarked as the thing it was meant to change.
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
