"""Cross-file rules of a GitOps repository: what no single schema can see.

Each file may be valid on its own (the schemas check that, in
`mlops gitops lint`) while the repository as a whole cannot work: a route
to a subset without a Deployment, a `promotion.yaml` that disagrees with the
VirtualService, queries in a namespace the models are not deployed to, an
analysis window shorter than the data Prometheus has. Every problem names
the file and what to change. Reads a checked-out tree; writes nothing.
"""

from __future__ import annotations

import pathlib
from typing import Any

from contracts.names import model_name_problem
from contracts.traffic import MESH_GATEWAY
from gitops import layout, yamlio
from gitops.errors import GitOpsError
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.errors import PolicyError, StateError
from promotion.gitrepo import apply
from promotion.gitrepo.platform_policy import load_platform_policy
from promotion.gitrepo.production import current_state
from serving.manifests import deployment_name

__all__ = ["lint_tree", "policy_problems"]

#: kube-prometheus-stack's `scrape_interval` (30s); Prometheus' own default is 1m.
DEFAULT_SCRAPE_INTERVAL = 30.0


def policy_problems(policy: CanaryPolicy, where: str, *, namespace: str,
                    scrape_interval: float) -> list[str]:
    """A policy that validates but cannot work in this repo's cluster (pure)."""
    problems = []
    if policy.metrics.namespace is not None and policy.metrics.namespace != namespace:
        problems.append(
            f"{where}: metrics.namespace {policy.metrics.namespace!r} is not the namespace the "
            f"models are deployed to ({namespace!r}, mlops-gitops.yaml): its queries match no "
            "series; remove it (the repo's namespace is the default)")
    if policy.interval < 2 * scrape_interval:
        problems.append(
            f"{where}: interval {policy.interval:g}s is shorter than two Prometheus scrape "
            f"intervals ({scrape_interval:g}s each): some windows hold no new sample; use "
            f"interval >= {2 * scrape_interval:g}s")
    return problems


def _weights(doc: dict[str, Any] | None) -> list[tuple[str, int]]:
    routes = ((doc or {}).get("spec") or {}).get("http") or []
    found = []
    for route in routes:
        for dest in route.get("route") or []:
            subset = (dest.get("destination") or {}).get("subset")
            found.append((str(subset), int(dest.get("weight") or 0)))
    return found


