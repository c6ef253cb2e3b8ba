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
import pathlib
import sys
from typing import TYPE_CHECKING, Any

from mlops.commands._options import alias, forge_options, require_gitops
from mlops.commands.pr import forge_from_args
from mlops.errors import UserError

if TYPE_CHECKING:
    from mlops.ui.app import UiConfig
    from mlops.ui.settings import UiSettings


def settings_of(args: argparse.Namespace) -> UiSettings:
    """`mlops ui`'s settings: the flags given, the rest from the environment or the
    defaults (`UiSettings.from_options`)."""
    from mlops.ui.settings import UiSettings

    return UiSettings.from_options({name: value for name, value in vars(args).items()
                                    if name in UiSettings.model_fields})


def ui_config(args: argparse.Namespace) -> UiConfig:
    """The UI's settings from the options, completed from the platform's work dir."""
    return config_of(settings_of(args))


def config_of(settings: UiSettings) -> UiConfig:
    """What the app runs with: `settings`, completed from the platform's work dir."""
    from local.platform.workdir import Workdir, default_workdir, load_config
    from mlops.ui.app import UiConfig

    root = pathlib.Path(settings.workdir).expanduser().resolve() if settings.workdir else \
        default_workdir()
    platform = load_config(Workdir(root))
    gitops = settings.gitops or (platform.gitops if platform else None)
    if not gitops:
        raise UserError("no GitOps repo: pass --gitops (or $MLOPS_GITOPS_REPO), or --workdir of "
                        "a platform started with `mlops up`")
    prometheus = settings.prometheus
    if prometheus is None and platform is not None and platform.prometheus_port:
        prometheus = f"http://127.0.0.1:{platform.prometheus_port}"
    # The forge `mlops pr` would use (local: the GitOps repo's own PR records).
    forge_args = argparse.Namespace(forge=settings.forge, forge_repo=settings.forge_repo,
                                    forge_api=settings.forge_api, gitops=gitops)

    def forge() -> Any:
        return forge_from_args(forge_args)

    runs = [pathlib.Path(r).expanduser() for r in settings.runs]
    for r in runs:
        if not r.is_dir():
            raise UserError(f"--runs {r}: no such directory")
    return UiConfig(
        proxy_header=settings.proxy_header, proxy_secret=settings.proxy_secret or None,
        argo_ca=settings.argo_ca, argo_insecure=settings.argo_insecure,
        gitops=gitops, branch=settings.branch or (platform.branch if platform else "main"),
        prometheus=prometheus or None, runs=runs,
        reports=pathlib.Path(settings.reports).expanduser() if settings.reports else None,
        models_root=pathlib.Path(settings.models_root) if settings.models_root else None,
        actions=settings.actions, token=settings.token or None, user=settings.user,
        proxy_user=settings.proxy_user, runtime=settings.runtime,
        readiness_namespace=settings.readiness_namespace,
        workdir=root if platform is not None else None,
        argo_server=settings.argo_server,
        argo_namespace=settings.argo_namespace or _pipeline(settings.settings).namespace,
        forge=forge)


def _pipeline(path: str | None) -> Any:
    """The pipeline's settings (`--settings FILE`, else the defaults): the namespace its
    Workflows run in, the pods' image pull secrets."""
    from workflows.settings import load_settings

    return load_settings(path)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gitops.git import redact
    from mlops.ui.app import create_app
    from mlops.ui.settings import LOOPBACK

    settings = settings_of(args)
    config = config_of(settings)
    if settings.loopback:
        config.allowed_hosts = [*LOOPBACK, "[::1]"]
    problem = settings.exposure_problem()
    if problem:
        raise UserError(problem)
    shown = f"GitOps {redact(config.gitops)}"
    if config.prometheus:
        shown += f", Prometheus {redact(config.prometheus)}"
    if config.token and not config.proxy_user:
        shown += f"; actions with the token sign as {config.user!r}"
    print(f"mlops ui: http://{settings.host}:{settings.port}/  ({shown})", flush=True)
    # Open event streams (pushed updates) end within a tick of Ctrl-C; do not wait longer.
    uvicorn.run(create_app(config), host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=2)
    return 0


