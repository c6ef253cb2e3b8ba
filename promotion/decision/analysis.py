"""The canary decision: `decide(policy, state, observations, now) -> Decision`.

A pure function: no clock, no socket, no file. It returns what to do and the next
state, which the controller commits together, so replaying the same inputs gives the
same decision. The rules are `RULES`, a table of small pure functions `decide` walks
in order until one decides (the checks are `checks.CHECKS`, their outcomes
`VERDICTS`). Outcomes other than success are three types: a `Rollback` with cause
`verdict`, a `Hold` with cause `fault` and a `Hold` with cause
`insufficient-evidence`; each decision carries its `Evidence`.
The rules in order and why: docs/inside-promotion.md; the statistics: docs/canary.md.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from typing import Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict

from promotion.decision import checks, class_mix, distribution, quality, stats
from promotion.decision.checks import TRAFFIC_ALPHA, Check, images_answered
from promotion.decision.observations import (
    Histogram,
    Observations,
    VersionWindow,
    count_above,
    histogram_quantile,
    merge_histograms,
)
from promotion.decision.policy import Budget, CanaryPolicy
from promotion.decision.state import CanaryState, Counts, LastDecision, Phase, Statistics

__all__ = [
    "DOWN_ALPHA",
    "TRAFFIC_ALPHA",
    "Check",
    "Decision",
    "Evidence",
    "Hold",
    "HoldCause",
    "Promote",
    "Rollback",
    "Step",
    "decide",
    "decide_ready",
    "shadowed",
    "RULES",
    "VERDICTS",
]

DOWN_ALPHA = 1e-6
"""A canary is called down when its run of zero requests has chance below
this. Stricter than `TRAFFIC_ALPHA` because the run is re-examined every
interval and the verdict is a rollback: at 0.2 req/s, 10 % weight, a healthy
canary then sees a false "down" less than once in thousands of hours."""


class HoldCause(str, enum.Enum):
    """Why nothing moves."""

    INSUFFICIENT_EVIDENCE = "insufficient-evidence"
    """Not enough usable requests yet (none, too few, or traffic not shifted)."""
    FAULT = "fault"
    """The metric source failed: we could not look."""
    PAUSED = "paused"
    """A human or a spent budget paused the rollout."""
    INACTIVE = "inactive"
    """No rollout in flight (idle, promoted, rolled back)."""
    NOT_READY = "not-ready"
    """The merged candidate is not deployed and ready yet: no traffic, nothing judged."""
    AWAITING_APPROVAL = "awaiting-approval"
    """`approval: step`: the analysis passed the step; a person has not approved it yet."""


class Evidence(BaseModel):
    """What a decision was based on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: int = 0
    window: dict[str, Any] = {}
    step: dict[str, Any] = {}
    checks: tuple[Check, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict (commit trailer, log line, /metrics labels)."""
        return {"weight": self.weight, "window": self.window, "step": self.step,
                "checks": [c.to_dict() for c in self.checks]}

    def check(self, name: str) -> Check | None:
        """The check called `name`, if it was made."""
        return next((c for c in self.checks if c.name == name), None)


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    reason: str
    cause: str
    evidence: Evidence = Evidence()
    state: CanaryState
    """The state to commit with this decision."""

    def to_dict(self) -> dict[str, Any]:
        """The decision as a plain dict (without the state)."""
        out: dict[str, Any] = {"kind": self.kind, "cause": self.cause,
                               "reason": self.reason}
        to = getattr(self, "to", None)  # only a Step has one
        if to is not None:
            out["to"] = to
        out["evidence"] = self.evidence.to_dict()
        return out

    def subject(self) -> str:
        """A commit subject, e.g. `canary(shapes-detector): 10% -> 25% (v2 over v1)`."""
        s = self.state
        kind = self.kind
        before = self.evidence.weight
        over = f"({s.candidate} over {s.stable})"
        if kind == "step":
            return f"canary({s.model}): {before}% -> {s.weight}% {over}"
        if kind == "promote":
            return f"canary({s.model}): promote {s.candidate} at 100% {over}"
        if kind == "rollback":
            return f"canary({s.model}): rollback {s.candidate} {before}% -> 0% ({self.cause})"
        return f"canary({s.model}): hold at {s.weight}% ({self.cause})"

    def trailers(self) -> dict[str, str]:
        """Git commit trailers: `Mlops-Decision`, `Mlops-Reason`, `Mlops-Evidence`."""
        kind = self.kind
        return {
            "Mlops-Decision": f"{kind}/{self.cause}",
            "Mlops-Reason": self.reason,
            "Mlops-Evidence": json.dumps(self.evidence.to_dict(), sort_keys=True,
                                         separators=(",", ":")),
        }


class Step(_Decision):
    """Move the candidate to weight `to`."""

    kind: Literal["step"] = "step"
    to: int


class Hold(_Decision):
    """Keep the weights; `cause` says why (a `HoldCause` value)."""

    kind: Literal["hold"] = "hold"


class Rollback(_Decision):
    """Send the candidate's weight to 0. Cause: verdict | requested | budget."""

    kind: Literal["rollback"] = "rollback"


class Promote(_Decision):
    """The candidate takes all traffic and becomes stable. Cause: passed | requested."""

    kind: Literal["promote"] = "promote"


Decision = Union[Step, Hold, Rollback, Promote]


def _record(state: CanaryState, kind: str, reason: str, cause: str, now: dt.datetime,
            **changes: Any) -> CanaryState:
    weight = changes.get("weight", state.weight)
    last = LastDecision(kind=kind, reason=reason, at=now, cause=cause, weight=weight)  # type: ignore[arg-type]
    return state.with_(last_decision=last, **changes)


def _hold(state: CanaryState, cause: HoldCause, reason: str, now: dt.datetime,
          evidence: Evidence, **changes: Any) -> Hold:
    return Hold(reason=reason, cause=cause.value, evidence=evidence,
                state=_record(state, "hold", reason, cause.value, now, **changes))


def _rollback(state: CanaryState, cause: str, reason: str, now: dt.datetime,
              evidence: Evidence, **changes: Any) -> Rollback:
    new = _record(state, "rollback", reason, cause, now, phase=Phase.ROLLED_BACK, weight=0,
                  requested=None, **changes)
    return Rollback(reason=reason, cause=cause, evidence=evidence, state=new)


def _promote(state: CanaryState, cause: str, reason: str, now: dt.datetime,
             evidence: Evidence, **changes: Any) -> Promote:
    new = _record(state, "promote", reason, cause, now, phase=Phase.PROMOTED, weight=100,
                  requested=None, **changes)
    return Promote(reason=reason, cause=cause, evidence=evidence, state=new)


def _spent(budget: Budget, intervals: int, since: dt.datetime | None, now: dt.datetime) -> bool:
    if budget.max_intervals is not None and intervals >= budget.max_intervals:
        return True
    return (budget.max_seconds is not None and since is not None
            and (now - since).total_seconds() >= budget.max_seconds)


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


def latency_bound(policy: CanaryPolicy, stable_before: Histogram | None,
                  pooled: Histogram | None = None) -> float | None:
    """The slow-request bound of the latency test for a window, in seconds:
    `max_latency_ratio` x a p99 (and at least `min_latency_difference_ms` above it).

    The p99 is stable's over its counted windows *before* this one. Fixed before
    the window is seen, the bound cannot depend on either version's sample in it,
    so under "both versions are as fast" the canary's share of the window's slow
    requests is its share of requests (Binomial), whatever the bound. A bound
    from the window's own stable sample broke that: with identical versions it
    rolled back 3 % (lognormal latency) to 15 % (2 % of requests 5x slower) of
    canaries held an hour, at a stated 0.4 %. Stable's, not the pool's: a canary
    slow on every request with more than 1 % of the traffic drags a pooled p99
    up to its own latency and never counts as slow.

    Before stable has any counted window (the rollout's first), the p99 of the
    window's pooled sample (`pooled`, both versions): under the null the pooled
    requests are exchangeable, so given the pool the canary's slow ones are a
    random draw of its size (hypergeometric, within the binomial test's
    bound), which keeps the first window valid at the cost of that blind spot.
    None: no p99 to take."""
    source = stable_before or pooled
    p99 = histogram_quantile(0.99, source) if source else None
    if p99 is None:
        return None
    return max(p99 * policy.max_latency_ratio, p99 + policy.min_latency_difference_ms / 1000)


def _latency_updates(policy: CanaryPolicy, rel: Any, lim: Any, obs: Observations,
                     stable_before: Histogram | None) -> tuple[Any, Any]:
    """This window's evidence on latency: slow-request share vs stable, tail above the limit."""
    c, s = obs.canary.latency, obs.stable.latency
    if not c:
        return rel, lim
    above_limit = count_above(c, policy.max_p99_ms / 1000)
    if above_limit is not None:
        lim = stats.update_limit(lim, above_limit[0], above_limit[1], stats.P99_TAIL)
    pooled = merge_histograms(c, s)
    bound = latency_bound(policy, stable_before, pooled)
    if s and bound is not None:
        edges = sorted(le for le in pooled if not math.isinf(le))
        slow_c, slow_s = count_above(c, bound, edges), count_above(s, bound, edges)
        if slow_c is not None and slow_s is not None:
            rel = stats.update_relative(rel, slow_c[0], slow_s[0], slow_c[1], slow_s[1])
    return rel, lim


def _merge_quality(a: dict[str, dict[float, float]],
                   b: dict[str, dict[float, float]]) -> dict[str, dict[float, float]]:
    return {k: merge_histograms(a.get(k), b.get(k)) for k in sorted(set(a) | set(b))}


def _merge_classes(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: float(a.get(k, 0.0)) + float(b.get(k, 0.0)) for k in sorted(set(a) | set(b))}


def _window_dict(obs: Observations) -> dict[str, Any]:
    share = obs.observed_share
    return {
        "seconds": obs.window_seconds,
        "canary": {"requests": obs.canary.requests, "errors": obs.canary.errors},
        "stable": {"requests": obs.stable.requests, "errors": obs.stable.errors},
        "canary_share": None if share is None else round(share, 6),
    }


def _step_dict(state: CanaryState) -> dict[str, Any]:
    c, s = state.canary_counts, state.stable_counts
    return {"canary": {"requests": c.requests, "errors": c.errors},
            "stable": {"requests": s.requests, "errors": s.errors},
            "since": state.step_started_at.isoformat() if state.step_started_at else None}


def _insufficient(policy: CanaryPolicy, state: CanaryState, reason: str, now: dt.datetime,
                  evidence: Evidence) -> Decision:
    """Hold for lack of usable evidence; pause or roll back once the budget is spent."""
    intervals = state.empty_intervals + 1
    since = state.empty_since or now
    budget = policy.insufficient_evidence
    if _spent(budget, intervals, since, now):
        why = (f"insufficient evidence for {intervals} intervals since {since.isoformat()} "
               f"({reason})")
        if budget.action == "rollback":
            return _rollback(state, "budget", why, now, evidence,
                             empty_intervals=intervals, empty_since=since)
        return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE, f"{why}: paused", now, evidence,
                     phase=Phase.PAUSED, pause_reason=f"paused: {why}",
                     empty_intervals=intervals, empty_since=since)
    return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE, f"insufficient evidence: {reason}", now,
                 evidence, empty_intervals=intervals, empty_since=since)


