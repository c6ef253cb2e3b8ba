"""What a push may not choose: the platform's settings for one model repo, and where the
git token may go.

The push template carries a :class:`PlatformBinding` (the submit step's `--platform`),
and :func:`bind` holds the pushed commit to it: a field the commit leaves out takes the
platform's value, one it names differently is refused with the file, the field, both
values and who owns it. :func:`git_scope` says where the token may go in the rendered
pods (`MLOPS_GIT_HOSTS`, `GIT_ALLOW_PROTOCOL`). Why: docs/security.md, boundary 2.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from contracts.names import valid_model_name
from gitops.git import origin
from workflows.config import GitOpsConfig, LoadedConfig
from workflows.errors import ConfigError
from workflows.settings import PipelineSettings

__all__ = ["PlatformBinding", "applied", "bind", "binding_arg", "binding_for", "git_scope",
           "parse_binding"]

#: Always allowed: the model repos' and the GitOps repo's transport. `GIT_ALLOW_PROTOCOL`
#: set to nothing would forbid every transport (git-config `protocol.allow`).
DEFAULT_SCHEME = "https"


class PlatformBinding(BaseModel):
    """The platform's settings for one model repo: baked into its push template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    gitops_repo: str = ""
    gitops_branch: str = "main"
    gitops_forge: str = "local"

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        return valid_model_name(value)


def binding_for(loaded: LoadedConfig, *, model: str | None = None,
                gitops_repo: str | None = None) -> PlatformBinding:
    """The binding the platform renders: its own copy of `mlops.yaml` (the one it renders
    the push template from), with what it overrides (`mlops run --model`, the hook's
    GitOps repo)."""
    gitops = loaded.config.promotion.gitops
    return PlatformBinding(
        model=model or loaded.config.model,
        gitops_repo=gitops.repo if gitops_repo is None else gitops_repo,
        gitops_branch=gitops.branch, gitops_forge=gitops.forge)


def binding_arg(binding: PlatformBinding) -> str:
    """The binding as the submit step's `--platform` argument (JSON)."""
    return binding.model_dump_json()


def parse_binding(text: str) -> PlatformBinding:
    """`--platform` back into a binding; ConfigError naming what is wrong."""
    try:
        return PlatformBinding.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"--platform: {where}: {first['msg']}") from None


def _show(value: str) -> str:
    return repr(value) if value else "none (do not propose)"


def bind(loaded: LoadedConfig, binding: PlatformBinding) -> LoadedConfig:
    """The pushed config held to the platform's binding (ConfigError listing each field
    the commit names differently; a field it leaves out takes the platform's value)."""
    config = loaded.config
    problems = []
    if config.model != binding.model:
        problems.append(
            f"model: {config.model!r} is not this repo's model ({binding.model!r}, bound by "
            "the platform's push template); a repo trains and publishes only its own model")
    pushed = config.promotion.gitops
    named = pushed.model_fields_set
    for field, theirs in (("repo", binding.gitops_repo), ("branch", binding.gitops_branch),
                          ("forge", binding.gitops_forge)):
        ours = getattr(pushed, field)
        if field in named and ours != theirs:
            shown = _show if field == "repo" else repr
            problems.append(
                f"promotion.gitops.{field}: {shown(ours)} is not the platform's "
                f"({shown(theirs)}); where candidates are proposed (and the git token goes) "
                "is the platform's to set: leave it out of mlops.yaml")
    if problems:
        raise ConfigError(f"{loaded.path}: refused: it names what the platform owns\n  "
                          + "\n  ".join(problems))
    return applied(loaded, binding)


def applied(loaded: LoadedConfig, binding: PlatformBinding) -> LoadedConfig:
    """`loaded` with the binding's values in place, unchecked (the push template's own
    render; the pushed commit goes through :func:`bind`)."""
    config = loaded.config
    gitops = GitOpsConfig(repo=binding.gitops_repo, branch=binding.gitops_branch,
                          forge=binding.gitops_forge)
    promotion = config.promotion.model_copy(update={"gitops": gitops})
    return loaded.model_copy(update={"config": config.model_copy(
        update={"model": binding.model, "promotion": promotion})})


def git_scope(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """`hosts` (origins the git token may be sent to) and `schemes` (what git may speak)
    for the token-bearing steps of `loaded`'s pipeline (bound: its GitOps repo is the
    platform's)."""
    hosts = list(settings.git_host_origins())
    gitops = origin(loaded.config.promotion.gitops.repo)
    if gitops and gitops not in hosts:
        hosts.append(gitops)
    schemes = [DEFAULT_SCHEME]
    for host in hosts:
        scheme = urllib.parse.urlsplit(host).scheme
        if scheme not in schemes:
            schemes.append(scheme)
    return {"hosts": hosts, "schemes": schemes}
