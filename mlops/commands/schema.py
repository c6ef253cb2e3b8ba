"""`mlops schema NAME`: print the JSON Schema of a configuration file.

The schemas ship in the package (`mlops/schemas/`, made from the pydantic models by
`mlops.reference.schemas`), so printing one imports no model. Point an editor at the
file (`# yaml-language-server: $schema=PATH` at the top of the YAML file) to have it
validate and complete `mlops.yaml`, the platform settings or a canary policy.
"""

from __future__ import annotations

import argparse
import pathlib

from mlops.errors import UserError


def _schema(args: argparse.Namespace) -> int:
    from mlops.reference.schemas import ALIASES, NAMES, schema_path, shipped

    if args.list:
        for name in NAMES:
            print(f"{name}\t{schema_path(name)}")
        return 0
    if not args.name:
        raise UserError(f"name a schema: {', '.join(NAMES)} (or --list)")
    name = ALIASES.get(args.name, args.name)
    if name not in NAMES:
        raise UserError(f"no schema {args.name!r}; choose one of {', '.join(NAMES)}")
    text = shipped(name)
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"{out}: the JSON Schema of {name}")
    else:
        print(text, end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops schema`."""
    p = subparsers.add_parser(
        "schema", help="print the JSON Schema of mlops.yaml, the platform settings or a "
                       "canary policy (for editors and validators)")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="mlops.yaml, settings (the platform settings) or canary-policy")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    p.add_argument("--list", action="store_true", help="list the schemas and their files")
    p.set_defaults(func=_schema)
