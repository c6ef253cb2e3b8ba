"""A warm start: the net begins from an export's weights (`--init-from`, production's model).

The pipeline passes `--init-from DIR` when `mlops.yaml` says `training.init_from:
production`, so a weekly retrain is a short fine-tune instead of a run from
scratch. `paddle.jit.load` gives the export's parameters under their program
names (the network's own names, with a `_<n>` suffix when they clash with the
network built in this process); each must be found, with the same shape, or
the run stops naming the weight. A checkpoint to resume or a weights-cache entry
still wins over the starting weights (the loop restores them afterwards), and
the starting weights' digest is part of the weights-cache key.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
from typing import Any

from modelkit.errors import TrainError

__all__ = ["cache_inputs", "load_into"]


def _params(model_dir: str) -> pathlib.Path:
    params = pathlib.Path(model_dir) / "inference.pdiparams"
    if not params.is_file():
        raise TrainError(f"--init-from {model_dir}: no inference.pdiparams (not an export)")
    return params


def load_into(net: Any, model_dir: str) -> None:
    """Set `net`'s weights from the export in `model_dir` (`paddle.jit.save` of the same net)."""
    import paddle  # seconds to import; only a run needs it

    prefix = _params(model_dir).with_suffix("")
    loaded = {v.name: v for v in paddle.jit.load(str(prefix)).state_dict().values()}
    state = {}
    for key, param in net.state_dict().items():
        found = loaded.get(param.name) or loaded.get(f"{param.name}_0")
        if found is None or tuple(found.shape) != tuple(param.shape):
            raise TrainError(f"--init-from {model_dir}: the export has no weight {key} "
                             f"({param.name}, shape {list(param.shape)}); is it this model?")
        state[key] = found.numpy()
    net.set_state_dict(state)


def cache_inputs(args: argparse.Namespace) -> dict[str, str]:
    """The warm start's part of the weights-cache key: other starting weights, other result."""
    if not getattr(args, "init_from", ""):
        return {}
    h = hashlib.sha256()
    with open(_params(args.init_from), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"init_from": h.hexdigest()}