def _base(state: CanaryState, obs: Observations) -> Evidence:
    """The evidence every decision carries: the weight, the window, the step so far."""
    return Evidence(weight=state.weight, window=_window_dict(obs), step=_step_dict(state))


Rule = Callable[[CanaryPolicy, CanaryState, Observations, dt.datetime], "Decision | CanaryState"]
"""A rule of `decide`: (policy, state, window, now) -> a decision, which ends the walk,
or the state the next rule sees (unchanged, or with the rule's counters updated)."""


def inactive(policy: CanaryPolicy, state: CanaryState, obs: Observations,
             now: dt.datetime) -> Decision | CanaryState:
    """Rule 1: no rollout in flight (idle, promoted, rolled back): hold."""
    if state.phase.active:
        return state
    what = "no canary in progress" if state.phase is Phase.IDLE else \
        f"rollout finished ({state.phase.value})"
    return Hold(reason=what, cause=HoldCause.INACTIVE.value, evidence=_base(state, obs),
                state=state)


def requested(policy: CanaryPolicy, state: CanaryState, obs: Observations,
              now: dt.datetime) -> Decision | CanaryState:
    """Rule 2: a human's abort or promote is carried out, whatever the window says."""
    who = state.requested_by or "human"
    if state.requested == "abort":
        return _rollback(state, "requested", f"aborted by {who}", now, _base(state, obs))
    if state.requested == "promote":
        return _promote(state, "requested", f"promoted by {who}", now, _base(state, obs))
    return state


