"""Propose a candidate: its serving manifests on a branch of the GitOps repo, and a PR.

The workflow's last step (and `mlops promote propose MODEL_DIR`). `plan_proposal()` is
pure: from the candidate's `model.yaml` record, the model's folder on `main` and the
canary policy, the branch's files (a canary at 0 % beside the stable version, or a
first version alone at 100 %). `propose()` checks the weights against the evaluated
digest and does the I/O through `gitops.proposal`: one branch and PR per model
version, idempotent. What the branch holds, and why: docs/inside-promotion.md.
"""

from __future__ import annotations

import pathlib
import tempfile
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import yaml

from contracts.artifact import ModelRecord, read_record
from contracts.traffic import set_subsets, set_weights
from gitops import approval as approvals
from gitops import layout, proposal
from gitops.repo import Mirror
from promotion.decision.policy import CanaryPolicy
from promotion.decision.state import CanaryState, Phase, dump_state_yaml
from promotion.errors import ProposeError
from promotion.gitrepo import apply
from promotion.gitrepo.production import (
    current_state,
    production_model_dir,
    production_record,
    stable_version,
)
from promotion.reports.data_report import data_report
from promotion.reports.report import evaluation_report
from serving import manifests
from serving.options import ServingOptions, read_serving_options

__all__ = [
    "ProposalPlan",
    "branch_name",
    "plan_proposal",
]

def branch_name(model: str, version: str) -> str:
    """The proposal branch of one model version (stable, so proposals are idempotent)."""
    return f"mlops/propose/{model}/{version}"


@dataclass(frozen=True)
class ProposalPlan:
    """What the proposal branch writes into `apps/<model>/`."""

    model: str
    version: str
    bootstrap: bool
    stable: str | None
    documents: list[dict[str, Any]] = field(default_factory=list)
    remove_versions: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    weight: int = 100

    def write(self, root: pathlib.Path) -> None:
        """Write the plan into a checkout (the write-back's change function)."""
        layout.write_model(root, self.model, self.documents, extra=self.extra,
                           remove_versions=self.remove_versions)

    @property
    def title(self) -> str:
        """The PR title."""
        if self.bootstrap:
            return f"propose({self.model}): {self.version} as the first stable version"
        return (f"propose({self.model}): canary {self.version} over {self.stable} "
                "(0% until deployed and ready)")


