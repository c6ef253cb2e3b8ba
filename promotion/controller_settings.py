"""The controller's settings: every option of `mlops controller run`, with its default,
bounds and environment fallback, and the rule that picks a model's metric preset.

`controller run` and `controller manifests` both build their settings here
(`ControllerSettings.from_options`, `ControllerSettings.in_cluster`); the CLI only
parses the flags and hands them over. So the Deployment `controller manifests`
renders carries only values the process it starts accepts: a preset the process
would refuse is refused when the manifests are made, with the same message.
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import TYPE_CHECKING, Any, Literal, Mapping

import pydantic

from cogs.options import explain, from_environment
from promotion.cluster.deploy import (
    CLUSTER_GIT_POLL,
    CLUSTER_SETTLE,
    CLUSTER_WORKERS,
    METRICS_PORT,
)
from promotion.controller import ControllerConfig
from promotion.errors import SettingsError
from promotion.metrics.live import RUNTIME_PRESETS
from promotion.metrics.presets import PRESET_NAMES

if TYPE_CHECKING:
    from promotion.decision.policy import CanaryPolicy

__all__ = ["ENVIRONMENT", "ControllerSettings"]

#: Options read from the environment when no flag gives them: the webhook URL is a
#: secret (argv is readable by every user), the other two name where things are.
ENVIRONMENT = {"gitops": "MLOPS_GITOPS_REPO", "webhook": "MLOPS_WEBHOOK_URL",
               "platform_workdir": "MLOPS_WORKDIR"}
#: Where the controller in a cluster keeps its caches and reports (the reports claim).
CLUSTER_WORKDIR = "/work"
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


#: Where the models run: a Kubernetes cluster, the local platform, or neither known. One
#: alias for the controller's and the UI's settings: two `Literal`s of the same values in
#: another order are equal, and `typing`'s cache may hand one's order to the other's
#: error messages.
Runtime = Literal["kubernetes", "local", "none"]

class ControllerSettings(pydantic.BaseModel):
    """How one controller process runs: the flags of `mlops controller run`, checked."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    gitops: str
    """The GitOps repository (path or URL)."""
    prometheus: str
    """Prometheus base URL."""
    preset: str | None = None
    """The metric preset for every model; None: each model's, else the runtime's."""
    branch: str = "main"
    interval: float | None = pydantic.Field(default=None, gt=0)
    """Analysis window in seconds for every model (None: each policy's)."""
    poll: float = pydantic.Field(default=1.0, gt=0)
    """Seconds between passes."""
    git_poll: float = pydantic.Field(default=0.0, ge=0)
    """Fetch the GitOps repo at most every this many seconds (0: every pass)."""
    settle: float = pydantic.Field(default=0.0, ge=0)
    """Seconds to wait after a window ends before reading it (scrape lag)."""
    workers: int = pydantic.Field(default=1, ge=1)
    """Models analysed at once in a pass."""
    workdir: str = "mlops-controller"
    """Caches, timelines and canary reports."""
    metrics_port: int | None = pydantic.Field(default=None, ge=0, le=65535)
    metrics_addr: str = "127.0.0.1"
    webhook: str | None = None
    """Slack-compatible webhook URL (a secret: from the environment by preference)."""
    readiness: Runtime | None = None
    """Who says a merged candidate is deployed and ready (None: local with a platform
    work dir, else none)."""
    readiness_namespace: str = "models"
    platform_workdir: str | None = None
    probe_url: str | None = None
    """The router's address for the answers probe, with `{model}`; 'off': no probe."""
    on_rollback: Literal["remove", "scale-to-zero"] = "remove"
    checkpoint_every: int = pydantic.Field(default=0, ge=0)
    argocd_namespace: str | None = None
    kube_api: str | None = None
    forge: str | None = None
    forge_api: str | None = None
    forge_repo: str | None = None
    report_url: str | None = None
    log_level: str = "info"

    @pydantic.field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str | None) -> str | None:
        if name is not None and name not in PRESET_NAMES:
            raise ValueError(
                f"unknown metrics preset; choose one of {', '.join(sorted(PRESET_NAMES))} "
                "(a model's own queries, preset 'custom', go in its canary-policy.yaml)")
        return name

    @pydantic.field_validator("probe_url")
    @classmethod
    def _probe_template(cls, template: str | None) -> str | None:
        if template not in (None, "", "off") and "{model}" not in template:
            raise ValueError("write the router's address with {model}, e.g. "
                             "http://{model}.models.svc.cluster.local:8080")
        return template

    @pydantic.field_validator("log_level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        if level.lower() not in _LOG_LEVELS:
            raise ValueError(f"choose one of {', '.join(_LOG_LEVELS)}")
        return level.lower()

    @pydantic.model_validator(mode="after")
    def _local_readiness_needs_a_workdir(self) -> ControllerSettings:
        if self.readiness == "local" and not self.platform_workdir:
            raise ValueError(f"--readiness local needs the platform's work dir "
                             f"(--platform-workdir DIR or ${ENVIRONMENT['platform_workdir']})")
        return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any],
                     environ: Mapping[str, str] | None = None) -> ControllerSettings:
        """The settings from parsed flags: an option given as None takes its environment
        variable (`ENVIRONMENT`), else its default. A bad value is a `SettingsError`
        naming the flag."""
        env = os.environ if environ is None else environ
        given = from_environment({k: v for k, v in options.items() if v is not None},
                                 ENVIRONMENT, env)
        if "gitops" not in given:
            raise SettingsError(f"--gitops: no GitOps repository (pass --gitops, or set "
                                f"${ENVIRONMENT['gitops']})")
        try:
            return cls(**given)
        except pydantic.ValidationError as exc:
            raise SettingsError(explain(exc)) from None

    @classmethod
    def in_cluster(cls, options: Mapping[str, Any]) -> ControllerSettings:
        """The settings of the controller `controller manifests` deploys: readiness from
        the API, its work dir on the reports claim, /metrics for Prometheus, and a
        forge-friendly git poll, a fleet's workers and two scrapes' settle unless `options`
        say otherwise.
        Nothing is read from this machine's environment."""
        defaults = {"readiness": "kubernetes", "workdir": CLUSTER_WORKDIR,
                    "metrics_port": METRICS_PORT, "metrics_addr": "0.0.0.0",
                    "git_poll": CLUSTER_GIT_POLL, "workers": CLUSTER_WORKERS,
                    "settle": CLUSTER_SETTLE}
        given = {k: v for k, v in options.items() if v is not None}
        return cls.from_options({**defaults, **given}, environ={})

    @property
    def runtime(self) -> str:
        """Where the models run, as `readiness` says (`local`, `kubernetes` or `none`)."""
        return self.readiness or ("local" if self.platform_workdir else "none")

    @property
    def default_preset(self) -> str:
        """The preset a policy that names none reads with: the runtime's router view."""
        return RUNTIME_PRESETS.get(self.runtime, "model")

    def preset_for(self, policy: CanaryPolicy) -> str:
        """The preset a model is read with: `--preset` for every model, else the one its
        canary-policy.yaml names (`custom`: its own queries), else the runtime's default."""
        return self.preset or policy.metrics.preset or self.default_preset

    def describe_preset(self) -> str:
        """The preset rule in words, for the start-up log line."""
        return self.preset or f"each model's, or {self.default_preset} (the runtime's default)"

    def controller_config(self) -> ControllerConfig:
        """The controller loop's own configuration."""
        return ControllerConfig(
            repo=self.gitops, workdir=pathlib.Path(self.workdir), branch=self.branch,
            interval=self.interval, settle=self.settle, on_rollback=self.on_rollback,
            checkpoint_every=self.checkpoint_every, report_url=self.report_url,
            git_poll=self.git_poll, workers=self.workers)

    @property
    def logging_level(self) -> int:
        """The `logging` level `log_level` names."""
        return int(getattr(logging, self.log_level.upper()))
