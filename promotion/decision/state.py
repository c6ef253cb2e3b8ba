"""The canary's persisted state: the shape of `apps/<model>/promotion.yaml`.

Git is the only memory of a rollout: everything the analysis accumulates (the step's
counts and latency buckets, the sequential tests' log likelihood ratios, the budgets'
counters) lives here. This module is the file's only reader and writer:
`load_state(text | dict)` validates and names the bad field, `dump_state(state)`
returns the plain dict written as YAML. The model is frozen; changes are `with_*`
copies, or the human-action helpers (`pause`, `resume`, `request_abort`,
`request_promote`). Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from typing import Any, Literal, Mapping

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)

from contracts.names import valid_model_name, version_problem
from promotion.decision import stats
from promotion.errors import StateError

__all__ = [
    "CanaryState",
    "Counts",
    "LastDecision",
    "Phase",
    "Statistics",
    "dump_state",
    "dump_state_yaml",
    "load_state",
    "pause",
    "request_abort",
    "request_promote",
    "resume",
    "start_canary",
]

STATE_VERSION: Literal[1] = 1


class Phase(str, enum.Enum):
    """Where a model's rollout stands. Each member says what the controller does."""

    IDLE = "idle"
    """No candidate: the stable version takes all traffic; nothing is analysed."""
    WAITING = "waiting"
    """Merged at weight 0: the candidate waits until it is deployed and ready (the
    runtime applied the merge, its pods pass their readiness probe); then the
    controller commits the first step. Nothing is analysed, no budget runs but
    the policy's `ready_timeout`."""
    PROGRESSING = "progressing"
    """A candidate gets `weight` percent and is analysed every interval."""
    PAUSED = "paused"
    """Analysis stopped (a human, or a spent budget); weights stay until `resume`."""
    PROMOTED = "promoted"
    """The candidate passed the last step; the controller makes it stable."""
    ROLLED_BACK = "rolled_back"
    """The candidate was judged worse (or aborted); its weight is 0."""

    @property
    def active(self) -> bool:
        """True while a candidate is in flight (waiting, progressing or paused)."""
        return self in (Phase.WAITING, Phase.PROGRESSING, Phase.PAUSED)