def plan_proposal(
    record: ModelRecord,
    current: layout.ModelState | None,
    policy: CanaryPolicy,
    *,
    model: str | None = None,
    image: str,
    model_uri: str,
    replicas: int = 1,
    port: int = 8080,
    resources: dict[str, Any] | None = None,
    image_pull_secrets: Sequence[str] = (),
    serving: ServingOptions | None = None,
) -> ProposalPlan:
    """Decide the branch's content; see the module docstring."""
    name = model or record.name
    version = record.version
    # The evaluated metrics travel with the Deployment: the next candidate's gate
    # reads them back from the stable version (promotion.gitrepo.production).
    deployment = manifests.deployment(
        name, version, image=image, model_uri=model_uri, weights_sha256=record.weights_sha256,
        replicas=replicas, port=port, resources=resources, metrics=record.metrics or None,
        image_pull_secrets=image_pull_secrets, serving=serving,
    )
    policy_text = yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False)
    state = current_state(current)
    stable = stable_version(current, state) if current is not None else None
    if stable is not None and stable not in (current.deployments if current else {}):
        stable = None  # its Deployment is gone: nothing serves it, start afresh
    if stable is None:
        new = CanaryState(model=name, phase=Phase.IDLE, stable=version)
        docs: list[dict[str, Any]] = [deployment, manifests.service(name, port=port),
                manifests.destination_rule(name, version),
                manifests.virtual_service(name, 100, 0, canary=False, port=port)]
        leftovers = [v for v in (current.deployments if current else {}) if v != version]
        return ProposalPlan(model=name, version=version, bootstrap=True, stable=None,
                            documents=docs, remove_versions=leftovers,
                            extra={layout.PROMOTION: dump_state_yaml(new),
                                   apply.POLICY_FILE: policy_text}, weight=100)
    assert current is not None
    if stable == version:
        raise ProposeError(f"{name} {version} is already the stable version; nothing to propose")
    if state is not None and state.phase.active and state.candidate != version:
        raise ProposeError(
            f"{name}: a canary of {state.candidate} is in progress ({state.phase.value} at "
            f"{state.weight}%); wait for it to finish or run `mlops canary abort {name}`"
        )
    # Merged at 0 %: the controller gives the first step only once the candidate is
    # deployed and ready (`promotion.cluster.readiness`); a subset without ready endpoints
    # would answer 503 to its share of the traffic.
    weight = 0
    new = CanaryState(model=name, phase=Phase.WAITING, stable=stable, candidate=version,
                      weight=weight)
    docs = [deployment]
    if current.service is None:
        docs.append(manifests.service(name, port=port))
    dr = current.destination_rule or manifests.destination_rule(name, stable)
    vs = current.virtual_service or manifests.virtual_service(name, 100, 0, canary=False,
                                                              port=port)
    docs.append(set_subsets(dr, stable, version))
    docs.append(set_weights(vs, weight, with_canary=True))
    leftovers = [v for v in current.deployments if v not in (stable, version)]
    return ProposalPlan(model=name, version=version, bootstrap=False, stable=stable,
                        documents=docs, remove_versions=leftovers,
                        extra={layout.PROMOTION: dump_state_yaml(new),
                               apply.POLICY_FILE: policy_text}, weight=weight)


# -- the I/O half ----------------------------------------------------------------------------

Approval = Literal["pr", "auto"]


@dataclass(frozen=True)
class ProposeResult:
    """What `propose()` did."""

    model: str
    version: str
    bootstrap: bool
    status: str
    """The proposal's status (opened, updated, unchanged, human-edited, merged; serving: the
    version is the stable one already, nothing was proposed)."""
    branch: str
    pr_number: int | None
    pr_url: str | None
    merged: bool
    message: str


def model_uri_for(model_dir: pathlib.Path, model: str, version: str,
                  prefix: str | None = None) -> str:
    """`file://<abs dir>` locally, or `<prefix>/<model>/<version>` with a configured prefix."""
    if prefix:
        return f"{prefix.rstrip('/')}/{model}/{version}"
    return pathlib.Path(model_dir).resolve().as_uri()


_FILES = {"Service": "service.yaml", "DestinationRule": "destinationrule.yaml",
          "VirtualService": "virtualservice.yaml"}


def _file_name(doc: Mapping[str, Any]) -> str:
    """Where `gitops.layout` keeps a document (it checks the name again on write)."""
    if doc["kind"] == "Deployment":
        return f"deployment-{doc['metadata']['labels']['version']}.yaml"
    return _FILES[doc["kind"]]


#: Appended to the PR's title when the gate was inconclusive and asks for a human.
REVIEW_TITLE = " [needs review: gate inconclusive]"