def paused(policy: CanaryPolicy, state: CanaryState, obs: Observations,
           now: dt.datetime) -> Decision | CanaryState:
    """Rule 2: a paused rollout holds; a waiting one is `decide_ready`'s, never a window's."""
    if state.phase is Phase.PAUSED:
        return Hold(reason=state.pause_reason or "paused by human", cause=HoldCause.PAUSED.value,
                    evidence=_base(state, obs), state=state)
    if state.phase is Phase.WAITING:
        return Hold(reason="waiting until the candidate is deployed and ready",
                    cause=HoldCause.NOT_READY.value, evidence=_base(state, obs), state=state)
    return state


def metric_fault(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                 now: dt.datetime) -> Decision | CanaryState:
    """Rule 3: a metric-source fault holds (cause `fault`), counted against the fault
    budget, then pauses or rolls back; a window without one clears the count."""
    if obs.fault is None:
        return state.with_(fault_intervals=0, fault_since=None) if state.fault_intervals \
            else state
    base = _base(state, obs)
    intervals = state.fault_intervals + 1
    since = state.fault_since or now
    if _spent(policy.faults, intervals, since, now):
        why = f"metric source failing for {intervals} intervals: {obs.fault}"
        if policy.faults.action == "rollback":
            return _rollback(state, "budget", why, now, base, fault_intervals=intervals,
                             fault_since=since)
        return _hold(state, HoldCause.FAULT, f"{why}: paused", now, base,
                     phase=Phase.PAUSED, pause_reason=f"paused: {why}",
                     fault_intervals=intervals, fault_since=since)
    return _hold(state, HoldCause.FAULT, f"metric source fault: {obs.fault}", now, base,
                 fault_intervals=intervals, fault_since=since)


