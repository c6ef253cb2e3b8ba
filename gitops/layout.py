"""The GitOps repository layout: what lives where, written and read back.

One kustomize-compatible folder per model, ``apps/<model>/`` (kustomization, Service,
DestinationRule, VirtualService, ``deployment-<version>.yaml`` per live version,
``promotion.yaml`` owned by the promotion room), an Argo CD Application per model in
``argocd/``, ``mlops-gitops.yaml`` and a README. Files that are not Kubernetes documents
are *extras*, read back verbatim. Works on a checked-out ``root`` and does no git
(:func:`write_model`, :func:`write_files`); reading parses every file of the model first,
so a broken one is named before anything is written. More: docs/inside-foundations.md.
"""

from __future__ import annotations

import pathlib
import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from contracts.names import is_model_name, model_name_problem
from contracts.traffic import weights_by_version
from gitops import yamlio
from gitops.errors import BrokenManifestError, GitOpsError

APPS = "apps"
ARGOCD = "argocd"
CONFIG_FILE = "mlops-gitops.yaml"
KUSTOMIZATION = "kustomization.yaml"
PROMOTION = "promotion.yaml"

# kind -> fixed file name inside apps/<model>/ (Deployments are per version).
_SINGLE = {
    "Service": "service.yaml",
    "DestinationRule": "destinationrule.yaml",
    "VirtualService": "virtualservice.yaml",
}
_DEPLOYMENT = re.compile(r"^deployment-(?P<version>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)\.yaml$")
_EXTRA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class RepoConfig:
    """Repository settings stored in ``mlops-gitops.yaml`` (what Argo CD needs)."""

    repo_url: str
    target_revision: str = "main"
    namespace: str = "models"
    argocd_namespace: str = "argocd"
    project: str = "default"
    destination_server: str = "https://kubernetes.default.svc"
    policy: Mapping[str, Any] | None = None
    """The platform's `policy:` section, raw (the promotion room validates it)."""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "repoURL": self.repo_url,
            "targetRevision": self.target_revision,
            "namespace": self.namespace,
            "argocdNamespace": self.argocd_namespace,
            "project": self.project,
            "destinationServer": self.destination_server,
        }
        if self.policy is not None:
            doc["policy"] = dict(self.policy)
        return doc

    @classmethod
    def from_doc(cls, doc: Any, name: str = CONFIG_FILE) -> "RepoConfig":
        if not isinstance(doc, dict) or not isinstance(doc.get("repoURL"), str):
            raise BrokenManifestError(f"{name}: expected a mapping with a 'repoURL' string", name)
        keys = {
            "targetRevision": "target_revision",
            "namespace": "namespace",
            "argocdNamespace": "argocd_namespace",
            "project": "project",
            "destinationServer": "destination_server",
        }
        unknown = set(doc) - set(keys) - {"repoURL", "policy"}
        if unknown:
            raise BrokenManifestError(f"{name}: unknown keys {sorted(unknown)}", name)
        policy = doc.get("policy")
        if policy is not None and not isinstance(policy, dict):
            raise BrokenManifestError(f"{name}: 'policy' must be a mapping", name)
        return cls(
            repo_url=doc["repoURL"], policy=policy,
            **{keys[k]: str(v) for k, v in doc.items() if k in keys}
        )


@dataclass(frozen=True)
class ModelState:
    """One model's folder, parsed. ``deployments`` maps version -> Deployment."""

    model: str
    deployments: dict[str, dict[str, Any]] = field(default_factory=dict)
    service: dict[str, Any] | None = None
    destination_rule: dict[str, Any] | None = None
    virtual_service: dict[str, Any] | None = None
    kustomization: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def documents(self) -> list[dict[str, Any]]:
        """The cluster documents (what kustomize applies), in a stable order."""
        docs = [d for d in (self.service, self.destination_rule, self.virtual_service) if d]
        return docs + [self.deployments[v] for v in sorted(self.deployments)]

    def weights(self) -> dict[str, int]:
        """Traffic weight per *version*, resolved through the DestinationRule subsets."""
        if self.destination_rule is None or self.virtual_service is None:
            return {}
        return weights_by_version(self.destination_rule, self.virtual_service)


def _check_model(model: str) -> None:
    problem = model_name_problem(model)
    if problem:
        raise GitOpsError(problem)


