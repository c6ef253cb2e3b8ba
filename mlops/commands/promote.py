"""`mlops promote propose MODEL_DIR --gitops REPO`: propose a trained model for serving.

Glue between the model repo's `mlops.yaml` (approval, canary policy, serving
image/replicas/port -- optional: flags and defaults work without it) and
`promotion.propose.propose`, which writes the proposal branch and opens the PR
whose body is the evaluation report. Proposing the same version twice finds
the same branch and PR; `--approval auto` merges it at once.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import yaml

from mlops.errors import UserError


# The hosted services' API roots; a self-hosted forge serves its API under
# the host of its clone URLs, at the path each product documents.
_HOSTED_API = {"github.com": "https://api.github.com", "gitlab.com": "https://gitlab.com/api/v4"}
_API_PATH = {"github": "/api/v3", "gitlab": "/api/v4", "gitea": "/api/v1"}


def forge_api_url(name: str, gitops: str) -> str | None:
    """The API root of the forge that hosts `gitops` (an https URL), or None.

    The pipeline's `propose` step and the controller get only the GitOps
    repo's URL, so a self-hosted Gitea or GitLab must be found from it.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(gitops)
    if parts.scheme not in ("http", "https") or not parts.hostname or name not in _API_PATH:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return _HOSTED_API.get(host) or f"{parts.scheme}://{host}{_API_PATH[name]}"


def make_forge(name: str, gitops: str, api_url: str | None = None,
               forge_repo: str | None = None, api_flag: str = "--forge-url") -> Any:
    """The forge called `name` for the GitOps repo (local: the repo itself).

    Without `api_url` the API root comes from `$MLOPS_FORGE_API`, else from
    the GitOps repo's URL (`forge_api_url`).
    """
    import os

    from gitops.forges.registry import create

    if name == "local":
        return create("local", gitops)
    if not forge_repo and "://" in gitops:
        # https://github.com/owner/name.git -> owner/name (GitLab groups keep their path)
        from urllib.parse import urlsplit

        path = urlsplit(gitops).path.strip("/")
        forge_repo = path[:-4] if path.endswith(".git") else path
    if not forge_repo:
        raise UserError(f"--forge {name} needs --forge-repo (owner/name on the forge)")
    api_url = api_url or os.environ.get("MLOPS_FORGE_API") or forge_api_url(name, gitops)
    if name == "gitea" and not api_url:
        raise UserError(f"--forge gitea needs {api_flag} https://HOST/api/v1 (or MLOPS_FORGE_API)")
    kwargs: dict[str, Any] = {}
    if api_url:
        kwargs["api_url"] = api_url
    return create(name, forge_repo, **kwargs)


def _read_mapping(path: str, what: str) -> dict[str, Any]:
    file = pathlib.Path(path)
    if not file.is_file():
        raise UserError(f"{what} {file}: not found")
    try:
        data = yaml.safe_load(file.read_text())  # JSON is YAML too
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {file}: not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {file}: expected a mapping")
    return data


def _write_outputs(folder: pathlib.Path, result: Any) -> None:
    """One file per value, as Argo reads output parameters (`valueFrom.path`), and the whole
    result as proposal.json for the pipeline's report."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {"version": result.version, "pr-url": result.pr_url or "",
              "pr-number": str(result.pr_number or ""), "branch": result.branch,
              "proposal.json": json.dumps(result.__dict__, indent=2) + "\n"}
    for name, value in values.items():
        tmp = folder / f".{name}.tmp"
        tmp.write_text(value)
        tmp.replace(folder / name)


def _propose(args: argparse.Namespace) -> int:
    from promotion.platform_policy import read_platform_policy
    from promotion.propose import propose

    # The platform's policy in the GitOps repo bounds what the model repo's mlops.yaml
    # (pushed with the commit) may ask: approval, canary policy, serving image.
    platform = read_platform_policy(args.gitops, args.branch)
    canary: dict[str, Any] = {}
    approval = args.approval  # an operator's explicit flag; the pipeline never passes it
    image, replicas, port = args.image, args.replicas, args.port
    if args.config:
        from workflows.config import load_config

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
    forge = make_forge(args.forge, args.gitops, args.forge_url, args.forge_repo)
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


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops promote propose`."""
    parser = subparsers.add_parser("promote", help="propose a trained model for serving")
    sub = parser.add_subparsers(dest="promote_command", metavar="ACTION", required=True)
    p = sub.add_parser("propose", help="write the candidate's manifests on a branch and open a PR")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="trained model directory (model.yaml)")
    p.add_argument("--gitops", required=True, help="GitOps repository (path or URL)")
    p.add_argument("--model", help="model name (default: name in model.yaml)")
    p.add_argument("--approval", choices=["pr", "auto"], default=None,
                   help="pr: a human merges; auto: merge at once (default: mlops.yaml or pr)")
    p.add_argument("--config", help="the model repo's mlops.yaml (canary policy, serving)")
    p.add_argument("--forge", default="local", help="local|github|gitlab|gitea")
    p.add_argument("--forge-url", help="forge API URL")
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
    p.set_defaults(func=_propose)