def answers_differ(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                   now: dt.datetime) -> Decision | CanaryState:
    """Rule 3b: the paired answers say the canary names the same boxes differently: roll
    back at once, whatever the client traffic (evidence of its own)."""
    for paired in checks.answers_check(policy, state, obs):
        if paired.verdict == "fail":
            return _rollback(state, "verdict", f"answers: {paired.detail.split(' (')[0]}", now,
                             _base(state, obs).model_copy(update={"checks": (paired,)}))
    return state


def no_requests(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                now: dt.datetime) -> Decision | CanaryState:
    """Rule 4: no requests at all: hold for insufficient evidence (never a pass, never a
    failure), counted against its budget."""
    if obs.total_requests == 0:
        return _insufficient(policy, state, "no requests in the window", now, _base(state, obs))
    return state


def canary_down(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                now: dt.datetime) -> Decision | CanaryState:
    """Rule 5: the canary serves nothing while stable serves so many requests that chance
    cannot explain it (`DOWN_ALPHA`): hold for `no_traffic_grace`, then roll back. The run
    of stable requests without the canary is carried in the state; a canary request ends it."""
    if obs.canary.requests > 0 or obs.stable.requests == 0:
        if obs.canary.requests > 0 and state.stable_requests_without_canary:
            return state.with_(stable_requests_without_canary=0, canary_silent_since=None)
        return state
    streak = state.stable_requests_without_canary + obs.stable.requests
    silent_since = state.canary_silent_since or (now - dt.timedelta(seconds=obs.window_seconds))
    chance = (1.0 - state.weight / 100.0) ** streak
    check = Check(name="traffic", verdict="fail" if chance < DOWN_ALPHA else "unknown",
                  value=0.0, threshold=float(state.weight), samples=streak, statistic=chance,
                  detail=f"canary served 0 of the last {streak} requests")
    evidence = _base(state, obs).model_copy(update={"checks": (check,)})
    state = state.with_(stable_requests_without_canary=streak, canary_silent_since=silent_since)
    if chance >= DOWN_ALPHA:
        return state
    silent_for = (now - silent_since).total_seconds()
    if silent_for >= policy.no_traffic_grace:
        return _rollback(state, "verdict",
                         f"canary receives no traffic ({streak} stable requests, "
                         f"none to the canary for {silent_for:.0f}s): it is down",
                         now, evidence)
    return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE,
                 f"canary receives no traffic for {silent_for:.0f}s "
                 f"(grace {policy.no_traffic_grace:.0f}s)", now, evidence)


