"""Checkpoints: written atomically, the newest two kept, resumed from with a check.

`CKPT/ckpt-<step, 8 digits>.pdckpt` holds `{"model", "optimizer", "meta"}`
(`paddle.save`); `meta` says the step, epoch, loss, seed, world size, global
batch and image count. The sample order is a pure function of (seed, epoch,
step) (:func:`modelkit.loop.batch_indices`), so model + optimizer + step is all
a resumed run needs to continue the very same curve. A checkpoint written for
another batch size or image count would silently mix two schedules: it is
refused with what to do instead.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any, Mapping

import numpy as np

from modelkit.errors import TrainError
from modelkit.files import atomic_write

__all__ = ["KEEP", "latest", "load", "save", "weights_digest"]

PATTERN = "ckpt-*.pdckpt"
KEEP = 2  #: checkpoints kept: the newest, and one more in case it is being written


def latest(ckpt_dir: pathlib.Path) -> pathlib.Path | None:
    """The newest checkpoint in `ckpt_dir` (names sort by step), or None."""
    found = sorted(pathlib.Path(ckpt_dir).glob(PATTERN))
    return found[-1] if found else None


def save(ckpt_dir: pathlib.Path, step: int, state: Mapping[str, Any]) -> pathlib.Path:
    """Write `state` as the checkpoint of `step` (atomic), then drop all but the newest KEEP."""
    import paddle

    path = atomic_write(pathlib.Path(ckpt_dir) / f"ckpt-{step:08d}.pdckpt",
                        lambda tmp: paddle.save(dict(state), str(tmp)))
    for old in sorted(pathlib.Path(ckpt_dir).glob(PATTERN))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def load(path: pathlib.Path, *, global_batch: int, images: int) -> dict[str, Any]:
    """The checkpoint at `path`, refused (`TrainError`) when written for another schedule."""
    import paddle

    state: dict[str, Any] = paddle.load(str(path))
    meta = state["meta"]
    if (meta.get("global_batch"), meta.get("images")) != (global_batch, images):
        raise TrainError(
            f"checkpoint {path} was written for --batch-size {meta.get('global_batch')} "
            f"over {meta.get('images')} images, this run has {global_batch} over {images}; "
            f"use a fresh --checkpoint-dir")
    return state


def weights_digest(state: Mapping[str, Any]) -> str:
    """sha256 over the named parameters and buffers (tensors), in name order."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(np.ascontiguousarray(state[name].numpy()).tobytes())
    return h.hexdigest()