def _bucket_key(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


def _parse_histogram(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, count in value.items():
            text = str(key).strip()
            le = math.inf if text in ("+Inf", "inf", "Inf") else float(text)
            out[le] = count
        return out
    return value


def _dump_histogram(hist: dict[float, float]) -> dict[str, Any]:
    return {_bucket_key(le): (int(c) if float(c).is_integer() else c)
            for le, c in sorted(hist.items())}


class Counts(BaseModel):
    """One version's requests, errors and latency buckets since the step began."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    latency: dict[float, float] = Field(default_factory=dict)
    """Cumulative buckets, upper bound in seconds -> count (stored as strings)."""

    quality: dict[str, dict[float, float]] = Field(default_factory=dict)
    """Per model-quality signal, cumulative buckets of the answers' values."""
    classes: dict[str, float] = Field(default_factory=dict)
    """Detections by class name (the class-mix check)."""

    @field_validator("latency", mode="before")
    @classmethod
    def _parse_buckets(cls, value: Any) -> Any:
        return _parse_histogram(value)

    @field_validator("quality", mode="before")
    @classmethod
    def _parse_quality(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): _parse_histogram(v) for k, v in value.items()}
        return value

    @field_serializer("latency")
    def _dump_buckets(self, latency: dict[float, float]) -> dict[str, Any]:
        return _dump_histogram(latency)

    @field_serializer("quality")
    def _dump_quality(self, quality: dict[str, dict[float, float]]) -> dict[str, Any]:
        return {k: _dump_histogram(v) for k, v in sorted(quality.items())}


class Statistics(BaseModel):
    """Log likelihood ratios of the sequential tests, one per grid alternative."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    relative: tuple[float, ...] = tuple(stats.initial(stats.RELATIVE_GRID))
    """Errors: canary vs stable."""
    limit: tuple[float, ...] = tuple(stats.initial(stats.LIMIT_GRID))
    """Errors: canary vs `max_error_rate`."""
    latency_relative: tuple[float, ...] = tuple(stats.initial(stats.RELATIVE_GRID))
    """Slow requests: canary vs stable."""
    latency_limit: tuple[float, ...] = tuple(stats.initial(stats.LIMIT_GRID))
    """Requests above `max_p99_ms`: canary vs 1 %."""
    quality: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    """Per model-quality check: poor answers, canary vs stable (`stats.QUALITY_GRID`)."""
    class_mix: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    """The class-mix check, per class and direction (`<class>+`, `<class>-`), per image."""
    distribution: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    """The answers' distribution, per signal and bound (`top_score<=0.9`)."""
    stable_latency: dict[float, float] = Field(default_factory=dict)
    """Stable's latency buckets over the rollout's counted windows: the latency test's
    bound for a window is set from them *before* the window is seen."""

    @field_validator("stable_latency", mode="before")
    @classmethod
    def _parse_buckets(cls, value: Any) -> Any:
        return _parse_histogram(value)

    @field_serializer("stable_latency")
    def _dump_buckets(self, latency: dict[float, float]) -> dict[str, Any]:
        return _dump_histogram(latency)

    @field_validator("quality", "class_mix", "distribution")
    @classmethod
    def _quality_len(cls, value: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
        for name, lam in value.items():
            if len(lam) != len(stats.QUALITY_GRID):
                raise ValueError(f"quality.{name}: expected {len(stats.QUALITY_GRID)} values "
                                 "(one per alternative)")
        return value

    @field_validator("relative", "latency_relative")
    @classmethod
    def _relative_len(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) != len(stats.RELATIVE_GRID):
            raise ValueError(f"expected {len(stats.RELATIVE_GRID)} values (one per alternative)")
        return value

    @field_validator("limit", "latency_limit")
    @classmethod
    def _limit_len(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) != len(stats.LIMIT_GRID):
            raise ValueError(f"expected {len(stats.LIMIT_GRID)} values (one per alternative)")
        return value


class LastDecision(BaseModel):
    """The most recent decision, as recorded in the commit that wrote this state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["step", "hold", "rollback", "promote"]
    reason: str
    at: dt.datetime
    cause: str | None = None
    weight: int | None = None


class CanaryState(BaseModel):
    """The content of `promotion.yaml` (frozen; copy with `with_`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = STATE_VERSION
    model: str
    phase: Phase = Phase.IDLE
    stable: str | None = None
    candidate: str | None = None
    weight: int = Field(default=0, ge=0, le=100)
    """Percent of traffic the candidate should get (what the router is set to)."""
    started_at: dt.datetime | None = None
    """When the rollout began (its first step)."""
    step_started_at: dt.datetime | None = None
    canary_counts: Counts = Counts()
    stable_counts: Counts = Counts()
    statistics: Statistics = Statistics()
    """The sequential tests' state since the rollout began (not reset per step)."""
    pass_evidence: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    """Per model-quality check, this step's evidence that the canary is within its margins
    (`stats.PASS_GRID` log likelihood ratios, `quality.update_pass`); reset each step."""
    empty_intervals: int = Field(default=0, ge=0)
    """Consecutive intervals without usable evidence (no data, traffic not shifted)."""
    empty_since: dt.datetime | None = None
    fault_intervals: int = Field(default=0, ge=0)
    """Consecutive intervals the metric source failed."""
    fault_since: dt.datetime | None = None
    stable_requests_without_canary: int = Field(default=0, ge=0)
    """Stable requests since the canary last served one (is it down?)."""
    canary_silent_since: dt.datetime | None = None
    pause_reason: str | None = None
    requested: Literal["abort", "promote"] | None = None
    """An action a human asked for; `decide()` carries it out next interval."""
    requested_by: str | None = None
    awaiting_approval: int | None = Field(default=None, ge=1, le=100)
    """`approval: step`: the weight the analysis would step to, waiting for a person."""
    approved_by: str | None = None
    """Who approved the next step up (`mlops canary approve`); spent by that step."""
    last_decision: LastDecision | None = None

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        return valid_model_name(value)  # contracts.names: one rule for every room

    @field_validator("stable", "candidate")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        # promotion.yaml is a file people edit: a version becomes a path in the controller's
        # work dir and a PromQL label value, so `../..` or a quote must stop here.
        problem = version_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("pass_evidence")
    @classmethod
    def _pass_len(cls, value: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
        for name, lam in value.items():
            if len(lam) != len(stats.PASS_GRID):
                raise ValueError(f"pass_evidence.{name}: expected {len(stats.PASS_GRID)} values")
        return value

    @field_validator("started_at", "step_started_at", "empty_since", "fault_since",
                     "canary_silent_since")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value

    @property
    def paused(self) -> bool:
        """True when analysis is stopped until someone resumes it."""
        return self.phase is Phase.PAUSED

    def with_(self, **changes: Any) -> CanaryState:
        """A validated copy with `changes` applied."""
        data = self.model_dump()
        data.update(changes)
        return CanaryState.model_validate(data)

    def reset_step(self, now: dt.datetime) -> CanaryState:
        """A copy whose per-step counters start afresh at `now`."""
        return self.with_(
            step_started_at=now, canary_counts=Counts(), stable_counts=Counts(), pass_evidence={},
            empty_intervals=0,
            empty_since=None, stable_requests_without_canary=0, canary_silent_since=None,
        )


def start_canary(model: str, stable: str, candidate: str, weight: int,
                 now: dt.datetime) -> CanaryState:
    """The state written when a candidate's first step is merged."""
    return CanaryState(model=model, phase=Phase.PROGRESSING, stable=stable, candidate=candidate,
                       weight=weight, started_at=now, step_started_at=now)


def pause(state: CanaryState, by: str = "human") -> CanaryState:
    """Stop the analysis; the weights stay where they are."""
    if not state.phase.active:
        raise StateError(f"{state.model}: nothing to pause (phase {state.phase.value})")
    return state.with_(phase=Phase.PAUSED, pause_reason=f"paused by {by}")


def resume(state: CanaryState, now: dt.datetime) -> CanaryState:
    """Resume analysis; the budgets start afresh, the statistics continue."""
    if state.phase is not Phase.PAUSED:
        raise StateError(f"{state.model}: not paused (phase {state.phase.value})")
    return state.with_(phase=Phase.PROGRESSING, pause_reason=None, empty_intervals=0,
                       empty_since=None, fault_intervals=0, fault_since=None,
                       stable_requests_without_canary=0, canary_silent_since=None,
                       step_started_at=state.step_started_at or now)


def request_abort(state: CanaryState, by: str = "human") -> CanaryState:
    """Ask the next decision to roll the candidate back."""
    if not state.phase.active:
        raise StateError(f"{state.model}: nothing to abort (phase {state.phase.value})")
    return state.with_(requested="abort", requested_by=by)


def approve_step(state: CanaryState, by: str = "human") -> CanaryState:
    """Approve the next step up (`approval: step`); given ahead of time, it waits for it."""
    if state.phase not in (Phase.PROGRESSING, Phase.WAITING):
        raise StateError(f"{state.model}: nothing to approve (phase {state.phase.value})")
    return state.with_(approved_by=by)


def request_promote(state: CanaryState, by: str = "human") -> CanaryState:
    """Ask the next decision to promote the candidate now, skipping analysis."""
    if not state.phase.active:
        raise StateError(f"{state.model}: nothing to promote (phase {state.phase.value})")
    return state.with_(requested="promote", requested_by=by)


def load_state(source: str | Mapping[str, Any], origin: str = "promotion.yaml") -> CanaryState:
    """Parse `promotion.yaml` (YAML text or an already-loaded mapping)."""
    data: Any = source
    if isinstance(source, str):
        try:
            data = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise StateError(f"{origin}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise StateError(f"{origin}: expected a mapping, got {type(data).__name__}")
    try:
        return CanaryState.model_validate(dict(data))
    except ValidationError as exc:
        problems = "; ".join(
            f"{origin}: {'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise StateError(problems) from None


def dump_state(state: CanaryState) -> dict[str, Any]:
    """The plain, YAML/JSON-safe dict for `promotion.yaml` (round-trips with load)."""
    return state.model_dump(mode="json")


def dump_state_yaml(state: CanaryState) -> str:
    """`promotion.yaml` text, keys in declaration order."""
    return yaml.safe_dump(dump_state(state), sort_keys=False, default_flow_style=None)