def traffic_not_shifted(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                        now: dt.datetime) -> Decision | CanaryState:
    """Rule 5: the canary's share is off its weight beyond tolerance and chance: the traffic
    has not moved yet; hold, and the window's numbers do not count."""
    for traffic in checks.traffic(policy, state, obs):
        if traffic.verdict == "fail":
            return _insufficient(
                policy, state,
                f"traffic not shifted: canary got {obs.observed_share:.1%} of "
                f"{obs.total_requests} requests, weight is {state.weight}%", now,
                _base(state, obs).model_copy(update={"checks": (traffic,)}))
    return state


def _add(before: Counts, window: VersionWindow) -> Counts:
    """The step's counts with one window's added."""
    return Counts(requests=before.requests + window.requests,
                  errors=before.errors + window.errors,
                  latency=merge_histograms(before.latency, window.latency),
                  quality=_merge_quality(before.quality, window.quality),
                  classes=_merge_classes(before.classes, window.classes))


def _pass_evidence(policy: CanaryPolicy, state: CanaryState,
                   obs: Observations) -> dict[str, Any]:
    """The evidence that the answers are within their margins, with the window's added."""
    per_check = {c.name: quality.update_pass(state.pass_evidence.get(c.name), c,
                                             obs.canary.quality.get(c.signal),
                                             obs.stable.quality.get(c.signal))
                 for c in policy.quality.checks}
    mix = {k: v for k, v in state.pass_evidence.items() if k.startswith(class_mix.PASS_KEY)}
    return class_mix.update_pass(per_check | mix, policy.quality, obs.canary.classes,
                                 obs.stable.classes, images_answered(obs.canary.quality),
                                 images_answered(obs.stable.quality))


def _statistics(policy: CanaryPolicy, st: Statistics, obs: Observations) -> Statistics:
    """The sequential tests with the window's evidence added."""
    relative = stats.update_relative(st.relative, obs.canary.errors, obs.stable.errors,
                                     obs.canary.requests, obs.stable.requests)
    limit = stats.update_limit(st.limit, obs.canary.errors, obs.canary.requests,
                               policy.max_error_rate)
    lat_rel, lat_lim = _latency_updates(policy, st.latency_relative, st.latency_limit, obs,
                                        st.stable_latency)
    qual = {c.name: quality.update(st.quality.get(c.name), c, obs.canary.quality.get(c.signal),
                                   obs.stable.quality.get(c.signal))
            for c in policy.quality.checks}
    return Statistics(
        relative=_floats(relative), limit=_floats(limit), latency_relative=_floats(lat_rel),
        latency_limit=_floats(lat_lim), quality=qual,
        class_mix=class_mix.update(st.class_mix, policy.quality, obs.canary.classes,
                                   obs.stable.classes, images_answered(obs.canary.quality),
                                   images_answered(obs.stable.quality)),
        distribution=distribution.update(st.distribution, policy.quality.distribution,
                                         obs.canary.quality, obs.stable.quality),
        stable_latency=merge_histograms(st.stable_latency, obs.stable.latency))


