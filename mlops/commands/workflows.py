"""`mlops workflows render|submit|lint`: the pipeline's manifests for a cluster."""

import argparse
import pathlib
import sys
from typing import Any

from contracts.errors import ExitCode, MlopsError

# Hera (render, submit) and the schemas (lint) are imported inside the
# commands: they take seconds, and `mlops --help` should not.
TOKEN_ENV = "ARGO_TOKEN"


class LintFailed(MlopsError):
    """Some manifests do not validate."""

    exit_code = ExitCode.FAILED


def _settings(args: argparse.Namespace) -> Any:
    # lazy (import cost): `mlops --help` does not load it; it pulls pydantic
    from workflows.settings import load_settings

    return load_settings(args.settings, namespace=getattr(args, "namespace", None))


def _render(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it; it pulls pydantic
    from workflows.config import load_config

    loaded = load_config(args.path)  # a broken config stops here, before any write
    settings = _settings(args)
    # lazy (import cost): `mlops --help` does not load it; it pulls hera, jsonschema
    from workflows.render import write_manifests

    for path in write_manifests(loaded, settings, pathlib.Path(args.out)):
        print(path)
    return 0


def _submit(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it; it pulls pydantic
    from workflows.config import load_config

    loaded = load_config(args.path)
    settings = _settings(args)
    # lazy (import cost): `mlops --help` does not load it; it pulls hera
    from workflows.submit import commit_parameters, submit

    params = commit_parameters(loaded.repo_dir, args.repo_url, args.revision, args.ref)
    result = submit(loaded, settings, args.argo_server, params, verify_ssl=not args.insecure)
    if result.created:
        print(
            f"Workflow {result.namespace}/{result.workflow}: submitted ({params['revision'][:12]})"
        )
    else:
        print(
            f"Workflow {result.namespace}/{result.workflow}: already submitted for this commit; "
            "nothing new started"
        )
    return 0


def _lint(args: argparse.Namespace) -> int:
    target = pathlib.Path(args.dir)
    if not target.exists():
        raise LintFailed(f"{target}: no such file or directory")
    # lazy (import cost): `mlops --help` does not load it; it pulls jsonschema
    from workflows.lint import identity_problems, lint_paths, yaml_files

    files = yaml_files(target)
    if not files:
        raise LintFailed(f"{target}: no YAML files")
    count, problems = lint_paths(files)
    if not problems:
        problems = identity_problems(files)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        raise LintFailed(
            f"{len(problems)} problem(s) in {count} document(s) of {len(files)} file(s)"
        )
    print(f"{count} document(s) in {len(files)} file(s): valid")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops workflows`."""
    group = subparsers.add_parser("workflows", help="render, submit and lint the Argo pipeline")
    sub = group.add_subparsers(dest="workflows_command", metavar="ACTION", required=True)

    render = sub.add_parser(
        "render", help="write WorkflowTemplate, EventSource, Sensor and RBAC as YAML"
    )
    render.add_argument("path", help="model repo (directory with mlops.yaml)")
    render.add_argument("--out", required=True, help="output directory")
    render.add_argument("--settings", help="platform settings YAML (images, secrets, branch, ...)")
    render.add_argument("--namespace", help="namespace of every manifest")
    render.set_defaults(func=_render)

    sub_p = sub.add_parser(
        "submit", help=f"submit the current commit to an Argo Server (token from ${TOKEN_ENV})"
    )
    sub_p.add_argument("path", help="model repo (a git checkout with mlops.yaml)")
    sub_p.add_argument(
        "--argo-server", required=True, metavar="URL", help="e.g. https://argo.example.com:2746"
    )
    sub_p.add_argument("--namespace", help="namespace to submit into")
    sub_p.add_argument("--settings", help="platform settings YAML")
    sub_p.add_argument("--repo-url", help="git URL the cluster clones (default: remote 'origin')")
    sub_p.add_argument("--revision", help="commit sha (default: HEAD)")
    sub_p.add_argument("--ref", help="ref name (default: the current branch)")
    sub_p.add_argument(
        "--insecure", action="store_true", help="do not verify the server's TLS certificate"
    )
    sub_p.set_defaults(func=_submit)

    lint = sub.add_parser("lint", help="validate YAML manifests against the official schemas")
    lint.add_argument("dir", help="directory (searched recursively) or a single file")
    lint.set_defaults(func=_lint)
