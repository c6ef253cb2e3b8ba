"""`mlops controller run` and `controller manifests`: the promotion controller as a process,
and the Deployment that runs it in a cluster.

Glue only: the flags become `promotion.controller_settings.ControllerSettings`
(defaults, bounds, environment fallbacks and the preset rule live there, for
both commands), from which this module builds the metric source, the webhook
notifier, the optional Argo CD refresher, the PR commenter, the readiness
check and the answers probe, then runs `promotion.controller.Controller` until
SIGTERM/SIGINT (or one pass with `--once`). All state is in the GitOps repo;
`--workdir` holds only caches, the timelines and the canary reports, and may
be deleted between runs.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import yaml

from contracts.names import model_name_problem
from mlops.commands._options import FORGES, alias, forge_options
from mlops.errors import UserError

if TYPE_CHECKING:
    from promotion.controller import Controller
    from promotion.controller_settings import ControllerSettings
    from promotion.decision.policy import CanaryPolicy
    from promotion.metrics.prometheus import PrometheusSource


def settings_of(args: argparse.Namespace) -> ControllerSettings:
    """`controller run`'s settings: the flags given, the rest from the environment or the
    defaults (`ControllerSettings.from_options`)."""
    from promotion.controller_settings import ControllerSettings

    return ControllerSettings.from_options(
        {name: value for name, value in vars(args).items()
         if name in ControllerSettings.model_fields})


def _sources(settings: ControllerSettings) -> Any:
    from promotion.metrics.presets import QueryPreset
    from promotion.metrics.prometheus import PrometheusSource

    cache: dict[tuple[str, str | None], PrometheusSource] = {}

    def source_for(policy: CanaryPolicy) -> PrometheusSource:
        name = settings.preset_for(policy)
        key = (name, policy.metrics.namespace)
        if key not in cache:
            if name == "custom":
                chosen: Any = QueryPreset.from_mapping("custom", policy.metrics.queries or {})
            else:
                chosen = name
            cache[key] = PrometheusSource(
                settings.prometheus, chosen, namespace=policy.metrics.namespace or "default"
            )
        return cache[key]

    return source_for


def _commenter(settings: ControllerSettings) -> Any:
    from gitops.forges.registry import for_gitops
    from promotion.gitrepo.propose import branch_name

    if not settings.forge:
        return None

    forge = for_gitops(settings.forge, settings.gitops, settings.forge_api, settings.forge_repo,
                       api_flag="--forge-api")

    def comment(model: str, candidate: str, body: str) -> None:
        pr = forge.find_pr(branch_name(model, candidate))
        if pr is not None:
            forge.comment(pr.number, body)

    return comment


def _readiness(runtime: str, namespace: str, workdir: str | None) -> Any:
    """Who tells whether a version is deployed and ready (`mlops.ui.settings.readiness_for`:
    the UI's rollback button asks the same)."""
    from mlops.ui.settings import readiness_for

    return readiness_for(runtime, namespace, workdir)


def readiness_from_args(args: argparse.Namespace) -> tuple[str, Any]:
    """(the runtime, who tells readiness) from `--readiness`, `--readiness-namespace` and
    `--platform-workdir` or $MLOPS_WORKDIR, by the controller's rule
    (`ControllerSettings.runtime`): `mlops rollback` asks the same."""
    workdir = args.platform_workdir
    runtime = args.readiness or ("local" if workdir else "none")
    if runtime == "local" and not workdir:
        raise UserError("--readiness local needs the platform's work dir "
                        "(--platform-workdir DIR or $MLOPS_WORKDIR)")
    return runtime, _readiness(runtime, args.readiness_namespace, workdir)


def _prober(settings: ControllerSettings, readiness: Any) -> Any:
    """Who asks stable and canary the same probe images (`promotion/metrics/probe.py`): through
    the local platform's HAProxy, or the model's Service in the cluster (the header
    match of its VirtualService needs the controller's pod in the mesh), or a template."""
    from promotion.metrics.probe import HttpProbe

    template = settings.probe_url
    if template == "off":
        return None
    if template:
        return HttpProbe(lambda model: template.format(model=model))
    if settings.runtime == "local":
        return HttpProbe(readiness.router_url)
    if settings.runtime == "kubernetes":
        namespace = settings.readiness_namespace
        return HttpProbe(lambda model: f"http://{model}.{namespace}.svc.cluster.local:8080")
    return None


def build(settings: ControllerSettings) -> Controller:
    """The controller the settings describe (tests build it the same way)."""
    from promotion.controller import Controller
    from promotion.controller_metrics import ControllerMetrics
    from promotion.reports.notify import Notifier

    notifier = Notifier(settings.webhook) if settings.webhook else None
    refresher = None
    if settings.argocd_namespace:
        from promotion.cluster.argocd import ArgoRefresher

        refresher = ArgoRefresher(settings.argocd_namespace, host=settings.kube_api)
    logging.getLogger("mlops.controller").info("metrics preset: %s", settings.describe_preset())
    readiness = _readiness(settings.runtime, settings.readiness_namespace,
                           settings.platform_workdir)
    return Controller(settings.controller_config(), _sources(settings),
                      metrics=ControllerMetrics(),
                      notifier=notifier, refresher=refresher, commenter=_commenter(settings),
                      readiness=readiness, prober=_prober(settings, readiness))


def _run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    logging.basicConfig(level=settings.logging_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    controller = build(settings)
    if settings.metrics_port is not None:
        port = controller.metrics.serve(settings.metrics_port, settings.metrics_addr)
        logging.getLogger("mlops.controller").info("metrics on http://%s:%d/metrics",
                                                    settings.metrics_addr, port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if args.once:
            outcomes = controller.tick()
            if controller.last_error is not None:
                raise UserError(f"cannot read the GitOps repo: {controller.last_error}")
            for outcome in outcomes:
                print(f"{outcome.model}: {outcome.kind}/{outcome.cause}: {outcome.reason}"
                      + (f" [{outcome.committed[:12]}] {outcome.subject}"
                         if outcome.committed else ""))
        else:
            controller.run(stop, poll=settings.poll)
    finally:
        controller.metrics.close()
        controller.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops controller run` and `mlops controller manifests`. Defaults, bounds and
    environment fallbacks are the settings' (`promotion.controller_settings`): an option
    left out is None here, and its help says what the settings make of it."""
    parser = subparsers.add_parser("controller", help="the promotion controller")
    sub = parser.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="analyse canaries and commit every decision")
    run.add_argument("--gitops", metavar="REPO",
                     help="GitOps repository (path or URL; default: $MLOPS_GITOPS_REPO)")
    alias(run, "--repo", "gitops")
    run.add_argument("--prometheus", required=True, help="Prometheus base URL")
    run.add_argument("--preset",
                     help="metric preset for every model (haproxy|istio|model); default: "
                          "each model's canary-policy.yaml, else the runtime's router view "
                          "(haproxy with --readiness local, istio with kubernetes)")
    run.add_argument("--branch", help="the GitOps repo's branch (default: main)")
    run.add_argument("--interval", type=float,
                     help="analysis window in seconds for every model (default: the policy's)")
    run.add_argument("--poll", type=float, help="seconds between passes (default 1)")
    run.add_argument("--git-poll", type=float,
                     help="fetch the GitOps repo at most every SECONDS (default 0: every pass; "
                          "a remote forge: 15, no more than the canary interval)")
    run.add_argument("--settle", type=float,
                     help="seconds to wait after a window ends before reading it (scrape lag; "
                          "default 0)")
    run.add_argument("--workers", type=int, metavar="N",
                     help="models analysed at once in a pass, their decisions pushed together "
                          "(a fleet: 8; default 1, one model after the other)")
    run.add_argument("--once", action="store_true", help="one pass, then exit")
    run.add_argument("--workdir",
                     help="caches, timelines and canary reports (default: ./mlops-controller)")
    run.add_argument("--metrics-port", type=int, help="serve /metrics on this port")
    run.add_argument("--metrics-addr", help="address /metrics listens on (default: 127.0.0.1)")
    run.add_argument("--webhook", help="Slack-compatible webhook URL for step/promote/rollback "
                                       "(default: $MLOPS_WEBHOOK_URL; prefer the variable: the "
                                       "URL is a secret, and argv is readable by every user)")
    run.add_argument("--readiness",
                     help="who says a merged candidate is deployed and ready before it gets "
                          "traffic: kubernetes (the API), local (the local platform's status) "
                          "or none (default: local when a platform work dir is known, else "
                          "none)")
    run.add_argument("--readiness-namespace",
                     help="namespace of the serving Deployments (--readiness kubernetes; "
                          "default: models)")
    run.add_argument("--platform-workdir",
                     help="the local platform's work dir (--readiness local; "
                          "default: $MLOPS_WORKDIR)")
    run.add_argument("--probe-url",
                     help="the router's address for the paired answers probe, with {model} "
                          "(default: the platform's HAProxy with --readiness local, "
                          "http://{model}.<namespace>.svc.cluster.local:8080 with kubernetes; "
                          "'off': no probe, the answers check is skipped)")
    run.add_argument("--on-rollback",
                     help="what happens to a rolled-back candidate's Deployment: remove "
                          "(default) or scale-to-zero")
    run.add_argument("--checkpoint-every", type=int,
                     help="commit a hold after this many uncommitted intervals (0: never)")
    run.add_argument("--argocd-namespace",
                     help="in a cluster: refresh the Argo CD Application after a rollback")
    run.add_argument("--kube-api", help="Kubernetes API URL (default: in-cluster or kubeconfig)")
    forge_options(run, env=False, help="comment each rollout's outcome on its pull request "
                                       "there: local, github, gitlab or gitea (default: none, "
                                       "no comments)")
    run.add_argument("--report-url", help="base URL where the work dir's rollouts/ is published")
    run.add_argument("--log-level", help="debug, info (default), warning or error")
    run.set_defaults(func=_run)

    man = sub.add_parser("manifests", help="print the controller's Deployment, ServiceAccount "
                                            "and RBAC for a cluster")
    man.add_argument("--gitops", metavar="REPO",
                     help="GitOps repository URL (as pods see it; required)")
    alias(man, "--repo", "gitops")
    man.add_argument("--prometheus", required=True, help="Prometheus URL (as pods see it)")
    man.add_argument("--image", default="registry.example.com/mlops/controller:0.1.0")
    man.add_argument("--namespace", default="mlops")
    man.add_argument("--argocd-namespace", default="argocd")
    man.add_argument("--models-namespace", default="models",
                     help="where the serving Deployments run (readiness is read there)")
    man.add_argument("--preset", help="metric preset for every model, as `controller run "
                                      "--preset` (default: each model's, else istio)")
    man.add_argument("--git-secret", default="mlops-gitops-token",
                     help="Secret with key 'token' for pushing decision commits")
    man.add_argument("--webhook-secret", help="Secret with key 'url' for notifications")
    forge_options(man, env=False, choices=FORGES[1:],
                  help="comment each rollout's outcome on its pull request there: github, "
                       "gitlab or gitea")
    man.add_argument("--forge-secret", default="mlops-forge",
                     help="Secret with key 'token' for the forge's API (with --forge)")
    man.add_argument("--reports-claim", default="mlops-controller",
                     help="PersistentVolumeClaim (made with the manifests) that keeps the canary "
                          "reports across restarts; '' for an emptyDir")
    man.add_argument("--git-poll", type=float,
                     help="seconds between fetches of the GitOps repo (default 15)")
    man.add_argument("--workers", type=int, metavar="N",
                     help="models the controller analyses at once in a pass (default 8; "
                          "see `controller run --workers`)")
    man.add_argument("--settings", help="the pipeline's settings file (image_pull_secrets)")
    man.add_argument("--image-pull-secret", action="append", default=[], metavar="NAME",
                     help="imagePullSecrets of the controller's pod (repeatable; added to "
                          "the settings file's image_pull_secrets)")
    man.add_argument("--application", action="append", default=[], metavar="MODEL",
                     type=_application_name,
                     help="an Argo CD Application (named after its model) the controller may "
                          "refresh after each decision (repeatable); none: no refresh, and a "
                          "rollback waits for Argo CD's poll")
    man.add_argument("--applications-from", metavar="REPO",
                     help="add one --application per model folder under apps/ on main of this "
                          "GitOps repo (path or URL as this machine sees it): re-render when "
                          "models are added")
    man.set_defaults(func=_manifests)


def _application_name(value: str) -> str:
    problem = model_name_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _manifests(args: argparse.Namespace) -> int:
    from promotion.cluster.deploy import controller_manifests
    from promotion.controller_settings import ControllerSettings

    applications = list(args.application)
    if args.applications_from:
        from promotion.cluster.applications import applications_in

        applications += applications_in(args.applications_from)
    # The process the Deployment starts, checked as `controller run` checks it.
    settings = ControllerSettings.in_cluster({
        "gitops": args.gitops, "prometheus": args.prometheus, "preset": args.preset,
        "git_poll": args.git_poll, "workers": args.workers, "forge": args.forge,
        "forge_repo": args.forge_repo, "forge_api": args.forge_api,
        "readiness_namespace": args.models_namespace,
        # asked to refresh only the Applications it is granted (none: no refresh)
        "argocd_namespace": args.argocd_namespace if applications else None})
    pull = list(args.image_pull_secret)
    if args.settings:
        from workflows.settings import load_settings

        pull = [*load_settings(args.settings).image_pull_secrets, *pull]
    docs = controller_manifests(
        gitops_url=settings.gitops, prometheus_url=settings.prometheus, image=args.image,
        namespace=args.namespace, argocd_namespace=args.argocd_namespace,
        preset=settings.preset, git_secret=args.git_secret, webhook_secret=args.webhook_secret,
        forge=settings.forge, forge_repo=settings.forge_repo, forge_url=settings.forge_api,
        forge_secret=args.forge_secret, models_namespace=settings.readiness_namespace,
        reports_claim=args.reports_claim or None, image_pull_secrets=list(dict.fromkeys(pull)),
        git_poll=settings.git_poll, applications=list(dict.fromkeys(applications)),
        workers=settings.workers)
    if not applications:
        print("note: no --application given: the controller will not ask Argo CD to refresh, "
              "so a rollback waits for Argo CD's poll (3 min by default); pass "
              "--application MODEL for each model to grant exactly those", file=sys.stderr)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0