def count_window(policy: CanaryPolicy, state: CanaryState, obs: Observations,
                 now: dt.datetime) -> Decision | CanaryState:
    """Rule 6: the window counts: its numbers join the step's and the sequential tests,
    and the insufficient-evidence run ends."""
    return state.with_(
        canary_counts=_add(state.canary_counts, obs.canary),
        stable_counts=_add(state.stable_counts, obs.stable),
        empty_intervals=0, empty_since=None,
        pass_evidence=_pass_evidence(policy, state, obs),
        statistics=_statistics(policy, state.statistics, obs))


VerdictRule = Callable[[CanaryPolicy, CanaryState, Evidence, dt.datetime], "Decision | None"]
"""A rule over a counted window's evidence: a decision, or None for the next one."""


def _failure(policy: CanaryPolicy, check: Check) -> str:
    """What a failed check says in a rollback's reason."""
    if check.name.startswith("quality_"):
        return (f"model quality ({check.name.removeprefix('quality_')}): "
                f"{check.detail.split(' (SPRT')[0]}")
    return {
        "errors_vs_stable": "canary errors exceed stable's",
        "error_rate_limit": f"canary error rate above {policy.max_error_rate:g}",
        "latency_p99": f"canary p99 above {policy.max_p99_ms:g} ms",
        "latency_vs_stable": f"canary slower than stable (tail beyond "
                             f"{policy.max_latency_ratio:g}x the p99)",
    }.get(check.name, check.name)


def rejected(policy: CanaryPolicy, state: CanaryState, evidence: Evidence,
             now: dt.datetime) -> Decision | None:
    """Rule 6: any check that fails rolls back (cause `verdict`), naming each."""
    failed = [c for c in evidence.checks if c.verdict == "fail"]
    if not failed:
        return None
    reason = "; ".join(_failure(policy, c) for c in failed)
    return _rollback(state, "verdict", reason, now, evidence)


def collecting(policy: CanaryPolicy, state: CanaryState, evidence: Evidence,
               now: dt.datetime) -> Decision | None:
    """Rule 7: a check not yet settled either way holds: "not yet rejected" is not "good"."""
    waiting = [c for c in evidence.checks if c.verdict == "unknown"]
    if not waiting:
        return None
    missing = ", ".join(
        f"{c.name} ({c.samples or 0} samples)" if c.name != "requests"
        else f"{state.canary_counts.requests}/{policy.min_requests} canary requests"
        for c in waiting)
    return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE, f"collecting evidence: {missing}",
                 now, evidence)


def advance(policy: CanaryPolicy, state: CanaryState, evidence: Evidence,
            now: dt.datetime) -> Decision | None:
    """Rule 7: every check passed: promote after the last step, else step (with
    `approval: step`, only once a person approved it; until then hold)."""
    nxt = policy.next_step(state.weight)
    if nxt is None:
        return _promote(state, "passed", f"all checks passed at {state.weight}%", now, evidence)
    reason = f"{state.weight}% -> {nxt}%: all checks passed"
    if policy.approval == "step":
        if not state.approved_by:
            return _hold(state, HoldCause.AWAITING_APPROVAL,
                         f"{reason}; waiting for approval (`mlops canary approve "
                         f"{state.model}`)", now, evidence, awaiting_approval=nxt)
        reason += f"; approved by {state.approved_by}"
    moved = state.reset_step(now).with_(awaiting_approval=None, approved_by=None)
    return Step(to=nxt, reason=reason, cause="passed", evidence=evidence,
                state=_record(moved, "step", reason, "passed", now, weight=nxt))


VERDICTS: tuple[VerdictRule, ...] = (rejected, collecting, advance)
"""What a counted window's checks lead to, in order; `advance` always decides."""


