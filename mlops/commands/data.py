"""`mlops data snapshot|prepare|diff`: pin a dataset by content, fetch it checked, compare pins.

`snapshot SOURCE --name NAME --out FILE` writes the lock file to commit in the model
repo (the dataset's layout found in SOURCE, or given by `--ppdet-config FILE`, a
PaddleDetection dataset YAML whose `dataset_dir` is SOURCE when SOURCE is not given);
`prepare LOCK --dest DIR` fetches exactly the pinned files (through the cache,
`--cache` or `$MLOPS_DATA_CACHE`), verifies and validates them, and lays them out in
DIR; `diff OLD NEW` prints what changed as Markdown. S3 credentials come from the
environment only (boto3's chain); no flag takes a key.
"""

from __future__ import annotations

import argparse
import pathlib

from cogs.text import printable
from mlops.commands._options import from_env
from mlops.errors import UserError


def _cache(args: argparse.Namespace) -> pathlib.Path:
    """`--cache`, else $MLOPS_DATA_CACHE (`from_env`), else ~/.cache/mlops/data."""
    return pathlib.Path(args.cache or pathlib.Path.home() / ".cache" / "mlops" / "data")


def _snapshot(args: argparse.Namespace) -> int:
    from datapins.layouts import dataset_root, read_ppdet_config
    from datapins.lock import read_lock, write_lock
    from datapins.snapshot import snapshot
    from datapins.sources import open_source

    layout, source = None, args.source
    if args.ppdet_config:
        config = pathlib.Path(args.ppdet_config)
        layout, dataset_dir = read_ppdet_config(config)
        if source is None:
            source = str(dataset_root(config, dataset_dir, pathlib.Path.cwd()))
    if source is None:
        raise UserError("name the dataset: SOURCE (a directory or s3://BUCKET/PREFIX), or "
                        "--ppdet-config FILE whose dataset_dir is the dataset's root")
    lock = snapshot(open_source(source, args.endpoint_url), args.name, workers=args.workers,
                    layout=layout)
    out = pathlib.Path(args.out)
    if args.if_changed and out.is_file() and read_lock(out).digest == lock.digest:
        print(printable(f"{out}: unchanged ({lock.digest}); not rewritten"))
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)  # data/ of a fresh clone: git keeps no empty dir
    write_lock(lock, out)
    images = sum(len(s.images) for s in lock.splits.values())
    splits = ", ".join(f"{n} {len(s.images)}" for n, s in lock.splits.items())
    layout_note = "" if lock.layout == "coco" else f"; layout {lock.layout}"
    print(printable(f"{out}: {lock.name} {lock.digest}: {images} images ({splits})"
                    f"{layout_note}"))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from datapins.cache import Cache
    from datapins.lock import read_lock
    from datapins.prepare import prepare
    from datapins.sources import open_source

    lock = read_lock(pathlib.Path(args.lock))
    labels = [x.strip() for x in args.labels.split(",") if x.strip()] if args.labels else None
    report = prepare(lock, pathlib.Path(args.dest), Cache(_cache(args)),
                     open_source(args.source or lock.source, args.endpoint_url),
                     labels=labels, full_decode=args.full_decode, workers=args.workers)
    if report.skipped:
        print(printable(f"{args.dest}: already holds {lock.name} ({lock.digest}); nothing to do"))
    else:
        print(printable(f"{args.dest}: {lock.name} {lock.digest}: {report.files} files, "
                        f"{report.fetched} fetched ({report.bytes_fetched:,} bytes), "
                        f"{report.hits} from the cache; valid"))
    return 0


def _diff(args: argparse.Namespace) -> int:
    import hashlib

    from datapins.cache import Cache
    from datapins.diff import diff, render_markdown
    from datapins.lock import read_lock

    old, new = read_lock(pathlib.Path(args.old)), read_lock(pathlib.Path(args.new))
    # The annotation files, where the cache holds them (`mlops data prepare` put them there,
    # by content): image-level noise floors and relabelled boxes. Not there: boxes only.
    cache = Cache(_cache(args))
    annotations = {}
    for split in (*old.splits.values(), *new.splits.values()):
        path = cache.entry(split.annotations.sha256)
        if path.is_file():
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() == split.annotations.sha256:
                annotations[split.annotations.sha256] = data
    # Two locks' names, classes and paths, written by whoever pushed them: shown, not obeyed
    # by the terminal (`cogs.text`).
    print(printable(render_markdown(diff(old, new, annotations))), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops data`."""
    p = subparsers.add_parser("data", help="dataset pins: snapshot, prepare, diff")
    sub = p.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    endpoint = argparse.ArgumentParser(add_help=False)
    endpoint.add_argument("--endpoint-url", default=None,
                          help="S3 endpoint of a MinIO/OSS-style store "
                               "(default: $MLOPS_DATA_ENDPOINT_URL; credentials: environment)")
    endpoint.add_argument("--workers", type=int, default=8, help="parallel reads (default 8)")

    s = sub.add_parser("snapshot", parents=[endpoint],
                       help="pin a dataset by content where it lies: this project's COCO "
                            "layout, COCO 2017's own, or a PaddleDetection dataset YAML")
    s.add_argument("source", metavar="SOURCE", nargs="?",
                   help="a directory or s3://BUCKET/PREFIX (with --ppdet-config: default its "
                        "dataset_dir)")
    s.add_argument("--ppdet-config", metavar="FILE",
                   help="a PaddleDetection dataset YAML (COCODataSet or VOCDataSet: "
                        "TrainDataset is the train split, EvalDataset val; _BASE_ followed)")
    s.add_argument("--name", required=True, help="the pin's name, e.g. shapes-2026w48")
    s.add_argument("--out", required=True, metavar="FILE", help="the lock file to write")
    s.add_argument("--if-changed", action="store_true",
                   help="leave FILE as it is when it pins the same data (same digest), "
                        "whatever the new name: a scheduled snapshot commits only real changes")
    s.set_defaults(func=_snapshot)

    r = sub.add_parser("prepare", parents=[endpoint],
                       help="fetch the pinned files, verify and validate them into DIR")
    r.add_argument("lock", metavar="LOCK")
    r.add_argument("--dest", required=True, metavar="DIR")
    r.add_argument("--cache", metavar="DIR",
                   help="content-addressed cache (default: $MLOPS_DATA_CACHE or "
                        "~/.cache/mlops/data)")
    r.add_argument("--source", default=None,
                   help="read from here instead of the lock's source (the same data elsewhere)")
    r.add_argument("--labels", default=None, metavar="A,B,...",
                   help="the model's label list; a category outside it is refused")
    r.add_argument("--full-decode", action="store_true",
                   help="decode every pixel (catches truncated JPEGs; slower than verify)")
    from_env(r, "cache")
    r.set_defaults(func=_prepare)

    d = sub.add_parser("diff", help="what changed between two lock files, as Markdown")
    d.add_argument("old", metavar="OLD")
    d.add_argument("new", metavar="NEW")
    d.add_argument("--cache", metavar="DIR",
                   help="where `prepare` keeps files by content; the annotation files found "
                        "there give per-image noise floors and relabelled boxes (default: "
                        "$MLOPS_DATA_CACHE or ~/.cache/mlops/data)")
    from_env(d, "cache")
    d.set_defaults(func=_diff)
