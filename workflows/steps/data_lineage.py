"""The dataset a model saw, as the pipeline verified it: for evaluate and the model record.

prepare-data leaves `OUT/data/datalock.json`, the combined lock of the pins it fetched
and checked. Evaluation reads the val annotations beside it (and the holdout's, when
`mlops.yaml` pins one) once `pinned_lock` has checked them again against the repo's own
pins (the training job ran in between), and the model record takes
its digest (not whatever `train.py` reported) and keeps a copy of it in the model
directory, so the next candidate's PR can diff its data against this one's
(`promotion.gitrepo.propose`).
"""

import pathlib
import shutil
from typing import Any

from contracts.artifact import LOCK_FILE
from datapins.cache import Cache
from datapins.errors import DataDigestMismatch, DataError
from datapins.lock import read_lock
from datapins.prepare import MARKER, verify_placed
from workflows.config import LoadedConfig
from workflows.errors import StepError
from workflows.steps.prepare_data import DATA_DIR, default_cache, repo_lock

RECORD_LOCK = LOCK_FILE  # beside model.yaml; the PR diffs it against production's


#: The splits evaluation reads: verified again by every reader of `pinned_lock`.
EVALUATED = ("val", "holdout")


def pinned_lock(loaded: LoadedConfig, out: str | pathlib.Path) -> pathlib.Path | None:
    """The prepared lock of a repo with pins (None without `data:`), verified again.

    StepError if prepare-data left none. The training job ran the pushed repo's code
    after prepare-data, on the same workspace (it replaced the val
    annotations and the lock beside them, and a failing candidate passed the gate). So
    the prepared lock must be the lock of the repo's own pins (read from the checkout,
    which the training pods mount read-only), and the files evaluation reads (the val
    and holdout splits) must still hash to their pins: `DataDigestMismatch` names each
    one that does not. In a cluster the training pods also mount the prepared data
    read-only (`workflows.pipeline`); this check holds wherever they ran."""
    if loaded.config.data is None:
        return None
    path = pathlib.Path(out).resolve() / DATA_DIR / MARKER
    if not path.is_file():
        raise StepError(f"{path}: no prepared dataset; {loaded.path.name} has data pins, so "
                        "prepare-data must run first (`mlops step prepare-data`)")
    expected = repo_lock(loaded)
    try:
        prepared = read_lock(path)
    except DataError as exc:
        raise DataDigestMismatch(f"{exc}; prepare-data wrote it, a step after it changed "
                                 "it: nothing is judged on this data") from None
    if prepared != expected:
        raise DataDigestMismatch(
            f"{path}: {prepared.name} {prepared.digest} is not the lock of "
            f"{loaded.path.name}'s pins ({expected.name} {expected.digest}); a step after "
            "prepare-data changed it: nothing is judged on this data")
    for note in verify_placed(expected, path.parent,
                              [s for s in EVALUATED if s in expected.splits],
                              Cache(default_cache())):
        print(f"note: {note}", flush=True)
    return path


def prepared_val(lock_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(val annotations, the folder their file_names are under) of a prepared dataset:
    prepare-data lays a pin out as `annotations/<split>.json` and `images/<file_name>`."""
    return lock_path.parent / "annotations" / "val.json", lock_path.parent / "images"


def prepared_holdout(loaded: LoadedConfig,
                     lock_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path] | None:
    """(holdout annotations, their images folder) when `mlops.yaml` pins a `data.holdout`
    role (None otherwise); StepError when prepare-data left no holdout split."""
    if loaded.config.data is None or not loaded.config.data.holdout:
        return None
    path = lock_path.parent / "annotations" / "holdout.json"
    if not path.is_file():
        raise StepError(f"{path}: not found; {loaded.path.name} pins data.holdout "
                        f"({loaded.config.data.holdout}), so prepare-data must run again")
    return path, lock_path.parent / "images"


def record_dataset(model_dir: pathlib.Path, record: dict[str, Any],
                   lock_path: pathlib.Path) -> None:
    """Put the verified dataset's digest and name into `record`, and the lock beside it."""
    lock = read_lock(lock_path)
    reported = record.get("dataset_digest")
    record["dataset_digest"] = lock.digest
    record["dataset"] = lock.name
    if reported and reported != lock.digest:
        record["dataset_digest_reported"] = reported  # train.py's own, kept to compare
    shutil.copyfile(lock_path, model_dir / RECORD_LOCK)