# -- builders for the repo's own documents -----------------------------------


def application(model: str, config: RepoConfig) -> dict[str, Any]:
    """Argo CD Application syncing ``apps/<model>`` with prune and self-heal."""
    _check_model(model)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": model,
            "namespace": config.argocd_namespace,
            "labels": {"app.kubernetes.io/part-of": "mlops", "app": model},
            # Deleting the Application deletes what it deployed.
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
        },
        "spec": {
            "project": config.project,
            "source": {
                "repoURL": config.repo_url,
                "targetRevision": config.target_revision,
                "path": f"{APPS}/{model}",
            },
            "destination": {"server": config.destination_server, "namespace": config.namespace},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["CreateNamespace=true"],
            },
        },
    }


def kustomization(resources: Iterable[str]) -> dict[str, Any]:
    """A Kustomization listing ``resources`` in the given order."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resources),
    }


def readme(config: RepoConfig) -> str:
    """The README for humans at the repo root."""
    return f"""# GitOps repository for model serving

This repository is the desired state of every served model. Argo CD (or, on one
machine, the `mlops up` sync loop) applies the `{config.target_revision}` branch.
Everything that changes production is a commit here; `git log` is the audit trail.

## Layout, and who edits what

* `apps/<model>/deployment-<version>.yaml` -- one Deployment per live version.
  The pipeline adds and removes them; you may edit `replicas` and `resources`.
* `apps/<model>/service.yaml` -- the model's Service; rarely edited.
* `apps/<model>/destinationrule.yaml` -- `stable`/`canary` subsets (by the
  `version` label); owned by the promotion controller.
* `apps/<model>/virtualservice.yaml` -- traffic weights stable/canary (sum 100);
  owned by the promotion controller, but a human may set weights to roll back.
* `apps/<model>/promotion.yaml` -- canary state (phase, weight, last decision);
  owned by the promotion controller.
* `apps/<model>/kustomization.yaml` -- what kustomize applies; regenerated,
  entries you add are kept.
* `argocd/<model>.yaml` -- the Argo CD Application (automated sync, prune,
  self-heal); edit it if your cluster needs it.
* `{CONFIG_FILE}` -- repo URL and namespaces for Argo CD; yours to edit.

## How to

* **Approve a candidate**: merge its pull request (or `mlops pr approve N`).
  Merging sets the canary at its first step; the controller takes it from there.
* **Stop a canary by hand**: set the canary weight to 0 (stable 100) in
  `virtualservice.yaml` and push. The controller never discards your commits:
  if it collides with your edit it stops and says which file to look at.
* **Roll back to an earlier version**: `mlops rollback MODEL [--to VERSION]`.
  One commit: the version (default: the previous stable one) serves 100 % at
  once, with its Deployment as it was in this history; no analysis.
* **Never** force-push `{config.target_revision}`; the bot never does either.

