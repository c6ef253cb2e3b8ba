"""`propose` (`mlops step propose`, and `mlops promote propose` for people): a trained
model's serving manifests on a branch of the GitOps repo, and a pull request.

Glue between the model repo's `mlops.yaml` (approval, canary policy, serving
image/replicas/port -- optional: flags and defaults work without it), the
platform policy in the GitOps repo (which bounds what `mlops.yaml` may ask)
and `promotion.gitrepo.propose.propose`, which writes the proposal branch and opens
the PR whose body is the evaluation report. Proposing the same version twice
finds the same branch and PR; `--approval auto` merges it at once.
"""

import argparse
import json
import pathlib
import sys
from typing import Any, Sequence

import yaml

from cogs.files import atomic_write_text
from contracts.errors import report
from gitops.forges.registry import DEFAULT_FORGE
from workflows.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The step's arguments, shared by `mlops step propose` and `mlops promote propose`."""
    p.add_argument("model_dir", metavar="MODEL_DIR", help="trained model directory (model.yaml)")
    p.add_argument("--gitops", required=True, help="GitOps repository (path or URL)")
    p.add_argument("--model", help="model name (default: name in model.yaml)")
    p.add_argument("--approval", choices=["pr", "auto"], default=None,
                   help="pr: a human merges; auto: merge at once (default: mlops.yaml or pr)")
    p.add_argument("--config", help="the model repo's mlops.yaml (canary policy, serving)")
    p.add_argument("--forge", default=DEFAULT_FORGE, help="local|github|gitlab|gitea")
    p.add_argument("--forge-api", help="the forge's API root (default: from --gitops)")
    p.add_argument("--forge-url", dest="forge_api", help=argparse.SUPPRESS,
                   default=argparse.SUPPRESS)  # the old name, kept for a release
    p.add_argument("--forge-repo", help="owner/name of the GitOps repo on a hosted forge")
    p.add_argument("--metrics", help="candidate metrics (JSON/YAML) if model.yaml lacks them")
    p.add_argument("--production", help="production model's model.yaml (for the comparison)")
    p.add_argument("--gate", help="the gate step's gate.json (verdict in the report)")
    p.add_argument("--image", help="server image for the Deployment")
    p.add_argument("--replicas", type=int)
    p.add_argument("--port", type=int)
    p.add_argument("--model-uri-prefix",
                   help="model URI prefix (default: file:// URI of MODEL_DIR)")
    p.add_argument("--branch", default="main", help="base branch of the GitOps repo")
    p.add_argument("--image-pull-secret", action="append", default=[], metavar="SECRET",
                   help="imagePullSecret of the serving Deployment (repeatable)")
    p.add_argument("--outputs", metavar="DIR",
                   help="write version, pr-url, pr-number, branch and proposal.json here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser


def _read_mapping(path: str, what: str) -> dict[str, Any]:
    file = pathlib.Path(path)
    if not file.is_file():
        raise ConfigError(f"{what} {file}: not found")
    try:
        data = yaml.safe_load(file.read_text())  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {file}: not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {file}: expected a mapping")
    return data


def _write_outputs(folder: pathlib.Path, result: Any) -> None:
    """One file per value, as Argo reads output parameters (`valueFrom.path`), and the whole
    result as proposal.json for the pipeline's report."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {"version": result.version, "pr-url": result.pr_url or "",
              "pr-number": str(result.pr_number or ""), "branch": result.branch,
              "proposal.json": json.dumps(result.__dict__, indent=2) + "\n"}
    for name, value in values.items():
        atomic_write_text(folder / name, value)


def run_args(args: argparse.Namespace) -> int:
    """Propose as the parsed arguments say; prints the outcome, returns 0."""
    from gitops.forges.registry import for_gitops
    from promotion.gitrepo.platform_policy import read_platform_policy
    from promotion.gitrepo.propose import propose
    from workflows.config import load_config

    # The platform's policy in the GitOps repo bounds what the model repo's mlops.yaml
    # (pushed with the commit) may ask: approval, canary policy, serving image.
    platform = read_platform_policy(args.gitops, args.branch)
    canary: dict[str, Any] = {}
    approval = args.approval  # an operator's explicit flag; the pipeline never passes it
    image, replicas, port = args.image, args.replicas, args.port
    if args.config:
        loaded = load_config(args.config)
        canary = dict(loaded.config.promotion.canary)
        if approval is None:
            approval = platform.approval_for(loaded.config.promotion.approval,
                                             f"{loaded.path}: promotion.approval")
        image = image or loaded.config.serving.image
        replicas = replicas or loaded.config.serving.replicas
        port = port or loaded.config.serving.port
        source = f"{loaded.path}: promotion.canary"
    else:
        source = "promotion.canary"
    policy = platform.canary_for(canary, source)
    if image:
        platform.check_image(image, f"{args.config or 'propose'}: serving.image")
    metrics = None
    if args.metrics:
        raw = _read_mapping(args.metrics, "--metrics")
        raw = raw.get("metrics", raw) if isinstance(raw.get("metrics"), dict) else raw
        # Counts stay integers: float() here printed `8000.0000` in every real PR.
        metrics = {k: v for k, v in raw.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
    production = _read_mapping(args.production, "--production") if args.production else None
    gate = _read_mapping(args.gate, "--gate") if args.gate else None
    forge = for_gitops(args.forge, args.gitops, args.forge_api, args.forge_repo,
                       api_flag="--forge-api")
    result = propose(
        pathlib.Path(args.model_dir), args.gitops, forge, policy, model=args.model,
        approval=approval or "pr", image=image or "registry.example.com/mlops/paddle-serve:0.1.0",
        replicas=replicas or 1, port=port or 8080, model_uri_prefix=args.model_uri_prefix,
        metrics=metrics, production=production, gate=gate, base=args.branch,
        image_pull_secrets=list(dict.fromkeys(args.image_pull_secret)),
    )
    if args.outputs:
        _write_outputs(pathlib.Path(args.outputs), result)
    if args.json:
        print(json.dumps(result.__dict__, indent=2))
    else:
        kind = "bootstrap (stable at 100%)" if result.bootstrap else "canary"
        where = f"PR #{result.pr_number}" if result.pr_number else "no PR"
        print(f"{result.model} {result.version}: {kind}, {where} on {result.branch} "
              f"[{result.status}{', merged' if result.merged else ''}]: {result.message}")
    return 0



def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    args = build_parser().parse_args(argv)
    try:
        return run_args(args)
    except Exception as exc:
        code = report(exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())