def propose(
    model_dir: pathlib.Path,
    gitops: str,
    forge: Any,
    policy: CanaryPolicy,
    *,
    model: str | None = None,
    approval: Approval = "pr",
    image: str = "registry.example.com/mlops/paddle-serve:0.1.0",
    replicas: int = 1,
    port: int = 8080,
    model_uri_prefix: str | None = None,
    metrics: Mapping[str, float] | None = None,
    production: Mapping[str, Any] | None = None,
    gate: Mapping[str, Any] | None = None,
    base: str = "main",
    workdir: pathlib.Path | None = None,
    image_pull_secrets: Sequence[str] = (),
) -> ProposeResult:
    """Write the proposal branch, open (or find) its PR, merge it with `approval="auto"`."""
    record = read_record(pathlib.Path(model_dir))
    if metrics:
        record = record.model_copy(update={"metrics": {**record.metrics, **metrics}})
    name = model or record.name
    with tempfile.TemporaryDirectory(prefix="mlops-propose-") as tmp:
        with Mirror(gitops, path=pathlib.Path(tmp) / "mirror.git") as mirror:
            tip = mirror.sha(base)
            if tip is None:
                raise ProposeError(f"{gitops}: branch {base!r} not found; is it a GitOps repo? "
                                   "(create one with `mlops gitops init`)")
            root = pathlib.Path(tmp) / "tree"
            mirror.export(tip, root)
        current = layout.read_model(root, name) if (root / layout.APPS / name).is_dir() else None
    branch = branch_name(name, record.version)
    state = current_state(current)
    stable = stable_version(current, state) if current is not None else None
    if current is not None and stable == record.version and stable in current.deployments:
        return ProposeResult(
            model=name, version=record.version, bootstrap=False, status="serving", branch=branch,
            pr_number=None, pr_url=None, merged=True,
            message=f"{name} {record.version} is already the stable version on {base!r}; "
                    "nothing to propose")
    # The current candidate's merged PR stays a no-op; a version merged once that no longer
    # serves (rolled back, or replaced and rolled back from) is proposed afresh with a new PR.
    live = state is not None and state.phase.active and state.candidate == record.version
    uri = model_uri_for(pathlib.Path(model_dir), name, record.version, model_uri_prefix)
    try:  # workers and batching travel with the version, into its Deployment's flags
        serving = read_serving_options(model_dir)
    except ValueError as exc:
        raise ProposeError(str(exc)) from None
    the_plan = plan_proposal(record, current, policy, model=name, image=image, model_uri=uri,
                             replicas=replicas, port=port,
                             image_pull_secrets=image_pull_secrets,
                             serving=serving)
    if production is None and not the_plan.bootstrap:
        production = production_record(current, the_plan.stable)
    data = data_report(pathlib.Path(model_dir),
                       None if the_plan.bootstrap
                       else production_model_dir(current, the_plan.stable))
    # An inconclusive gate (`gate.inconclusive: review`) proposes all the same, for a human:
    # the title says so, and no automatic approval merges it.
    review = gate is not None and gate.get("outcome") == "review"
    title = the_plan.title + (REVIEW_TITLE if review else "")
    body = evaluation_report(record.as_dict(), production, gate=gate, steps=policy.steps,
                             approval=approval, model_uri=uri, bootstrap=the_plan.bootstrap,
                             data=data)
    files: dict[str, Any] = {}
    for doc in the_plan.documents:
        files[f"{layout.APPS}/{name}/{_file_name(doc)}"] = doc
    for file_name, text in the_plan.extra.items():
        files[f"{layout.APPS}/{name}/{file_name}"] = text
    result = proposal.propose(
        gitops, name, branch, files, title, body, forge, base=base,
        version=record.version, weights_sha256=record.weights_sha256,
        trailers=[("Mlops-Model", name), ("Mlops-Candidate", record.version)],
        workdir=workdir, reopen_merged=not live,
    )
    pr = result.pr
    merged = result.status == "merged" or (pr is not None and pr.state == "merged")
    message = result.message
    if approval == "auto" and review and pr is not None and pr.state == "open":
        message += "; not merged automatically: the gate was inconclusive and asks for review"
    elif approval == "auto" and pr is not None and pr.state == "open":
        approved = approvals.approve(gitops, pr.number, forge)
        pr, merged = approved.pr, True
        message += f"; {approved.message} (approval: auto)"
    return ProposeResult(
        model=name, version=record.version, bootstrap=the_plan.bootstrap, status=result.status,
        branch=result.branch, pr_number=pr.number if pr else None, pr_url=pr.url if pr else None,
        merged=merged, message=message,
    )