Commits by the bot come from `mlops-bot` and carry `Mlops-*` trailers
(`git log --format='%h %s%n%(trailers)'`).
"""


def init_tree(root: pathlib.Path, config: RepoConfig) -> None:
    """Write the repo skeleton (README, settings, empty apps/ and argocd/).

    Files that exist are left alone (a human may have edited them), so running
    ``mlops gitops init`` again on an initialised repo changes nothing.
    """
    root = pathlib.Path(root)
    if not (root / "README.md").exists():
        (root / "README.md").write_text(readme(config))
    if not (root / CONFIG_FILE).exists():
        (root / CONFIG_FILE).write_text(yamlio.dump(config.to_doc()))
    for folder in (APPS, ARGOCD):
        (root / folder).mkdir(exist_ok=True)
        keep = root / folder / ".gitkeep"
        if not keep.exists():
            keep.write_text("")


def load_config(root: pathlib.Path) -> RepoConfig:
    """Read ``mlops-gitops.yaml``; a repo that was never initialised is an error."""
    path = pathlib.Path(root) / CONFIG_FILE
    if not path.exists():
        raise GitOpsError(f"{CONFIG_FILE} is missing: not a GitOps repo (run `mlops gitops init`)")
    return RepoConfig.from_doc(yamlio.load_one(path, CONFIG_FILE))


# -- reading -----------------------------------------------------------------


def list_models(root: pathlib.Path) -> list[str]:
    """Models with a folder under ``apps/``."""
    apps = pathlib.Path(root) / APPS
    if not apps.is_dir():
        return []
    return sorted(p.name for p in apps.iterdir() if p.is_dir() and is_model_name(p.name))


def _expect_kind(doc: Any, kind: str, name: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        got = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise BrokenManifestError(f"{name}: expected a {kind}, found {got!r}", name)
    return doc


def read_model(root: pathlib.Path, model: str) -> ModelState:
    """Parse ``apps/<model>/``; broken or misplaced documents name their file."""
    _check_model(model)
    folder = pathlib.Path(root) / APPS / model
    if not folder.is_dir():
        raise GitOpsError(f"model {model!r} has no folder {APPS}/{model}/ in the GitOps repo")
    state: dict[str, Any] = {"deployments": {}, "extra": {}}
    by_file = {v: k for k, v in _SINGLE.items()}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        name = f"{APPS}/{model}/{path.name}"
        if path.suffix not in (".yaml", ".yml"):
            state["extra"][path.name] = path.read_text(errors="replace")
            continue
        doc = yamlio.load_one(path, name)
        if path.name == KUSTOMIZATION:
            state["kustomization"] = _expect_kind(doc, "Kustomization", name)
        elif path.name in by_file:
            kind = by_file[path.name]
            key = {
                "Service": "service",
                "DestinationRule": "destination_rule",
                "VirtualService": "virtual_service",
            }[kind]
            state[key] = _expect_kind(doc, kind, name)
        elif (match := _DEPLOYMENT.match(path.name)) is not None:
            doc = _expect_kind(doc, "Deployment", name)
            version = ((doc.get("metadata") or {}).get("labels") or {}).get("version")
            if version != match["version"]:
                raise BrokenManifestError(
                    f"{name}: label version={version!r} does not match the file name", name
                )
            state["deployments"][version] = doc
        else:
            state["extra"][path.name] = doc
    return ModelState(model=model, **state)


def read_repo(root: pathlib.Path) -> dict[str, ModelState]:
    """Every model's state (the local sync loop reads this from a checkout of main)."""
    return {model: read_model(root, model) for model in list_models(root)}


# -- writing -----------------------------------------------------------------