def judge(policy: CanaryPolicy, state: CanaryState, obs: Observations,
          now: dt.datetime) -> Decision | CanaryState:
    """Rules 6-7: make the `checks.CHECKS` on the counted window, then walk `VERDICTS`."""
    made = tuple(c for check in checks.CHECKS for c in check(policy, state, obs))
    evidence = Evidence(weight=state.weight, window=_window_dict(obs), step=_step_dict(state),
                        checks=made)
    for verdict in VERDICTS:
        decision = verdict(policy, state, evidence, now)
        if decision is not None:
            return decision
    raise AssertionError("`advance` always decides")


RULES: tuple[Rule, ...] = (
    inactive,
    requested,
    paused,
    metric_fault,
    answers_differ,
    no_requests,
    canary_down,
    traffic_not_shifted,
    count_window,
    judge,
)
"""`decide`'s rules in the order of the module docstring; `judge` always decides."""


def decide(policy: CanaryPolicy, state: CanaryState, observations: Observations,
           now: dt.datetime) -> Decision:
    """Decide what the rollout does after one window: walk `RULES` until one decides."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    for rule in RULES:
        outcome = rule(policy, state, observations, now)
        if not isinstance(outcome, CanaryState):
            return outcome
        state = outcome
    raise AssertionError("`judge` always decides")


def shadowed(before: CanaryState, decision: Decision) -> Decision:
    """`mode: shadow`: the verdict of `decision`, recorded but not acted on.

    A step, promotion or rollback reached by the analysis becomes a `Hold` with
    cause `shadow-<kind>` whose reason says what would have happened; its state
    keeps the analysis going (a step's counters start afresh, as a step would
    have them) but not the weights or the phase, which only people change in
    this mode. What people asked for (`requested`) and plain holds pass through.
    """
    if isinstance(decision, Hold) or decision.cause in ("requested", "manual", "ready"):
        return decision
    state = decision.state.with_(phase=before.phase, weight=before.weight)
    what = {"step": f"would step to {getattr(decision, 'to', '?')}%",
            "promote": "would promote", "rollback": "would roll back"}[decision.kind]
    return Hold(reason=f"shadow: {what}: {decision.reason}", cause=f"shadow-{decision.kind}",
                evidence=decision.evidence, state=state)


def decide_ready(policy: CanaryPolicy, state: CanaryState, ready: bool, reason: str,
                 now: dt.datetime) -> Decision:
    """While a merged candidate waits at 0 %: step to the first weight once it is ready.

    Pure, like :func:`decide`. Ready: `Step` to `policy.steps[0]`, and the
    rollout's clocks (`started_at`, the step, every budget, the no-traffic
    grace) start now, not at the merge. Not ready: `Hold` (not committed), or
    after `policy.ready_timeout` since the merge a `Rollback` that names the
    runtime's last reason. Any other phase is :func:`decide`'s.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    evidence = Evidence(weight=state.weight, window={}, step=_step_dict(state),
                        checks=(Check(name="ready", verdict="pass" if ready else "unknown",
                                      detail=reason),))
    if state.phase is not Phase.WAITING:
        return decide(policy, state, Observations(window_seconds=0.0), now)
    if ready:
        first = policy.steps[0]
        new = _record(state.reset_step(now), "step", f"canary ready: {reason}", "ready", now,
                      phase=Phase.PROGRESSING, weight=first, started_at=now,
                      statistics=Statistics(), fault_intervals=0, fault_since=None)
        return Step(reason=f"canary ready ({reason}): {first}%", cause="ready",
                    evidence=evidence, state=new, to=first)
    waited = (now - (state.started_at or now)).total_seconds()
    if waited >= policy.ready_timeout:
        return _rollback(state, "not-ready", f"not deployed and ready after {waited:.0f}s "
                         f"(ready_timeout {policy.ready_timeout:.0f}s): {reason}", now, evidence)
    return Hold(reason=f"waiting for the candidate to be deployed and ready: {reason}",
                cause=HoldCause.NOT_READY.value, evidence=evidence, state=state)
