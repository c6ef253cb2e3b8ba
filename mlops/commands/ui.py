"""`mlops ui`: the web app on loopback; `mlops ui manifests`: the same app for a cluster.

`mlops ui` reads the local platform's work dir for what it was not told: the
GitOps repo `mlops up` serves and its Prometheus. Pages: Models (weights, phase,
live rates, the decision timeline, canary controls), Runs (`--runs DIR`: the
local runs' steps and logs), Proposals (PRs with their evaluation report and an
Approve button). Every button is the same commit as its CLI command, signed
with the name in the page (default: `--by` or the current user) -- with `--token`,
always with `--by` (the token's identity), with `--proxy-user` as the signed-in person.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Any

from mlops.commands.pr import forge_from_args
from mlops.errors import UserError


def ui_config(args: argparse.Namespace) -> Any:
    """The UI's settings from the options, completed from the platform's work dir."""
    # lazy (import cost): `mlops --help` does not load them; mlops.ui.app pulls starlette
    from gitops.people import current_user
    from local.platform.workdir import Workdir, default_workdir, load_config
    from mlops.ui.app import UiConfig

    root = pathlib.Path(args.workdir).expanduser().resolve() if args.workdir else \
        default_workdir()
    platform = load_config(Workdir(root))
    gitops = args.gitops or (platform.gitops if platform else None)
    if not gitops:
        raise UserError("no GitOps repo: pass --gitops (or $MLOPS_GITOPS_REPO), or --workdir of "
                        "a platform started with `mlops up`")
    prometheus = args.prometheus
    if prometheus is None and platform is not None and platform.prometheus_port:
        prometheus = f"http://127.0.0.1:{platform.prometheus_port}"
    # The forge `mlops pr` would use (local: the GitOps repo's own PR records).
    forge_args = argparse.Namespace(forge=args.forge, forge_repo=args.forge_repo,
                                    forge_api=args.forge_api, repo=gitops)

    def forge() -> Any:
        return forge_from_args(forge_args)

    runs = [pathlib.Path(r).expanduser() for r in args.runs]
    for r in runs:
        if not r.is_dir():
            raise UserError(f"--runs {r}: no such directory")
    return UiConfig(
        proxy_header=args.proxy_header, proxy_secret=args.proxy_secret or None,
        argo_ca=args.argo_ca, argo_insecure=args.argo_insecure,
        gitops=gitops, branch=args.branch or (platform.branch if platform else "main"),
        prometheus=prometheus or None, runs=runs,
        reports=pathlib.Path(args.reports).expanduser() if args.reports else None,
        models_root=pathlib.Path(args.models_root) if args.models_root else None,
        actions=not args.read_only, token=args.token or None, user=current_user(args.by),
        proxy_user=args.proxy_user, runtime=args.runtime,
        workdir=root if platform is not None else None,
        argo_server=args.argo_server,
        argo_namespace=args.argo_namespace or _settings(args).namespace, forge=forge)


def _settings(args: argparse.Namespace) -> Any:
    """The pipeline's settings (`--settings FILE`, else the defaults): the namespace its
    Workflows run in, the pods' image pull secrets."""
    # lazy (import cost): `mlops --help` does not load it
    from workflows.settings import load_settings

    return load_settings(args.settings)


def _serve(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it
    import uvicorn

    # lazy (import cost): `mlops --help` does not load it; it pulls starlette
    from mlops.ui.app import create_app

    config = ui_config(args)
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    if loopback:
        config.allowed_hosts = ["127.0.0.1", "localhost", "[::1]", "::1"]
    if not loopback and config.actions and not config.token and not config.proxy_user:
        raise UserError(f"--host {args.host} exposes the actions beyond this machine: set "
                        "--token (or $MLOPS_UI_TOKEN), --proxy-user, or --read-only")
    if not loopback and config.proxy_user and not config.proxy_secret:
        # Any client that reaches the port could name itself in the header.
        raise UserError(f"--proxy-user on --host {args.host} would trust a user header any "
                        "client can send: run the proxy beside the UI and bind 127.0.0.1 (as "
                        "`mlops ui manifests --proxy-user` does), or set --proxy-secret (or "
                        "$MLOPS_UI_PROXY_SECRET), which the proxy sends as X-Mlops-Proxy-Secret")
    # lazy (import cost): `mlops --help` does not load it
    from gitops.git import line_problem, redact

    problem = line_problem(config.user)
    if problem:  # it signs every action: a commit trailer
        raise UserError(f"--by {config.user!r}: {problem}")
    shown = f"GitOps {redact(config.gitops)}"
    if config.prometheus:
        shown += f", Prometheus {redact(config.prometheus)}"
    if config.token and not config.proxy_user:
        shown += f"; actions with the token sign as {config.user!r}"
    print(f"mlops ui: http://{args.host}:{args.port}/  ({shown})", flush=True)
    # Open event streams (pushed updates) end within a tick of Ctrl-C; do not wait longer.
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=2)
    return 0


