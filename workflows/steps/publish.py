"""`publish`: copy the gated model into the models volume, where serving reads it.

The copy (``<models>/<model>/<version>``, which the proposal points at) is atomic and
idempotent: the same weights again succeed, different weights under the same version are
refused. Only regular files and directories are copied; a symbolic link anywhere in the
export is refused with its path. Stale temporary directories older than
:data:`STALE_TMP_SECONDS` are removed. The copy also gets the probe set
(`workflows/probe_set.py`). Why: docs/inside-workflows.md.
"""

import argparse
import errno
import os
import pathlib
import shutil
import stat
import time
import uuid
from typing import Any, Sequence

from contracts.artifact import RECORD_FILE, ArtifactError, ModelRecord, read_record
from workflows.config import load_config
from workflows.errors import ConfigError, StepError
from workflows.probe_set import write_probe_set
from workflows.steps.common import base_parser, run_main
from workflows.steps.data_lineage import pinned_lock, prepared_val

_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
#: A temporary copy untouched this long belongs to a publish that was killed.
STALE_TMP_SECONDS = 3600.0


def check_regular_tree(source: pathlib.Path) -> None:
    """Refuse anything in the export but regular files and directories (links above all)."""
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = pathlib.Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise StepError(
                    f"{path}: a symbolic link (to {os.readlink(path)!r}) in the exported model; "
                    "publish copies regular files only, "
                    "so the export must hold the files themselves"
                )
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise StepError(f"{path}: not a regular file or directory; refusing to publish it")


def _remove_stale_tmp(parent: pathlib.Path, version: str, now: float) -> None:
    for tmp in parent.glob(f".{version}.*.tmp"):
        try:
            if now - tmp.lstat().st_mtime > STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass  # a concurrent publish removed or renamed it


def _record(model_dir: pathlib.Path) -> ModelRecord:
    """model.yaml, read and checked as `propose` reads it (which also checks the
    weights' digest, on the published copy); name and version become paths here."""
    path = model_dir / RECORD_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: not found (did the train step export the model?)")
    try:
        record = read_record(model_dir, check_weights=False)
    except ArtifactError as exc:
        raise ConfigError(str(exc)) from None
    for key in ("name", "version"):
        value = getattr(record, key)
        if value.startswith(".") or any(c not in _SAFE for c in value):
            raise ConfigError(f"{path}: field {key!r} is {value!r}; "
                              "expected a non-empty name of letters, digits, '.', '_' or '-'")
    return record


def _val_set(repo: str | None, out: str) -> tuple[pathlib.Path | None, pathlib.Path | None]:
    """(annotations, image folder) of the val set evaluate read, for the probe set: the
    pinned one when the repo has pins; (None, None) without a repo or a prepared pin (no
    probe set is a weaker canary, not a failed publish)."""
    if repo is None:
        return None, None
    loaded = load_config(pathlib.Path(repo))
    try:
        pinned = pinned_lock(loaded, out)
    except StepError as exc:
        print(f"warning: no probe set shipped: {exc}", flush=True)
        return None, None
    if pinned is not None:
        return prepared_val(pinned)
    return loaded.repo_dir / loaded.config.evaluation.annotations, None


def run(out: str, models_root: str, which: str = "full",
        repo: str | None = None) -> dict[str, Any]:
    """Copy `out/<which>/model` to `models_root/<name>/<version>`, with the probe set of
    `repo`'s evaluation set (none without `repo`); returns output parameters."""
    source = pathlib.Path(out).resolve() / which / "model"
    record = _record(source)
    check_regular_tree(source)
    root = pathlib.Path(models_root)
    if not root.is_dir():
        raise StepError(f"models volume {root}: not a directory (is the claim mounted?)")
    annotations, image_root = _val_set(repo, out)
    model = load_config(pathlib.Path(repo)).config.model if repo is not None else None
    if model is not None and record.name != model:  # the models volume is every team's
        raise StepError(f"{source / RECORD_FILE}: name {record.name!r} is not this repo's "
                        f"model ({model!r}); a repo publishes only under its own name")
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
    _remove_stale_tmp(target.parent, target.name, time.time())
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        shutil.copytree(source, tmp, symlinks=True)  # links were refused above; never follow
        if annotations is not None:
            print(write_probe_set(annotations, tmp, image_root), flush=True)
        os.rename(tmp, target)  # one step: a server sees no model or the whole model
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):  # a concurrent publish won the race
            return run(out, models_root, which, repo)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"published {record.name} {record.version} to {target}", flush=True)
    return {"model-dir": str(target)}


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--models-root", required=True,
                        help="the models volume's mount (the pipeline passes $(MLOPS_MODELS))")
    parser.add_argument("--which", default="full", choices=["full", "smoke"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.out, a.models_root, a.which, a.repo), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