def _manifests(args: argparse.Namespace) -> int:
    import yaml

    from mlops.ui.manifests import ARGO_CA_DIR, PROXY_HEADER, ui_manifests
    from mlops.ui.settings import UiSettings

    require_gitops(args)
    pipeline = _pipeline(args.settings)
    argo_namespace = args.argo_namespace or pipeline.namespace
    signs_as_token = args.enable_actions and args.token_secret and not args.proxy_user
    # The `mlops ui` the Deployment starts, checked as `mlops ui` checks its flags.
    settings = UiSettings.in_cluster({
        "gitops": args.gitops, "prometheus": args.prometheus or "", "runtime": "kubernetes",
        "port": args.port, "forge": args.forge, "argo_server": args.argo_server,
        "argo_namespace": argo_namespace if args.argo_server else None,
        "argo_ca": f"{ARGO_CA_DIR}/ca.crt" if args.argo_server and args.argo_ca_configmap
        else None,
        "argo_insecure": bool(args.argo_server and args.argo_insecure
                              and not args.argo_ca_configmap),
        "read_only": not args.enable_actions,
        "readiness_namespace": args.models_namespace if args.enable_actions else None,
        "by": args.token_identity if signs_as_token else None,
        "proxy_user": args.proxy_user,
        "proxy_header": PROXY_HEADER if args.proxy_user else None,
    }, flags={"by": "--token-identity"})
    docs = ui_manifests(gitops_url=args.gitops,
                        prometheus_url=args.prometheus, image=args.image,
                        namespace=args.namespace, port=settings.port,
                        actions=args.enable_actions, token_secret=args.token_secret,
                        proxy_user=args.proxy_user, proxy_image=args.proxy_image,
                        proxy_env_secret=args.proxy_env_secret, git_secret=args.git_secret or None,
                        argo_server=args.argo_server, argo_namespace=argo_namespace,
                        argo_secret=args.argo_secret, argo_ca_configmap=args.argo_ca_configmap,
                        argo_insecure=args.argo_insecure, forge=args.forge,
                        forge_secret=args.forge_secret, token_identity=args.token_identity,
                        image_pull_secrets=pipeline.image_pull_secrets,
                        models_namespace=args.models_namespace)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops ui` and `mlops ui manifests`."""
    p = subparsers.add_parser("ui", help="serve the web UI (models, runs, proposals) on loopback")
    p.add_argument("--workdir", metavar="DIR",
                   help="the local platform's work dir (default: $MLOPS_WORKDIR, ./.mlops, "
                        "~/.mlops): its GitOps repo and Prometheus")
    p.add_argument("--gitops", metavar="REPO",
                   help="GitOps repository (default: $MLOPS_GITOPS_REPO, else the platform's)")
    alias(p, "--repo", "gitops")
    p.add_argument("--branch", default=None)
    p.add_argument("--prometheus", default=None,
                   help="Prometheus URL for live rates (default: the platform's; '' for none)")
    p.add_argument("--runtime",
                   help="where the models run (local, kubernetes or none): the metrics preset "
                        "a canary policy that names none is read with, as `mlops controller "
                        "run` picks it "
                        "(local: haproxy, kubernetes: istio, none: model; default: local "
                        "with a platform work dir, else none). The models' namespace is the "
                        "GitOps repo's (mlops-gitops.yaml), as the controller reads it"),
    p.add_argument("--readiness-namespace", metavar="NS",
                   help="runtime kubernetes: where the serving Deployments run, read before "
                        "a rollback moves the traffic (default: mlops-gitops.yaml's namespace)")
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="a run's --out dir or a runs dir of the post-receive hook (repeatable)")
    p.add_argument("--argo-server", metavar="URL",
                   help="in a cluster: runs from this Argo Server (token: $ARGO_TOKEN)")
    p.add_argument("--argo-namespace", default=None,
                   help="the Workflows' namespace (default: the --settings file's namespace, "
                        "else mlops)")
    p.add_argument("--argo-ca", metavar="FILE",
                   help="CA bundle (PEM) that signed the Argo Server's certificate")
    p.add_argument("--argo-insecure", action="store_true",
                   help="do not check the Argo Server's TLS certificate")
    alias(p, "--insecure", "argo_insecure", action="store_true")
    p.add_argument("--settings", help="the pipeline's settings file (its namespace)")
    forge_options(p, env=False)  # UiSettings reads $MLOPS_FORGE* (mlops.ui.settings)
    p.add_argument("--reports", metavar="DIR",
                   help="the controller's work dir (its rollouts/*/*/report.md and .png)")
    p.add_argument("--models-root",
                   help="the models volume, for Rollback (as `mlops rollback --models-root`; "
                        "default: $MLOPS_MODELS)")
    p.add_argument("--host", help="address to bind (default: loopback, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8765)")
    p.add_argument("--by", help="who the buttons act as (default: the current user); with "
                                "--token, the token's identity: every action signs as it")
    p.add_argument("--token",
                   help="actions need this bearer token (default: $MLOPS_UI_TOKEN); they "
                        "sign as --by, whatever a request says")
    p.add_argument("--read-only", action="store_true", help="no buttons, every POST refused")
    p.add_argument("--proxy-user", action="store_true",
                   help="take the person from the auth proxy's header (--proxy-header); "
                        "beyond loopback only with --proxy-secret")
    p.add_argument("--proxy-header",
                   help="the one header that names the person (default: X-Forwarded-User, "
                        "as oauth2-proxy sets it)")
    p.add_argument("--proxy-secret",
                   help="the proxy proves itself with this in X-Mlops-Proxy-Secret "
                        "(default: $MLOPS_UI_PROXY_SECRET)")
    p.set_defaults(func=_serve)
    sub = p.add_subparsers(dest="ui_command", metavar="ACTION")
    man = sub.add_parser("manifests", help="print the UI's Deployment and Service for a cluster")
    man.add_argument("--gitops", metavar="REPO",
                     help="GitOps repository URL (as pods see it; required)")
    alias(man, "--repo", "gitops")
    man.add_argument("--prometheus", help="Prometheus URL (as pods see it)")
    man.add_argument("--image", default="registry.example.com/mlops/controller:0.1.0")
    man.add_argument("--namespace", default="mlops")
    man.add_argument("--port", type=int, help="port the UI listens on (default 8765)")
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
    alias(man, "--insecure", "argo_insecure", action="store_true")
    man.add_argument("--settings", help="the pipeline's settings file (namespace of the "
                                        "Workflows, image_pull_secrets)")
    man.add_argument("--models-namespace", default="models",
                     help="where the serving Deployments run: with --enable-actions the UI may "
                          "read them there, so a rollback moves the traffic only once the "
                          "version is ready (as mlops-gitops.yaml's namespace)")
    man.set_defaults(func=_manifests)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(1)