def _model(root: pathlib.Path, model: str, config: layout.RepoConfig,
           scrape_interval: float) -> list[str]:
    where = f"{layout.APPS}/{model}"
    problem = model_name_problem(model)
    if problem:
        return [f"{where}: {problem}"]
    try:
        folder = layout.read_model(root, model)
    except GitOpsError as exc:
        return [f"{where}: {exc}"]
    problems: list[str] = []
    versions = set(folder.deployments)
    for version, doc in folder.deployments.items():
        labels = (doc.get("metadata") or {}).get("labels") or {}
        if labels.get("app") != model or labels.get("version") != version:
            problems.append(f"{where}/deployment-{version}.yaml: labels app/version must be "
                            f"{model}/{version}, found {labels.get('app')}/{labels.get('version')}")
        if (doc.get("metadata") or {}).get("name") != deployment_name(model, version):
            problems.append(f"{where}/deployment-{version}.yaml: metadata.name must be "
                            f"{deployment_name(model, version)}")
    subsets: dict[str, str] = {}
    if folder.destination_rule is None or folder.virtual_service is None:
        problems.append(f"{where}: needs destinationrule.yaml and virtualservice.yaml")
    else:
        for subset in (folder.destination_rule.get("spec") or {}).get("subsets") or []:
            selected = (subset.get("labels") or {}).get("version")
            subsets[str(subset.get("name"))] = str(selected)
            if selected not in versions:
                problems.append(f"{where}/destinationrule.yaml: subset {subset.get('name')!r} "
                                f"selects version {selected!r}, which has no Deployment")
        routes = _weights(folder.virtual_service)
        for subset, weight in routes:
            if subset not in subsets:
                problems.append(f"{where}/virtualservice.yaml: routes to subset {subset!r}, "
                                "which destinationrule.yaml does not define")
        if routes and sum(w for _, w in routes) != 100:
            problems.append(f"{where}/virtualservice.yaml: weights sum to "
                            f"{sum(w for _, w in routes)}, not 100")
        gateways = (folder.virtual_service.get("spec") or {}).get("gateways") or []
        if gateways and MESH_GATEWAY not in gateways:
            # istio pilot/pkg/model/push_context.go getGatewayNames: the mesh is implied only
            # by an empty list
            problems.append(
                f"{where}/virtualservice.yaml: gateways {gateways} leave out {MESH_GATEWAY!r}: "
                "the routes bind to those Gateways alone, and callers in the mesh (the "
                "controller's probe among them) lose the split; list "
                f"[{MESH_GATEWAY}, {', '.join(gateways)}]")
    listed = set(((folder.kustomization or {}).get("resources")) or [])
    if folder.kustomization is None:
        problems.append(f"{where}: kustomization.yaml is missing")
    else:
        for entry in sorted(listed):
            if "/" not in entry and not (root / where / entry).is_file():
                problems.append(f"{where}/kustomization.yaml: resource {entry} does not exist")
        present = {p.name for p in (root / where).glob("*.yaml")
                   if p.name not in (layout.KUSTOMIZATION, layout.PROMOTION, apply.POLICY_FILE)}
        for name in sorted(present - listed):
            problems.append(f"{where}/{name}: not listed in kustomization.yaml, so Argo CD "
                            "never applies it")
    try:
        state = current_state(folder)
    except StateError as exc:
        problems.append(str(exc))
        state = None
    if state is not None:
        for role, named in (("stable", state.stable), ("candidate", state.candidate)):
            if named is not None and (state.phase.active or role == "stable") \
                    and named not in versions:
                problems.append(f"{where}/promotion.yaml: {role} {named!r} has no Deployment")
        if state.phase.active and state.candidate and state.stable and subsets:
            live = folder.weights()
            if live.get(state.candidate, 0) != state.weight:
                problems.append(
                    f"{where}/promotion.yaml: weight {state.weight} but virtualservice.yaml "
                    f"gives {state.candidate} {live.get(state.candidate, 0)}%")
    raw = folder.extra.get(apply.POLICY_FILE)
    if raw is not None:
        try:
            policy = load_policy(raw if isinstance(raw, dict) else {},
                                 f"{where}/{apply.POLICY_FILE}")
        except PolicyError as exc:
            problems.append(str(exc))
        else:
            problems += policy_problems(policy, f"{where}/{apply.POLICY_FILE}",
                                        namespace=config.namespace,
                                        scrape_interval=scrape_interval)
    app = root / layout.ARGOCD / f"{model}.yaml"
    if not app.is_file():
        problems.append(f"{layout.ARGOCD}/{model}.yaml is missing: Argo CD never deploys {model}")
    return problems


def _application(root: pathlib.Path, path: pathlib.Path, config: layout.RepoConfig) -> list[str]:
    where = f"{layout.ARGOCD}/{path.name}"
    try:
        doc = yamlio.load_one(path, where)
    except GitOpsError as exc:
        return [str(exc)]
    model = path.stem
    spec = (doc or {}).get("spec") or {}
    source, dest = spec.get("source") or {}, spec.get("destination") or {}
    problems = []
    want = {"source.repoURL": (source.get("repoURL"), config.repo_url),
            "source.path": (source.get("path"), f"{layout.APPS}/{model}"),
            "source.targetRevision": (source.get("targetRevision"), config.target_revision),
            "destination.namespace": (dest.get("namespace"), config.namespace)}
    for field, (have, wanted) in want.items():
        if have != wanted:
            problems.append(f"{where}: spec.{field} is {have!r}; mlops-gitops.yaml says "
                            f"{wanted!r}")
    if not (root / layout.APPS / model).is_dir():
        problems.append(f"{where}: no {layout.APPS}/{model}/ folder for this Application")
    return problems


def lint_tree(root: pathlib.Path, *, scrape_interval: float = DEFAULT_SCRAPE_INTERVAL
              ) -> list[str]:
    """Every cross-file problem of the checked-out repository at `root`."""
    root = pathlib.Path(root)
    try:
        config = layout.load_config(root)
    except GitOpsError as exc:
        return [str(exc)]
    problems: list[str] = []
    try:
        load_platform_policy(config.policy)
    except PolicyError as exc:
        problems.append(str(exc))
    apps = root / layout.APPS
    for folder in sorted(p for p in apps.iterdir() if p.is_dir()) if apps.is_dir() else []:
        problems += _model(root, folder.name, config, scrape_interval)
    argocd = root / layout.ARGOCD
    for app in sorted(argocd.glob("*.yaml")) if argocd.is_dir() else []:
        problems += _application(root, app, config)
    return problems
