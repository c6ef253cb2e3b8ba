"""`prepare-data`: the pinned dataset, fetched, verified and validated into the workspace.

Reads the lock files `mlops.yaml`'s `data:` names (from the checkout), combines each
role's split (`datapins.roles`), and prepares them (`datapins.prepare`) into
`OUT/data`: `annotations/<role>.json` and `images/...`, with the combined lock beside
them as `datalock.json`. Training gets `--data-dir OUT/data`, evaluation reads
`annotations/val.json` from there, and the model record takes the digest of that lock.
A bad dataset stops the run here, before any training, with the file and entry named
and the exit code of the table (`contracts.errors`: 2 bad data, 5 a file changed under
its pin, 7 a pinned file gone, 8 the store did not answer).
"""

import argparse
import os
import pathlib
import shutil
from typing import Any, Sequence

from datapins.cache import Cache
from datapins.lock import DataLock, read_lock
from datapins.prepare import MARKER, prepare
from datapins.roles import combine
from datapins.sources import open_source
from workflows.config import LoadedConfig, load_config
from workflows.errors import ConfigError
from workflows.steps.common import base_parser, run_main

DATA_DIR = "data"  # under OUT
CACHE_ENV = "MLOPS_DATA_CACHE"


def default_cache() -> pathlib.Path:
    """`$MLOPS_DATA_CACHE`, else the user's cache directory."""
    env = os.environ.get(CACHE_ENV)
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "mlops" / "data"


def repo_lock(loaded: LoadedConfig) -> DataLock:
    """The one lock of the roles `mlops.yaml`'s `data:` pins, read from the checkout."""
    data = loaded.config.data
    if data is None:
        raise ConfigError(f"{loaded.path}: no data: section; prepare-data needs the lock "
                          "files of train and val (`mlops data snapshot`)")
    locks = {}
    for role, file in data.roles().items():
        path = (loaded.repo_dir / file).resolve()
        if not path.is_relative_to(loaded.repo_dir):
            raise ConfigError(f"{loaded.path}: data.{role}: {file} is outside the repo")
        locks[role] = (file, read_lock(path))
    return combine(locks)


def run(repo: str, out: str, cache: str | None = None, source: str | None = None,
        full_decode: bool = False) -> dict[str, Any]:
    """Prepare the repo's pinned data into OUT/data; returns output parameters."""
    loaded = load_config(repo)
    data = loaded.config.data
    lock = repo_lock(loaded)
    assert data is not None  # repo_lock refused a repo without pins
    dest = pathlib.Path(out).resolve() / DATA_DIR
    marker = dest / MARKER
    if dest.exists() and not (marker.is_file() and read_lock(marker).digest == lock.digest):
        shutil.rmtree(dest)  # a retry after a crash, or another pin: this run's own folder
    report = prepare(lock, dest, Cache(pathlib.Path(cache) if cache else default_cache()),
                     open_source(source or lock.source), labels=data.labels,
                     full_decode=full_decode)
    images = sum(len(s.images) for s in lock.splits.values())
    print(f"prepared {lock.name} {lock.digest} into {dest}: {images} images "
          f"({', '.join(f'{n} {len(s.images)}' for n, s in lock.splits.items())}); "
          f"{report.fetched} file(s) fetched, {report.hits} from the cache; valid", flush=True)
    return {"digest": lock.digest, "name": lock.name, "images": str(images),
            "data-dir": str(dest), "fetched": str(report.fetched), "hits": str(report.hits)}


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None,
                        help=f"content-addressed cache (default: ${CACHE_ENV} or "
                             "~/.cache/mlops/data)")
    parser.add_argument("--source", default=None,
                        help="read the pinned files from here instead of the lock's source")
    parser.add_argument("--full-decode", action="store_true",
                        help="decode every pixel (catches truncated JPEGs)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.out, a.cache or None, a.source, a.full_decode),
                    parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
