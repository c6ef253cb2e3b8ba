"""`publish`: copy the gated model into the models volume, where serving reads it.

Serving pods mount the models volume read-only and start on
`<models>/<model>/<version>` (`serving.manifests`); the run's own workspace
is deleted with the workflow. So a candidate that passed the gate is copied
there before it is proposed, and the proposal points at the copy.

The copy is atomic (a hidden temporary directory, then one rename), so a
server never sees half a model, and idempotent: a retry, or a re-run of the
same commit, finds the same weights already there and succeeds. Different
weights under the same version are refused, never overwritten: a version
names one set of weights for as long as a manifest may point at it.
"""

import errno
import os
import pathlib
import shutil
import uuid
from typing import Any, Sequence

from promotion.propose import ModelRecord, ProposeError, read_record
from workflows.errors import ConfigError, StepError
from workflows.steps.common import base_parser, run_main

_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


def _record(model_dir: pathlib.Path) -> ModelRecord:
    """model.yaml, read and checked as `propose` reads it (which also checks the
    weights' digest, on the published copy); name and version become paths here."""
    path = model_dir / "model.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: not found (did the train step export the model?)")
    try:
        record = read_record(model_dir, check_weights=False)
    except ProposeError as exc:
        raise ConfigError(str(exc)) from None
    for key in ("name", "version"):
        value = getattr(record, key)
        if value.startswith(".") or any(c not in _SAFE for c in value):
            raise ConfigError(f"{path}: field {key!r} is {value!r}; "
                              "expected a non-empty name of letters, digits, '.', '_' or '-'")
    return record


def run(out: str, models_root: str, which: str = "full") -> dict[str, Any]:
    """Copy `out/<which>/model` to `models_root/<name>/<version>`; returns output parameters."""
    source = pathlib.Path(out).resolve() / which / "model"
    record = _record(source)
    root = pathlib.Path(models_root)
    if not root.is_dir():
        raise StepError(f"models volume {root}: not a directory (is the claim mounted?)")
    target = root / record.name / record.version
    if target.exists():
        there = _record(target)
        if there.weights_sha256 != record.weights_sha256:
            raise StepError(
                f"{target} already holds other weights (sha256 {there.weights_sha256}, "
                f"this run's {record.weights_sha256}); refusing to overwrite a published version"
            )
        print(f"{target}: already published (same weights)", flush=True)
        return {"model-dir": str(target)}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        shutil.copytree(source, tmp)
        os.rename(tmp, target)  # one step: a server sees no model or the whole model
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):  # a concurrent publish won the race
            return run(out, models_root, which)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"published {record.name} {record.version} to {target}", flush=True)
    return {"model-dir": str(target)}


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--models-root", required=True,
                        help="the models volume's mount (the pipeline passes $(MLOPS_MODELS))")
    parser.add_argument("--which", default="full", choices=["full", "smoke"])
    return run_main(lambda a: run(a.out, a.models_root, a.which), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
