"""The platform's policy, kept in the GitOps repo: a model repo may only tighten it.

The `policy:` section of `mlops-gitops.yaml` sets bounds on approval, the gate, the
canary and the serving images; a model's `mlops.yaml` is merged over them, and a value
that loosens a bound is refused with the field named (`bounded` applies them again to a
policy read back from git). Pure: the callers read the section
(`gitops.layout.RepoConfig.policy`). The bounds and why: docs/inside-promotion.md.
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gitops import layout
from gitops.errors import GitOpsError
from gitops.git import remote
from gitops.repo import Mirror
from promotion.decision.gate import GateConfig
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.errors import PolicyError

__all__ = ["PlatformPolicy", "load_platform_policy"]

_AT_LEAST = ("interval", "min_requests", "min_latency_samples")
_AT_MOST = ("max_error_rate", "max_p99_ms", "max_latency_ratio", "min_latency_difference_ms",
            "traffic_tolerance", "no_traffic_grace")
_PLATFORM_ONLY = ("metrics", "alpha", "insufficient_evidence", "faults")
WHERE = "mlops-gitops.yaml: policy"


#: How much an inconclusive gate lets through: a model may be stricter than the platform.
_LENIENCY = {"fail": 0, "review": 1, "pass": 2}

class PlatformPolicy(BaseModel):
    """The `policy:` section of `mlops-gitops.yaml` (every key optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approval: Literal["pr", "auto"] = "pr"
    gate: GateConfig | None = None
    canary: dict[str, Any] = Field(default_factory=dict)
    images: list[str] = Field(default_factory=list)
    """Allowed server image prefixes (`registry.example.com/mlops/`); empty: any."""

    def canary_policy(self) -> CanaryPolicy:
        return load_policy(self.canary, f"{WHERE}.canary")

    def approval_for(self, asked: str, where: str) -> str:
        """The approval mode a model repo may have."""
        if asked == "auto" and self.approval != "auto":
            raise PolicyError(f"{where}: approval auto is not allowed by the GitOps repo's "
                              f"policy ({WHERE}.approval: {self.approval}); a human approves "
                              "each candidate")
        return asked

    def gate_for(self, model: GateConfig | None, where: str) -> GateConfig:
        """The model's gate within the platform's bounds (refused where it loosens them)."""
        if self.gate is None:
            return model or GateConfig()
        if model is None:
            return self.gate
        bounds = self.gate.model_fields_set
        problems = []
        if "metric" in bounds and model.metric != self.gate.metric:
            problems.append(f"metric {model.metric} (the platform gates on {self.gate.metric})")
        if "min" in bounds and model.min < self.gate.min:
            problems.append(f"min {model.min:g} is below the platform's {self.gate.min:g}")
        if "max_regression" in bounds and model.max_regression > self.gate.max_regression:
            problems.append(f"max_regression {model.max_regression:g} is above the platform's "
                            f"{self.gate.max_regression:g}")
        if ("class_max_regression" in bounds
                and model.class_max_regression > self.gate.class_max_regression):
            problems.append(f"class_max_regression {model.class_max_regression:g} is above "
                            f"the platform's {self.gate.class_max_regression:g}")
        if ("inconclusive" in bounds and _LENIENCY[model.inconclusive]
                > _LENIENCY[self.gate.inconclusive]):
            problems.append(f"inconclusive {model.inconclusive} (the platform's is "
                            f"{self.gate.inconclusive})")
        if ("worse_classes" in bounds and self.gate.worse_classes == "fail"
                and model.worse_classes != "fail"):
            problems.append("worse_classes report (the platform fails a class worse beyond "
                            "noise)")
        if problems:
            raise PolicyError(f"{where}: loosens the GitOps repo's gate ({WHERE}.gate): "
                              + "; ".join(problems))
        return model

    def canary_for(self, model: Mapping[str, Any] | None, where: str) -> CanaryPolicy:
        """The platform's canary policy with the model's own settings where they tighten it."""
        platform = self.canary_policy()
        mine = load_policy(dict(model or {}), where)
        problems = []
        if mine.metrics.preset == "custom" and mine.metrics != platform.metrics:
            problems.append("custom metric queries are the platform's to write")
        elif "metrics" in mine.model_fields_set and mine.metrics != platform.metrics:
            # Where the numbers come from is the platform's even where it left them
            # unset: a preset blind to the router or another namespace judges another
            # canary than the one clients see.
            problems.append("metrics (preset, namespace) are the platform's to set "
                            f"({WHERE}.canary.metrics)")
        for name in sorted(mine.model_fields_set & platform.model_fields_set):
            ours, theirs = getattr(mine, name), getattr(platform, name)
            if name in _AT_LEAST and ours < theirs:
                problems.append(f"{name} {ours:g} is below the platform's {theirs:g}")
            elif name in _AT_MOST and ours > theirs:
                problems.append(f"{name} {ours:g} is above the platform's {theirs:g}")
            elif name == "steps" and (ours[0] > theirs[0] or len(ours) < len(theirs)):
                problems.append(f"steps {list(ours)} skip ahead of the platform's {list(theirs)}")
            elif name in _PLATFORM_ONLY and name != "metrics" and ours != theirs:
                problems.append(f"{name} is the platform's to set")
            elif name == "approval" and theirs == "step" and ours != "step":
                problems.append("approval auto: the platform has a person approve each step")
            elif name == "mode" and ours != theirs:
                problems.append(f"mode {ours} (the platform sets {theirs})")
        if problems:
            raise PolicyError(f"{where}: loosens the GitOps repo's canary policy "
                              f"({WHERE}.canary): " + "; ".join(problems))
        merged = {**{k: v for k, v in platform.model_dump(mode="json").items()
                     if k in platform.model_fields_set},
                  **{k: v for k, v in mine.model_dump(mode="json").items()
                     if k in mine.model_fields_set}}
        return load_policy(merged, where)

    def bounded(self, model: Mapping[str, Any] | None,
                where: str) -> tuple[CanaryPolicy, list[str]]:
        """A policy read back from the GitOps repo, within the platform's bounds again.

        The controller's check (it judged whatever
        `canary-policy.yaml` said). Where the policy loosens a bound the bound wins
        and the field is named in the list returned; not a refusal, because a policy
        the platform tightened after a proposal must not leave that canary unjudged
        (and serving) until someone edits its file. `metrics` is always the
        platform's. Same rules as :meth:`canary_for`."""
        platform = self.canary_policy()
        mine = load_policy(dict(model or {}), where)
        values = {k: v for k, v in mine.model_dump(mode="json").items()
                  if k in mine.model_fields_set}
        theirs_all = platform.model_dump(mode="json")
        changed = []
        if "metrics" in values or "metrics" in platform.model_fields_set:
            if mine.metrics != platform.metrics:
                changed.append("metrics")
            values.pop("metrics", None)
            if "metrics" in platform.model_fields_set:
                values["metrics"] = theirs_all["metrics"]
        for name in sorted(mine.model_fields_set & platform.model_fields_set - {"metrics"}):
            ours, theirs = getattr(mine, name), getattr(platform, name)
            loosens = ((name in _AT_LEAST and ours < theirs)
                       or (name in _AT_MOST and ours > theirs)
                       or (name == "steps" and (ours[0] > theirs[0]
                                                or len(ours) < len(theirs)))
                       or (name in _PLATFORM_ONLY and ours != theirs)
                       or (name == "approval" and theirs == "step" and ours != "step")
                       or (name == "mode" and ours != theirs))
            if loosens:
                values[name] = theirs_all[name]
                changed.append(name)
        for name in platform.model_fields_set - mine.model_fields_set - {"metrics"}:
            values[name] = theirs_all[name]
        return load_policy(values, where), changed

    def check_image(self, image: str, where: str) -> str:
        if self.images and not any(image.startswith(prefix) for prefix in self.images):
            raise PolicyError(f"{where}: image {image!r} is not allowed by {WHERE}.images "
                              f"({', '.join(self.images)})")
        return image


def read_platform_policy(repo: str, branch: str = "main") -> PlatformPolicy:
    """The policy on `branch` of the GitOps repo `repo` (path or URL)."""
    where = f"GitOps repo {remote(repo).display}"
    try:
        with tempfile.TemporaryDirectory(prefix="mlops-policy-") as tmp:
            with Mirror(repo, path=pathlib.Path(tmp) / "mirror.git") as mirror:
                tip = mirror.sha(branch)
                text = mirror.show(tip, layout.CONFIG_FILE) if tip else None
    except GitOpsError as exc:
        raise PolicyError(f"cannot read the platform policy from {where}: {exc}") from None
    if text is None:
        raise PolicyError(f"{where} has no {layout.CONFIG_FILE} on {branch!r}: not a GitOps "
                          "repo (create one with `mlops gitops init`)")
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise PolicyError(f"{where}: {layout.CONFIG_FILE} is not valid YAML: {exc}") from None
    return load_platform_policy(doc.get("policy") if isinstance(doc, dict) else None)


def load_platform_policy(doc: Any) -> PlatformPolicy:
    """Validate the raw section (None: the defaults: a human approves every candidate)."""
    try:
        policy = PlatformPolicy.model_validate(doc or {})
        policy.canary_policy()
    except ValidationError as exc:
        problems = "; ".join(f"{WHERE}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        raise PolicyError(problems) from None
    return policy
