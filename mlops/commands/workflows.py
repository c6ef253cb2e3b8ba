"""`mlops workflows render|submit|lint`: the pipeline's manifests for a cluster."""

import argparse
import pathlib
import sys
from typing import Any

from contracts.errors import ExitCode, MlopsError
from mlops.commands._options import alias

# Hera (render, submit) and the schemas (lint) are imported inside the
# commands: they take seconds, and `mlops --help` should not.
TOKEN_ENV = "ARGO_TOKEN"


class LintFailed(MlopsError):
    """Some manifests do not validate."""

    exit_code = ExitCode.FAILED


def _settings(args: argparse.Namespace) -> Any:
    from workflows.settings import load_settings

    return load_settings(args.settings, namespace=getattr(args, "namespace", None))


def _render(args: argparse.Namespace) -> int:
    from workflows.config import load_config

    loaded = load_config(args.path)  # a broken config stops here, before any write
    settings = _settings(args)
    from workflows.render import write_manifests

    for path in write_manifests(loaded, settings, pathlib.Path(args.out)):
        print(path)
    return 0


def _submit(args: argparse.Namespace) -> int:
    from workflows.config import load_config

    loaded = load_config(args.path)
    settings = _settings(args)
    from workflows.submit import commit_parameters, submit

    params = commit_parameters(loaded.repo_dir, args.repo_url, args.revision, args.ref)
    result = submit(loaded, settings, args.argo_server, params, verify_ssl=not args.argo_insecure)
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
    for line in _preconditions(files, args):
        print(line)
    return 0


def _preconditions(files: list[pathlib.Path], args: argparse.Namespace) -> list[str]:
    """What the cluster must allow (workflows.preconditions), as report lines."""
    import yaml

    from workflows import preconditions as pre

    docs = [d for path in files for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict)]
    executor = None
    if args.argo_config:
        executor = _argo_executor(pathlib.Path(args.argo_config))
    pods = pre.pod_specs(docs, argo_executor=executor)
    base_images = {str(e.get("value")): "build-image's BASE_IMAGE" for d in docs
                   if d.get("kind") in ("WorkflowTemplate", "Workflow")
                   for t in (d.get("spec") or {}).get("templates") or []
                   for e in (t.get("container") or {}).get("env") or []
                   if e.get("name") == "BASE_IMAGE" and e.get("value")}
    findings = [*pre.psa_findings(pods), *pre.resource_findings(pods),
                *pre.image_findings(pods, base_images)]
    if executor is None and any(p.injected for p in pods):
        findings.append(pre.Finding(
            "pod security", "note", "Argo's init/wait containers were judged without the "
            "controller's `executor` settings: pass --argo-config (the "
            "workflow-controller-configmap) to judge them as configured"))
    if args.repo:
        from workflows.config import load_config

        loaded = load_config(args.repo)
        data = loaded.config.data
        locks = {} if data is None else {
            split: lock for split in ("train", "val", "holdout")
            if (lock := getattr(data, split, None))}
        findings += pre.data_lock_findings(loaded.repo_dir, locks)
    return ["preconditions (what the cluster must allow; docs/cluster.md):",
            *(f"  {f}" for f in findings)]


def _argo_executor(path: pathlib.Path) -> dict[str, Any]:
    """The `executor` of a workflow-controller-configmap (its `data.executor` YAML)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text()) or {}
        text = (doc.get("data") or {}).get("executor") if isinstance(doc, dict) else None
        executor = (yaml.safe_load(text) or {}) if isinstance(text, str) else (
            {} if text is None else text)
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise LintFailed(f"{path}: cannot read the workflow-controller-configmap: {exc}") \
            from None
    if not isinstance(executor, dict):
        raise LintFailed(f"{path}: data.executor is not a mapping")
    return executor


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
    sub_p.add_argument("--argo-insecure", action="store_true",
                       help="do not verify the Argo Server's TLS certificate")
    alias(sub_p, "--insecure", "argo_insecure", action="store_true")
    sub_p.set_defaults(func=_submit)

    lint = sub.add_parser(
        "lint", help="validate YAML manifests against the official schemas, check every "
        "pod's API rights, and report what the cluster must allow (Pod Security level per "
        "namespace, resource requests, images, data pins)")
    lint.add_argument("dir", help="directory (searched recursively) or a single file")
    lint.add_argument("--repo", help="the model repo rendered: check that its data pins "
                                     "(the lock files `data:` names) are committed")
    lint.add_argument("--argo-config", metavar="FILE",
                      help="the workflow-controller-configmap: judge Argo's init/wait "
                           "containers with its `executor` settings")
    lint.set_defaults(func=_lint)
