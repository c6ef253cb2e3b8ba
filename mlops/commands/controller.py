"""`mlops controller run`: the promotion controller as a long-running process.

Glue only: builds the metric source (Prometheus with a preset, or each
model's own preset from its `canary-policy.yaml`), the webhook notifier, the
optional Argo CD refresher and the PR commenter, then runs
`promotion.controller.Controller` until SIGTERM/SIGINT (or one pass with
`--once`). All state is in the GitOps repo; `--workdir` holds only caches, the
timelines and the canary reports, and may be deleted between runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import yaml

from contracts.names import model_name_problem
from mlops.errors import UserError

if TYPE_CHECKING:
    from promotion.controller import Controller
    from promotion.decision.policy import CanaryPolicy
    from promotion.metrics.prometheus import PrometheusSource


def _sources(url: str, preset: str | None, default: str = "model") -> Any:
    # lazy (import cost): `mlops --help` does not load it
    from promotion.metrics.presets import QueryPreset
    from promotion.metrics.prometheus import PrometheusSource

    cache: dict[tuple[str, str | None], PrometheusSource] = {}

    def source_for(policy: CanaryPolicy) -> PrometheusSource:
        name = preset or policy.metrics.preset or default
        key = (name, policy.metrics.namespace)
        if key not in cache:
            if name == "custom":
                chosen: Any = QueryPreset.from_mapping("custom", policy.metrics.queries or {})
            else:
                chosen = name
            cache[key] = PrometheusSource(
                url, chosen, namespace=policy.metrics.namespace or "default"
            )
        return cache[key]

    return source_for


def _commenter(args: argparse.Namespace) -> Any:
    # lazy (import cost): `mlops --help` does not load it
    from gitops.forges.registry import for_gitops
    from promotion.gitrepo.propose import branch_name

    if not args.forge:
        return None

    forge = for_gitops(args.forge, args.gitops, args.forge_url, args.forge_repo)

    def comment(model: str, candidate: str, body: str) -> None:
        pr = forge.find_pr(branch_name(model, candidate))
        if pr is not None:
            forge.comment(pr.number, body)

    return comment


def _runtime(args: argparse.Namespace) -> str:
    """Where the models run, as `--readiness` says (`local`, `kubernetes` or `none`)."""
    workdir = args.platform_workdir or os.environ.get("MLOPS_WORKDIR")
    return str(args.readiness or ("local" if workdir else "none"))


def readiness_from_args(args: argparse.Namespace) -> Any:
    """Who tells whether a version is deployed and ready (`promotion.cluster.readiness`), as
    `--readiness`, `--readiness-namespace` and `--platform-workdir` say (`mlops rollback`
    asks the same)."""
    # lazy (import cost): `mlops --help` does not load it
    from local.platform.workdir import Workdir
    from promotion.cluster.readiness import KubernetesReadiness

    workdir = args.platform_workdir or os.environ.get("MLOPS_WORKDIR")
    choice = _runtime(args)
    if choice == "none":
        return None
    if choice == "kubernetes":
        return KubernetesReadiness(args.readiness_namespace)
    if not workdir:
        raise UserError("--readiness local needs the platform's work dir "
                        "(--platform-workdir DIR or $MLOPS_WORKDIR)")
    # lazy (import cost): `mlops --help` does not load it
    from local.platform.readiness import PlatformReadiness

    return PlatformReadiness(Workdir(pathlib.Path(workdir)))


def _prober(args: argparse.Namespace, readiness: Any) -> Any:
    """Who asks stable and canary the same probe images (`promotion/metrics/probe.py`): through
    the local platform's HAProxy, or the model's Service in the cluster (the header
    match of its VirtualService needs the controller's pod in the mesh), or a template."""
    # lazy (import cost): `mlops --help` does not load it
    from promotion.metrics.probe import HttpProbe

    template = args.probe_url
    if template == "off":
        return None
    if template:
        if "{model}" not in template:
            raise UserError(f"--probe-url {template!r}: write the router's address with "
                            "{model}, e.g. http://{model}.models.svc.cluster.local:8080")
        return HttpProbe(lambda model: template.format(model=model))
    runtime = _runtime(args)
    if runtime == "local":
        return HttpProbe(readiness.router_url)
    if runtime == "kubernetes":
        namespace = args.readiness_namespace
        return HttpProbe(lambda model: f"http://{model}.{namespace}.svc.cluster.local:8080")
    return None


def build(args: argparse.Namespace) -> Controller:
    """The controller the arguments describe (tests build it the same way)."""
    # lazy (import cost): `mlops --help` does not load it
    from promotion.controller import Controller, ControllerConfig
    from promotion.controller_metrics import ControllerMetrics
    from promotion.metrics.presets import get_preset
    from promotion.reports.notify import Notifier

    if args.preset:
        get_preset(args.preset)  # an unknown name fails here, listing the choices
    notifier = None
    webhook = args.webhook or os.environ.get("MLOPS_WEBHOOK_URL")  # a secret: env, not argv
    if webhook:
        notifier = Notifier(webhook)
    refresher = None
    if args.argocd_namespace:
        # lazy (import cost): `mlops --help` does not load it
        from promotion.cluster.argocd import ArgoRefresher

        refresher = ArgoRefresher(args.argocd_namespace, host=args.kube_api)
    config = ControllerConfig(
        repo=args.gitops, workdir=pathlib.Path(args.workdir), branch=args.branch,
        interval=args.interval, settle=args.settle, on_rollback=args.on_rollback,
        checkpoint_every=args.checkpoint_every, report_url=args.report_url,
        git_poll=args.git_poll, workers=args.workers,
    )
    # lazy (import cost): `mlops --help` does not load it. One table for the controller
    # and `mlops ui`: the preset a policy that names none reads with, by runtime.
    from promotion.metrics.live import RUNTIME_PRESETS

    default = RUNTIME_PRESETS.get(_runtime(args), "model")
    logging.getLogger("mlops.controller").info(
        "metrics preset: %s", args.preset or f"each model's, or {default} (the runtime's default)")
    readiness = readiness_from_args(args)
    return Controller(config, _sources(args.prometheus, args.preset, default),
                      metrics=ControllerMetrics(),
                      notifier=notifier, refresher=refresher, commenter=_commenter(args),
                      readiness=readiness, prober=_prober(args, readiness))


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    controller = build(args)
    if args.metrics_port is not None:
        port = controller.metrics.serve(args.metrics_port, args.metrics_addr)
        logging.getLogger("mlops.controller").info("metrics on http://%s:%d/metrics",
                                                    args.metrics_addr, port)
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
            controller.run(stop, poll=args.poll)
    finally:
        controller.metrics.close()
        controller.close()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops controller run`."""
    parser = subparsers.add_parser("controller", help="the promotion controller")
    sub = parser.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="analyse canaries and commit every decision")
    run.add_argument("--gitops", default=os.environ.get("MLOPS_GITOPS_REPO"),
                     required=not os.environ.get("MLOPS_GITOPS_REPO"),
                     help="GitOps repository (path or URL; default: $MLOPS_GITOPS_REPO)")
    run.add_argument("--prometheus", required=True, help="Prometheus base URL")
    run.add_argument("--preset", choices=None,
                     help="metric preset for every model (haproxy|istio|model); default: "
                          "each model's canary-policy.yaml, else the runtime's router view "
                          "(haproxy with --readiness local, istio with kubernetes)")
    run.add_argument("--branch", default="main")
    run.add_argument("--interval", type=float, default=None,
                     help="analysis window in seconds for every model (default: the policy's)")
    run.add_argument("--poll", type=float, default=1.0, help="seconds between passes")
    run.add_argument("--git-poll", type=float, default=0.0,
                     help="fetch the GitOps repo at most every SECONDS (default 0: every pass; "
                          "a remote forge: 15, no more than the canary interval)")
    run.add_argument("--settle", type=float, default=0.0,
                     help="seconds to wait after a window ends before reading it (scrape lag)")
    run.add_argument("--workers", type=int, default=1, metavar="N",
                     help="models analysed at once in a pass, their decisions pushed together "
                          "(a fleet: 8; default 1, one model after the other)")
    run.add_argument("--once", action="store_true", help="one pass, then exit")
    run.add_argument("--workdir", default="mlops-controller",
                     help="caches, timelines and canary reports (default: ./mlops-controller)")
    run.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    run.add_argument("--metrics-addr", default="127.0.0.1")
    run.add_argument("--webhook", help="Slack-compatible webhook URL for step/promote/rollback "
                                       "(default: $MLOPS_WEBHOOK_URL; prefer the variable: the "
                                       "URL is a secret, and argv is readable by every user)")
    run.add_argument("--readiness", choices=["kubernetes", "local", "none"], default=None,
                     help="who says a merged candidate is deployed and ready before it gets "
                          "traffic: the Kubernetes API, the local platform's status, or nobody "
                          "(default: local when a platform work dir is known, else none)")
    run.add_argument("--readiness-namespace", default="models",
                     help="namespace of the serving Deployments (--readiness kubernetes)")
    run.add_argument("--platform-workdir",
                     help="the local platform's work dir (--readiness local; "
                          "default: $MLOPS_WORKDIR)")
    run.add_argument("--probe-url", default=None,
                     help="the router's address for the paired answers probe, with {model} "
                          "(default: the platform's HAProxy with --readiness local, "
                          "http://{model}.<namespace>.svc.cluster.local:8080 with kubernetes; "
                          "'off': no probe, the answers check is skipped)")
    run.add_argument("--on-rollback", choices=["remove", "scale-to-zero"], default="remove",
                     help="what happens to a rolled-back candidate's Deployment")
    run.add_argument("--checkpoint-every", type=int, default=0,
                     help="commit a hold after this many uncommitted intervals (0: never)")
    run.add_argument("--argocd-namespace",
                     help="in a cluster: refresh the Argo CD Application after a rollback")
    run.add_argument("--kube-api", help="Kubernetes API URL (default: in-cluster or kubeconfig)")
    run.add_argument("--forge", help="forge for PR comments (local|github|gitlab|gitea)")
    run.add_argument("--forge-url", help="forge API URL (hosted forges)")
    run.add_argument("--forge-repo", help="owner/name of the GitOps repo on a hosted forge")
    run.add_argument("--report-url", help="base URL where the work dir's rollouts/ is published")
    run.add_argument("--log-level", default="info")
    run.set_defaults(func=_run)

    man = sub.add_parser("manifests", help="print the controller's Deployment, ServiceAccount "
                                            "and RBAC for a cluster")
    man.add_argument("--gitops", required=True, help="GitOps repository URL (as pods see it)")
    man.add_argument("--prometheus", required=True, help="Prometheus URL (as pods see it)")
    man.add_argument("--image", default="registry.example.com/mlops/controller:0.1.0")
    man.add_argument("--namespace", default="mlops")
    man.add_argument("--argocd-namespace", default="argocd")
    man.add_argument("--models-namespace", default="models",
                     help="where the serving Deployments run (readiness is read there)")
    man.add_argument("--preset")
    man.add_argument("--git-secret", default="mlops-gitops-token",
                     help="Secret with key 'token' for pushing decision commits")
    man.add_argument("--webhook-secret", help="Secret with key 'url' for notifications")
    man.add_argument("--forge", choices=["github", "gitlab", "gitea"],
                     help="comment each rollout's outcome on its pull request there")
    man.add_argument("--forge-secret", default="mlops-forge",
                     help="Secret with key 'token' for the forge's API (with --forge)")
    man.add_argument("--forge-repo", help="owner/name of the GitOps repo on the forge "
                                          "(default: from --gitops)")
    man.add_argument("--forge-url", help="the forge's API root (default: from --gitops)")
    man.add_argument("--reports-claim", default="mlops-controller",
                     help="PersistentVolumeClaim (made with the manifests) that keeps the canary "
                          "reports across restarts; '' for an emptyDir")
    man.add_argument("--git-poll", type=float, default=15.0,
                     help="seconds between fetches of the GitOps repo (default 15)")
    man.add_argument("--workers", type=_positive, default=8, metavar="N",
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


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: at least 1")
    return number


def _application_name(value: str) -> str:
    problem = model_name_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _manifests(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it
    from promotion.cluster.deploy import controller_manifests

    applications = list(args.application)
    if args.applications_from:
        # lazy (import cost): `mlops --help` does not load it
        from promotion.cluster.applications import applications_in

        applications += applications_in(args.applications_from)
    pull = list(args.image_pull_secret)
    if args.settings:
        # lazy (import cost): `mlops --help` does not load it
        from workflows.settings import load_settings

        pull = [*load_settings(args.settings).image_pull_secrets, *pull]
    docs = controller_manifests(
        gitops_url=args.gitops, prometheus_url=args.prometheus, image=args.image,
        namespace=args.namespace, argocd_namespace=args.argocd_namespace, preset=args.preset,
        git_secret=args.git_secret, webhook_secret=args.webhook_secret, forge=args.forge,
        forge_repo=args.forge_repo, forge_url=args.forge_url, forge_secret=args.forge_secret,
        models_namespace=args.models_namespace, reports_claim=args.reports_claim or None,
        image_pull_secrets=list(dict.fromkeys(pull)), git_poll=args.git_poll,
        applications=list(dict.fromkeys(applications)), workers=args.workers)
    if not applications:
        print("note: no --application given: the controller will not ask Argo CD to refresh, "
              "so a rollback waits for Argo CD's poll (3 min by default); pass "
              "--application MODEL for each model to grant exactly those", file=sys.stderr)
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0