def _manifests(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it
    import yaml

    # lazy (import cost): `mlops --help` does not load it
    from mlops.ui.manifests import ui_manifests

    settings = _settings(args)
    docs = ui_manifests(gitops_url=args.gitops, prometheus_url=args.prometheus,
                        image=args.image, namespace=args.namespace, port=args.port,
                        actions=args.enable_actions, token_secret=args.token_secret,
                        proxy_user=args.proxy_user, proxy_image=args.proxy_image,
                        proxy_env_secret=args.proxy_env_secret, git_secret=args.git_secret or None,
                        argo_server=args.argo_server,
                        argo_namespace=args.argo_namespace or settings.namespace,
                        argo_secret=args.argo_secret, argo_ca_configmap=args.argo_ca_configmap,
                        argo_insecure=args.argo_insecure, forge=args.forge,
                        forge_secret=args.forge_secret, token_identity=args.token_identity,
                        image_pull_secrets=settings.image_pull_secrets)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops ui` and `mlops ui manifests`."""
    p = subparsers.add_parser("ui", help="serve the web UI (models, runs, proposals) on loopback")
    p.add_argument("--workdir", metavar="DIR",
                   help="the local platform's work dir (default: $MLOPS_WORKDIR, ./.mlops, "
                        "~/.mlops): its GitOps repo and Prometheus")
    p.add_argument("--gitops", default=os.environ.get("MLOPS_GITOPS_REPO"),
                   help="GitOps repository (default: $MLOPS_GITOPS_REPO, else the platform's)")
    p.add_argument("--branch", default=None)
    p.add_argument("--prometheus", default=None,
                   help="Prometheus URL for live rates (default: the platform's; '' for none)")
    p.add_argument("--runtime", choices=["local", "kubernetes", "none"], default=None,
                   help="where the models run: the metrics preset a canary policy that "
                        "names none is read with, as `mlops controller run` picks it "
                        "(local: haproxy, kubernetes: istio, none: model; default: local "
                        "with a platform work dir, else none). The models' namespace is the "
                        "GitOps repo's (mlops-gitops.yaml), as the controller reads it"),
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="a run's --out dir or a runs dir of the post-receive hook (repeatable)")
    p.add_argument("--argo-server", metavar="URL", default=os.environ.get("ARGO_SERVER_URL"),
                   help="in a cluster: runs from this Argo Server (token: $ARGO_TOKEN)")
    p.add_argument("--argo-namespace", default=None,
                   help="the Workflows' namespace (default: the --settings file's namespace, "
                        "else mlops)")
    p.add_argument("--argo-ca", metavar="FILE",
                   help="CA bundle (PEM) that signed the Argo Server's certificate")
    p.add_argument("--argo-insecure", action="store_true",
                   help="do not check the Argo Server's TLS certificate")
    p.add_argument("--settings", help="the pipeline's settings file (its namespace)")
    p.add_argument("--forge", default=os.environ.get("MLOPS_FORGE", "local"),
                   help="where the PRs are, as for `mlops pr`: local, github, gitlab or gitea "
                        "(default: $MLOPS_FORGE or local)")
    p.add_argument("--forge-repo", default=os.environ.get("MLOPS_FORGE_REPO"),
                   help="owner/name on a hosted forge (default: from --gitops)")
    p.add_argument("--forge-api", default=os.environ.get("MLOPS_FORGE_API"),
                   help="API root of a self-hosted forge")
    p.add_argument("--reports", metavar="DIR",
                   help="the controller's work dir (its rollouts/*/*/report.md and .png)")
    p.add_argument("--models-root", default=os.environ.get("MLOPS_MODELS"),
                   help="the models volume, for Rollback (as `mlops rollback --models-root`)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--by", help="who the buttons act as (default: the current user); with "
                                "--token, the token's identity: every action signs as it")
    p.add_argument("--token", default=os.environ.get("MLOPS_UI_TOKEN"),
                   help="actions need this bearer token (default: $MLOPS_UI_TOKEN); they "
                        "sign as --by, whatever a request says")
    p.add_argument("--read-only", action="store_true", help="no buttons, every POST refused")
    p.add_argument("--proxy-user", action="store_true",
                   help="take the person from the auth proxy's header (--proxy-header); "
                        "beyond loopback only with --proxy-secret")
    p.add_argument("--proxy-header", default="X-Forwarded-User",
                   help="the one header that names the person (default: X-Forwarded-User, "
                        "as oauth2-proxy sets it)")
    p.add_argument("--proxy-secret", default=os.environ.get("MLOPS_UI_PROXY_SECRET"),
                   help="the proxy proves itself with this in X-Mlops-Proxy-Secret "
                        "(default: $MLOPS_UI_PROXY_SECRET)")
    p.set_defaults(func=_serve)
    sub = p.add_subparsers(dest="ui_command", metavar="ACTION")
    man = sub.add_parser("manifests", help="print the UI's Deployment and Service for a cluster")
    man.add_argument("--gitops", required=True, help="GitOps repository URL (as pods see it)")
    man.add_argument("--prometheus", help="Prometheus URL (as pods see it)")
    man.add_argument("--image", default="registry.example.com/mlops/controller:0.1.0")
    man.add_argument("--namespace", default="mlops")
    man.add_argument("--port", type=int, default=8765)
    man.add_argument("--enable-actions", action="store_true",
                     help="let the UI commit (default: read-only); needs --token-secret or "
                          "--proxy-user")
    man.add_argument("--token-secret", default=None,
                     help="Secret with key 'token' that actions need (with --enable-actions)")
    man.add_argument("--token-identity", default="ui-token",
                     help="who actions with the token are signed as (a shared token names "
                          "no person; default: ui-token)")
    man.add_argument("--proxy-user", action="store_true",
                     help="oauth2-proxy in the pod in front of the UI (which listens on "
                          "127.0.0.1); actions signed as its X-Forwarded-User")
    man.add_argument("--proxy-image", default="quay.io/oauth2-proxy/oauth2-proxy:v7.15.3")
    man.add_argument("--proxy-env-secret", default="mlops-ui-oauth2-proxy",
                     help="Secret whose OAUTH2_PROXY_* keys configure oauth2-proxy (provider, "
                          "client id and secret, cookie secret, email domains, redirect URL)")
    man.add_argument("--git-secret", default="mlops-gitops-token",
                     help="Secret with key 'token' for reading (and with --enable-actions "
                          "pushing to) the GitOps repo, as the controller's; '' for none")
    man.add_argument("--forge", choices=["github", "gitlab", "gitea"],
                     help="the PRs' forge (owner/name and API root from --gitops)")
    man.add_argument("--forge-secret", default="mlops-forge",
                     help="Secret with key 'token' for the forge's API (with --forge)")
    man.add_argument("--argo-server", metavar="URL",
                     help="Argo Server URL (as pods see it) for the Runs page")
    man.add_argument("--argo-namespace", default=None,
                     help="the Workflows' namespace (default: the --settings file's "
                          "namespace, else mlops)")
    man.add_argument("--argo-secret",
                     help="Secret with key 'token' for the Argo Server (default: render a "
                          "ServiceAccount mlops-ui-argo that may only read Workflows and logs, "
                          "and its token Secret)")
    man.add_argument("--argo-ca-configmap", metavar="NAME",
                     help="ConfigMap whose key ca.crt signed the Argo Server's certificate")
    man.add_argument("--argo-insecure", action="store_true",
                     help="do not check the Argo Server's certificate (its default one is "
                          "self-signed)")
    man.add_argument("--settings", help="the pipeline's settings file (namespace of the "
                                        "Workflows, image_pull_secrets)")
    man.set_defaults(func=_manifests)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(1)
