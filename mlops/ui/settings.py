"""The web UI's settings: every option of `mlops ui`, with its default, bounds and
environment fallback, and the rules over several of them (who may act beyond loopback).

`mlops ui` builds them from its flags (`UiSettings.from_options`); `mlops ui manifests`
builds the settings of the `mlops ui` its Deployment starts (`UiSettings.in_cluster`),
so it renders nothing that process would refuse: a port out of range, or a token
identity that cannot sign a commit, is refused when the manifests are made.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Mapping

import pydantic

from cogs.options import explain, from_environment
from gitops.forges.registry import DEFAULT_FORGE
from gitops.git import line_problem
from gitops.people import current_user
from mlops.errors import UserError
from promotion.controller_settings import Runtime

__all__ = ["DEFAULT_PORT", "ENVIRONMENT", "LOOPBACK", "PROXY_USER_HEADER", "UiSettings",
           "readiness_for"]

#: Options read from the environment when no flag gives them (the token and the proxy's
#: secret are secrets: argv is readable by every user).
ENVIRONMENT = {"gitops": "MLOPS_GITOPS_REPO", "argo_server": "ARGO_SERVER_URL",
               "forge": "MLOPS_FORGE", "forge_repo": "MLOPS_FORGE_REPO",
               "forge_api": "MLOPS_FORGE_API", "models_root": "MLOPS_MODELS",
               "token": "MLOPS_UI_TOKEN", "proxy_secret": "MLOPS_UI_PROXY_SECRET"}
#: The addresses that keep the UI on this machine.
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8765
#: The header oauth2-proxy sets to the signed-in person when it proxies (`--pass-user-headers`).
PROXY_USER_HEADER = "X-Forwarded-User"


class UiSettings(pydantic.BaseModel):
    """How one `mlops ui` process runs: its flags, checked. What it was not told (the
    GitOps repo, Prometheus, the branch) comes from the platform's work dir later."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    workdir: str | None = None
    gitops: str | None = None
    branch: str | None = None
    prometheus: str | None = None
    runtime: Runtime | None = None
    readiness_namespace: str | None = pydantic.Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Where the serving Deployments run (runtime kubernetes; default: the GitOps repo's
    `mlops-gitops.yaml` namespace): what the rollback button's readiness check reads."""
    runs: tuple[str, ...] = ()
    argo_server: str | None = None
    argo_namespace: str | None = None
    argo_ca: str | None = None
    argo_insecure: bool = False
    settings: str | None = None
    """The pipeline's settings file (the namespace its Workflows run in)."""
    forge: str = DEFAULT_FORGE
    forge_repo: str | None = None
    forge_api: str | None = None
    reports: str | None = None
    models_root: str | None = None
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=DEFAULT_PORT, ge=1, le=65535)
    by: str | None = None
    """Who the buttons act as; with a token, the token's identity."""
    token: str | None = None
    read_only: bool = False
    proxy_user: bool = False
    proxy_header: str = PROXY_USER_HEADER
    proxy_secret: str | None = None

    @pydantic.field_validator("by")
    @classmethod
    def _one_line(cls, name: str | None) -> str | None:
        problem = line_problem(name) if name else None
        if problem:  # it signs every action: a commit trailer
            raise ValueError(problem)
        return name

    @pydantic.model_validator(mode="after")
    def _one_way_to_trust_argo(self) -> UiSettings:
        if self.argo_ca and self.argo_insecure:
            raise ValueError("--argo-ca and --argo-insecure: choose one")
        if not self.by:
            problem = line_problem(self.user)
            if problem:
                raise ValueError(f"--by {self.user!r}: {problem}")
        return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                     flags: Mapping[str, str] | None = None) -> UiSettings:
        """The settings from parsed flags: an option given as None takes its environment
        variable (`ENVIRONMENT`), else its default. A bad value is a `UserError` naming the
        flag (`flags`: another name for a field, when the value came from one)."""
        env = os.environ if environ is None else environ
        given = from_environment({k: v for k, v in options.items() if v is not None},
                                 ENVIRONMENT, env)
        try:
            return cls(**given)
        except pydantic.ValidationError as exc:
            raise UserError(explain(exc, flags)) from None

    @classmethod
    def in_cluster(cls, options: Mapping[str, Any],
                   flags: Mapping[str, str] | None = None) -> UiSettings:
        """The settings of the `mlops ui` a Deployment starts, from what it is rendered with;
        nothing is read from this machine's environment."""
        return cls.from_options(options, environ={}, flags=flags)

    @property
    def loopback(self) -> bool:
        """Only this machine can reach the UI."""
        return self.host in LOOPBACK

    @property
    def actions(self) -> bool:
        """The buttons commit (not `--read-only`)."""
        return not self.read_only

    @property
    def user(self) -> str:
        """Who acts: `--by`, else the login name."""
        return current_user(self.by)

    def exposure_problem(self) -> str | None:
        """Why serving on `host` would let someone act who should not (None: it would not)."""
        if self.loopback:
            return None
        if self.actions and not self.token and not self.proxy_user:
            return (f"--host {self.host} exposes the actions beyond this machine: set "
                    "--token (or $MLOPS_UI_TOKEN), --proxy-user, or --read-only")
        if self.proxy_user and not self.proxy_secret:
            # Any client that reaches the port could name itself in the header.
            return (f"--proxy-user on --host {self.host} would trust a user header any "
                    "client can send: run the proxy beside the UI and bind 127.0.0.1 (as "
                    "`mlops ui manifests --proxy-user` does), or set --proxy-secret (or "
                    "$MLOPS_UI_PROXY_SECRET), which the proxy sends as X-Mlops-Proxy-Secret")
        return None


def readiness_for(runtime: str, namespace: str, workdir: str | os.PathLike[str] | None) -> Any:
    """Who tells whether a version is deployed and ready (`promotion.cluster.readiness`), for
    a runtime: `kubernetes` asks the API server about `namespace` (your kubeconfig, or the
    pod's service account), `local` the platform in `workdir`, `none` nobody (None).

    The one rule `mlops controller run`, `mlops rollback` and the UI's rollback button use.
    """
    if runtime == "none":
        return None
    if runtime == "kubernetes":
        from promotion.cluster.readiness import KubernetesReadiness

        return KubernetesReadiness(namespace)
    if runtime != "local" or workdir is None:
        raise UserError(f"readiness: runtime {runtime!r} needs "
                        + ("the local platform's work dir" if runtime == "local" else
                           "to be one of local, kubernetes, none"))
    from local.platform.readiness import PlatformReadiness
    from local.platform.workdir import Workdir

    return PlatformReadiness(Workdir(pathlib.Path(workdir)))
