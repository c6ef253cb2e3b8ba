"""Reuse the weights of an earlier run that had the very same inputs (`--weights-cache DIR`).

`DIR/<key>/final.pdckpt` is a finished run's final checkpoint; the key is a
digest of everything that decides the weights: the dataset digest, the
hyperparameters, the worker count and the code (the repo's `*.py` and this
kit's). A later run with the same key starts from it, trains zero steps and
exports, so a push that changes only serving flags (`--drill-*`) takes
seconds instead of minutes and its weights, and so their digest, are the ones
trained before. Serving-only flags and paths are not part of the key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
from typing import Any, Mapping

from modelkit.files import atomic_copy

__all__ = ["WeightsCache", "weights_key"]

KIT_DIR = pathlib.Path(__file__).resolve().parent


def _code_digest(code_dir: pathlib.Path) -> str:
    code = hashlib.sha256()
    for label, folder in (("", code_dir), ("modelkit/", KIT_DIR)):
        for path in sorted(pathlib.Path(folder).glob("*.py")):
            code.update((label + path.name).encode() + b"\0" + path.read_bytes())
    return code.hexdigest()


def weights_key(args: argparse.Namespace, dataset_digest: str, world: int,
                code_dir: pathlib.Path, extra: Mapping[str, str] | None = None) -> str:
    """16 hex digits over data, hyperparameters, workers and code (see the module docstring),
    and the repo's `extra` inputs (e.g. the digest of warm-start weights)."""
    # --checkpoint-every too: each checkpoint averages BatchNorm statistics across ranks.
    inputs: dict[str, Any] = {
        "dataset": dataset_digest, "epochs": args.epochs, "batch_size": args.batch_size,
        "lr": args.lr, "max_steps": args.max_steps, "subset": args.subset, "seed": args.seed,
        "world": world, "checkpoint_every": args.checkpoint_every,
        "code": _code_digest(code_dir)}
    if extra:  # only when given: the keys of runs without them stay as they were
        inputs["extra"] = dict(extra)
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class WeightsCache:
    """One run's entry in the cache directory."""

    def __init__(self, root: pathlib.Path, key: str) -> None:
        self.key = key
        self.path = pathlib.Path(root) / key / "final.pdckpt"

    def lookup(self) -> pathlib.Path | None:
        """The cached final checkpoint, or None."""
        return self.path if self.path.is_file() else None

    def store(self, checkpoint: pathlib.Path) -> None:
        """Copy a finished run's final checkpoint in (atomic: whole or absent)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_copy(checkpoint, self.path)
        print(f"weights cache: stored {self.key}", flush=True)