def _file_for(model: str, doc: Any) -> str:
    if not isinstance(doc, dict):
        raise GitOpsError(
            f"model {model!r}: a document must be a mapping, got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    labels = (doc.get("metadata") or {}).get("labels") or {}
    if labels.get("app") not in (None, model):
        raise GitOpsError(
            f"{kind} labelled app={labels.get('app')!r} does not belong to model {model!r}"
        )
    if kind in _SINGLE:
        return _SINGLE[kind]
    if kind == "Deployment":
        version = labels.get("version")
        if not isinstance(version, str) or not _DEPLOYMENT.match(f"deployment-{version}.yaml"):
            raise GitOpsError(f"Deployment for model {model!r} lacks a valid 'version' label")
        return f"deployment-{version}.yaml"
    raise GitOpsError(
        f"model {model!r}: kind {kind!r} has no place in apps/{model}/; pass it as an extra file"
    )


def refresh_model(root: pathlib.Path, model: str) -> None:
    """Rewrite ``kustomization.yaml`` from the files present; add the Application if missing."""
    state = read_model(root, model)
    _refresh(root, model, state.deployments, state.kustomization)


def _refresh(root: pathlib.Path, model: str, versions: Iterable[str],
             current: dict[str, Any] | None, config: RepoConfig | None = None) -> None:
    """`refresh_model` from a folder's Deployment versions and `current` kustomization."""
    folder = pathlib.Path(root) / APPS / model
    ours = [
        f
        for f in ("service.yaml", "destinationrule.yaml", "virtualservice.yaml")
        if (folder / f).exists()
    ]
    ours += [f"deployment-{v}.yaml" for v in sorted(versions)]
    kept: list[str] = []
    if current is not None:
        for entry in current.get("resources") or []:
            generated = entry in _SINGLE.values() or _DEPLOYMENT.match(str(entry))
            if not generated and entry not in kept:
                kept.append(entry)
    (folder / KUSTOMIZATION).write_text(yamlio.dump(kustomization(ours + kept)))
    app = pathlib.Path(root) / ARGOCD / f"{model}.yaml"
    if not app.exists():
        app.parent.mkdir(exist_ok=True)
        app.write_text(yamlio.dump(application(model, config or load_config(root))))


def write_model(
    root: pathlib.Path,
    model: str,
    documents: Iterable[dict[str, Any]] = (),
    *,
    extra: Mapping[str, Any] | None = None,
    remove_versions: Iterable[str] = (),
) -> None:
    """Write a model's documents into ``apps/<model>/`` (creating it when new).

    ``documents`` are Service/DestinationRule/VirtualService/Deployment dicts
    (from :mod:`serving.manifests`); each goes to its file. ``extra`` maps plain
    file names to a dict (dumped as YAML) or text (written verbatim), e.g.
    ``{"promotion.yaml": state}``. ``remove_versions`` deletes those versions'
    Deployments. Existing files are parsed first: a broken one raises
    :class:`BrokenManifestError` before anything is written; so does a YAML
    ``extra`` given as broken text.
    """
    _check_model(model)
    root = pathlib.Path(root)
    folder = root / APPS / model
    # The folder is parsed once: what the kustomization needs afterwards (the
    # versions, the kept entries) follows from it and the plan. Parsing it again
    # after the write was a third of each controller commit.
    before = read_model(root, model) if folder.is_dir() else None
    config = load_config(root)
    versions = set(before.deployments) if before is not None else set()
    remove_versions = tuple(remove_versions)
    versions.difference_update(remove_versions)
    planned: dict[str, str] = {}
    for doc in documents:
        name = _file_for(model, doc)
        planned[name] = yamlio.dump(doc)
        if doc.get("kind") == "Deployment":
            versions.add(doc["metadata"]["labels"]["version"])
    for name, content in (extra or {}).items():
        if (
            not _EXTRA.match(name)
            or name == KUSTOMIZATION
            or name in _SINGLE.values()
            or _DEPLOYMENT.match(name)
        ):
            raise GitOpsError(f"extra file name {name!r} is reserved or not a plain file name")
        planned[name] = content if isinstance(content, str) else yamlio.dump(content)
        if isinstance(content, str) and name.endswith((".yaml", ".yml")):
            yamlio.one(content, f"{APPS}/{model}/{name}")  # as `read_model` will read it
    folder.mkdir(parents=True, exist_ok=True)
    for version in remove_versions:
        (folder / f"deployment-{version}.yaml").unlink(missing_ok=True)
    for name, text in planned.items():
        (folder / name).write_text(text)
    _refresh(root, model, versions, before.kustomization if before else None, config)


def remove_model(root: pathlib.Path, model: str) -> None:
    """Delete a model's folder and its Application (Argo CD prunes the rest)."""

    _check_model(model)
    shutil.rmtree(pathlib.Path(root) / APPS / model, ignore_errors=True)
    (pathlib.Path(root) / ARGOCD / f"{model}.yaml").unlink(missing_ok=True)


def write_files(root: pathlib.Path, files: Mapping[str, Any]) -> list[str]:
    """Write repo-relative ``files`` (dict -> YAML, str -> text); refresh touched models.

    Paths must stay inside the repo. Files under ``apps/<model>/`` are placed
    through :func:`write_model`, so kinds, names and the kustomization agree.
    Returns the models touched.
    """
    root = pathlib.Path(root)
    per_model: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    loose: dict[str, Any] = {}
    for rel, content in files.items():
        parts = pathlib.PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or ".." in parts or parts[0] == ".git":
            raise GitOpsError(f"file path {rel!r} must be relative and inside the repository")
        if len(parts) == 3 and parts[0] == APPS:
            docs, extra = per_model.setdefault(parts[1], ([], {}))
            name = parts[2]
            if name in _SINGLE.values() or _DEPLOYMENT.match(name):
                if not isinstance(content, dict):
                    content = yamlio.parse(content, rel)[0] if yamlio.parse(content, rel) else None
                if _file_for(parts[1], content) != name:
                    raise GitOpsError(
                        f"{rel}: a {content.get('kind')} belongs in "
                        f"{APPS}/{parts[1]}/{_file_for(parts[1], content)}"
                    )
                docs.append(content)
            else:
                extra[name] = content
        else:
            loose[rel] = content
    for model, (docs, extra) in per_model.items():
        write_model(root, model, docs, extra=extra)
    for rel, content in loose.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yamlio.dump(content))
    return sorted(per_model)
