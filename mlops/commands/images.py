"""`mlops images build|list`: the images we ship, built with podman from their Dockerfiles.

Glue only: `mlops.images.build` knows the images and how to build them,
`mlops.images.base` makes the `python:3.11-slim` they start from.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from mlops.errors import UserError


def _root(value: str | None) -> pathlib.Path:
    """The project checkout: `--root`, else the one this package was installed from."""

    root = pathlib.Path(value).resolve() if value else \
        pathlib.Path(__file__).resolve().parents[2]
    if not (root / "Dockerfile").is_file() or not (root / "pyproject.toml").is_file():
        raise UserError(f"{root}: not a checkout of this project (no Dockerfile and "
                        "pyproject.toml); pass --root")
    return root


def _build(args: argparse.Namespace) -> int:
    from mlops.images.build import build_all, select
    from mlops.images.podman import Store

    specs = select(args.only)
    store = Store(pathlib.Path(args.store).expanduser() if args.store else None)
    timings = build_all(_root(args.root), specs, store=store,
                        log=lambda line: print(line, file=sys.stderr, flush=True))
    for spec in specs:
        print(f"{spec.name}\t{timings[spec.key]} s")
    return 0


def _list(args: argparse.Namespace) -> int:
    from mlops.images.build import IMAGES, build_arg_values

    for spec in IMAGES:
        build_args = (f" --target {spec.target}" if spec.target else "") + "".join(
            f" --build-arg {k}={v}" for k, v in build_arg_values(spec).items())
        print(f"{spec.key:16} {spec.name:40} {spec.context}/{spec.dockerfile}{build_args}  "
              f"# {spec.role}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops images build` and `mlops images list`."""
    parser = subparsers.add_parser("images", help="build the images we ship, with podman")
    sub = parser.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build", help="make the python:3.11-slim base from Debian packages, then build every "
                      "image from its Dockerfile (layers cached: an unchanged rebuild takes "
                      "seconds)")
    build.add_argument("--only", action="append", default=[], metavar="IMAGE",
                       help="build only this image (repeatable; see `mlops images list`)")
    build.add_argument("--store", help="podman store (default: $MLOPS_CONTAINERS_DIR or "
                                       "~/.cache/paddle-mlops/containers)")
    build.add_argument("--root", help="the project checkout (default: this installation's)")
    build.set_defaults(func=_build)
    lst = sub.add_parser("list", help="the images, their Dockerfiles and build arguments")
    lst.set_defaults(func=_list)
