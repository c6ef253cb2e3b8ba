"""The canary decision: `decide(policy, state, observations, now) -> Decision`.

A pure function (principles §2): it reads no clock, no socket and no file. The
controller gives it the policy, the state read from git, one window of
observations and the time; it returns what to do *and* the next state, which
the controller commits together (one decision, one commit). Replaying the
same inputs gives the same decision, which is what makes a restarted
controller neither repeat nor skip a step.

The order of the rules is the policy, so it is written down here:

1. Phases without a rollout in flight (idle, promoted, rolled back): hold.
2. A human's request (abort, promote) is carried out; a paused rollout holds.
3. A metric-source fault holds with cause `fault`, counted against the fault
   budget (then pause or roll back, per policy). Faults are ours, not the
   canary's: they never count as evidence either way.
3b. The paired answers (`promotion/decision/answers.py`: the same probe images answered
   by both versions) say the canary names the same boxes differently: roll
   back with cause `verdict`, at once and whatever the client traffic, which
   a rotated label map on a balanced class mix gives no other check to see.
4. No requests at all: hold, `insufficient evidence`, counted against the
   insufficient-evidence budget. No data is never a pass and never a failure.
5. Traffic: if the canary serves nothing while stable serves enough requests
   that this cannot be chance, it is down: hold for `no_traffic_grace`, then
   roll back. If its observed share is off its weight (beyond tolerance and
   beyond chance) the traffic has not moved yet: hold, and the window's
   numbers do not count.
6. The window's counts are added to the step's and to the sequential tests
   (`promotion/decision/stats.py`): errors vs stable, error rate vs its limit,
   slow requests vs stable (slow: beyond a bound set from stable's earlier
   windows, before this one is seen), p99 vs its limit, and the model's
   answers: poor answers (`quality.py`), their distribution
   (`distribution.py`), the classes per image (`class_mix.py`). Any test that
   rejects is a rollback with cause `verdict`; together with the paired
   answers (3b) they are wrong on a healthy canary with probability at most
   the policy's one `alpha`, however often we look (each spends its share,
   `stats.ALPHA_SHARES`).
7. Step (or promote after the last step) when the canary served
   `min_requests` in this step and the step's own numbers are within the
   policy (error rate <= max, p99 <= max and within `max_latency_ratio` of
   stable's on `min_latency_samples`); otherwise hold and keep collecting.
   "Not yet rejected" alone is not "good": a canary at 3 % errors against a
   1 % limit is held, not stepped, until the evidence settles either way.
   The model's answers pass only once shown within their margins by
   anytime-valid confidence sequences, so a canary beyond them passes a step
   with probability at most 1 - `quality.pass_confidence`.

Modes (`policy.mode`, `policy.approval`): in `shadow` the controller passes
each decision through `shadowed`, so verdicts are recorded and weights stay;
with `approval: step`, rule 7's step waits (cause `awaiting-approval`) until
`approved_by` is set, while rules 1-6 go on judging.

Three outcomes other than success are three types (principles §10): a `Rollback`
with cause `verdict` (the canary is worse), a `Hold` with cause `fault` (we
could not see) and a `Hold` with cause `insufficient-evidence` (nothing to
judge yet). Each decision carries `Evidence` that serialises to a plain dict
for commit trailers, logs and the controller's `/metrics`.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict

from promotion.decision import answers, class_mix, distribution, quality, stats
from promotion.decision.observations import (
    Histogram,
    Observations,
    count_above,
    histogram_quantile,
    merge_histograms,
)
from promotion.decision.policy import Budget, CanaryPolicy, QualityCheck
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
]

TRAFFIC_ALPHA = 1e-3
"""A window's traffic share is called off only when chance explains it with
probability below this (Chernoff bound on the binomial tail). Being off only
holds the window, so a per-window level is enough."""

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


Verdict = Literal["pass", "fail", "unknown", "skipped"]


class Check(BaseModel):
    """One analysed value next to its threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    verdict: Verdict
    value: float | None = None
    threshold: float | None = None
    samples: int | None = None
    statistic: float | None = None
    """Sequential tests: log of the e-value (rejects at the threshold in `detail`).
    Traffic: the Chernoff bound on the chance of a share this far off."""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The check without empty fields, floats rounded for humans."""
        out: dict[str, Any] = {"name": self.name, "verdict": self.verdict}
        for key in ("value", "threshold", "samples", "statistic"):
            val = getattr(self, key)
            if val is not None:
                out[key] = round(val, 6) if isinstance(val, float) else val
        if self.detail:
            out["detail"] = self.detail
        return out


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


def _kl(share: float, expected: float) -> float:
    """Bernoulli KL divergence KL(share || expected), the Chernoff exponent."""
    def term(a: float, b: float) -> float:
        if a == 0:
            return 0.0
        if b == 0:
            return math.inf
        return a * math.log(a / b)
    return term(share, expected) + term(1 - share, 1 - expected)


def _chance(n: int, share: float, expected: float) -> float:
    """Upper bound on P(a share this far from `expected` in n requests | expected)."""
    kl = _kl(share, expected)
    return 0.0 if math.isinf(kl) else math.exp(-n * kl)


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


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


def _images(hists: dict[str, Histogram]) -> float:
    """Images a version answered, from its per-image histograms (0: not measured)."""
    for signal in ("detections_per_image", "top_score"):
        hist = hists.get(signal)
        if hist:
            return float(max(hist.values()))
    return 0.0


def _merge_quality(a: dict[str, dict[float, float]],
                   b: dict[str, dict[float, float]]) -> dict[str, dict[float, float]]:
    return {k: merge_histograms(a.get(k), b.get(k)) for k in sorted(set(a) | set(b))}


def _quality_check(policy: CanaryPolicy, qc: QualityCheck, state: CanaryState, canary: Counts,
                   stable: Counts) -> Check:
    """One model-quality check (`promotion/decision/quality.py`) as evidence."""
    name = f"quality_{qc.name}"
    if state.weight >= 100:
        return Check(name=name, verdict="skipped", detail="stable serves no traffic at 100%")
    family = quality.family_log_e(state.statistics.quality, policy.quality.checks)
    v = quality.judge(policy.quality, qc, state.statistics.quality.get(qc.name),
                      canary.quality.get(qc.signal), stable.quality.get(qc.signal),
                      min_answers=policy.min_requests, alpha=policy.alpha, family=family,
                      pass_log_lr=state.pass_evidence.get(qc.name))
    return Check(name=name, verdict=v.verdict, value=v.canary_share, threshold=v.stable_share,
                 samples=v.samples, statistic=v.statistic, detail=v.detail)


def _merge_classes(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: float(a.get(k, 0.0)) + float(b.get(k, 0.0)) for k in sorted(set(a) | set(b))}


def _class_mix_check(policy: CanaryPolicy, state: CanaryState, canary: Counts,
                     stable: Counts) -> Check:
    """The class-mix check (`promotion/decision/class_mix.py`) as evidence."""
    if state.weight >= 100:
        return Check(name="quality_class_mix", verdict="skipped",
                     detail="stable serves no traffic at 100%")
    verdict, statistic, threshold, samples, detail = class_mix.judge(
        policy.quality, state.statistics.class_mix, canary.classes, stable.classes,
        _images(canary.quality), _images(stable.quality),
        policy.quality.min_answers or policy.min_requests, alpha=policy.alpha,
        pass_evidence=state.pass_evidence)
    return Check(name="quality_class_mix", verdict=verdict, samples=samples,
                 statistic=statistic, threshold=threshold, detail=detail)


def _distribution_check(policy: CanaryPolicy, state: CanaryState, canary: Counts,
                        stable: Counts) -> Check:
    """The answers' distribution (`promotion/decision/distribution.py`) as evidence."""
    if state.weight >= 100:
        return Check(name="quality_distribution", verdict="skipped",
                     detail="stable serves no traffic at 100%")
    verdict, statistic, threshold, samples, detail = distribution.judge(
        policy.quality.distribution, state.statistics.distribution, canary.quality,
        stable.quality, policy.quality.min_answers or policy.min_requests, alpha=policy.alpha)
    return Check(name="quality_distribution", verdict=verdict, samples=samples,
                 statistic=statistic, threshold=threshold, detail=detail)


def _answers_check(policy: CanaryPolicy, obs: Observations) -> Check | None:
    """The paired answers check as evidence; None when the window was not probed."""
    if obs.answers is None:
        return None
    verdict, share, limit, units, detail = answers.judge(policy.quality.answers, obs.answers,
                                                         alpha=policy.alpha)
    return Check(name="answers", verdict=verdict, value=share, threshold=limit,
                 samples=units, statistic=None if share is None else
                 (obs.answers.relabelled / obs.answers.matched if obs.answers.matched else 0.0),
                 detail=detail)


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


def decide(policy: CanaryPolicy, state: CanaryState, observations: Observations,
           now: dt.datetime) -> Decision:
    """Decide what the rollout does after one window; see the module docstring."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    obs = observations
    base = Evidence(weight=state.weight, window=_window_dict(obs), step=_step_dict(state))

    # 1. Nothing in flight.
    if not state.phase.active:
        what = "no canary in progress" if state.phase is Phase.IDLE else \
            f"rollout finished ({state.phase.value})"
        return Hold(reason=what, cause=HoldCause.INACTIVE.value, evidence=base, state=state)

    # 2. Humans first.
    if state.requested == "abort":
        return _rollback(state, "requested", f"aborted by {state.requested_by or 'human'}", now,
                         base)
    if state.requested == "promote":
        return _promote(state, "requested", f"promoted by {state.requested_by or 'human'}", now,
                        base)
    if state.phase is Phase.PAUSED:
        reason = state.pause_reason or "paused by human"
        return Hold(reason=reason, cause=HoldCause.PAUSED.value, evidence=base, state=state)
    if state.phase is Phase.WAITING:  # judged by `decide_ready`, never by a window
        return Hold(reason="waiting until the candidate is deployed and ready",
                    cause=HoldCause.NOT_READY.value, evidence=base, state=state)

    # 3. Faults: we could not look.
    if obs.fault is not None:
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
    state = state.with_(fault_intervals=0, fault_since=None) if state.fault_intervals else state

    # 3b. Paired answers: evidence of its own, not of the client traffic.
    paired = _answers_check(policy, obs)
    if paired is not None and paired.verdict == "fail":
        return _rollback(state, "verdict", f"answers: {paired.detail.split(' (')[0]}", now,
                         base.model_copy(update={"checks": (paired,)}))

    # 4. No data.
    if obs.total_requests == 0:
        return _insufficient(policy, state, "no requests in the window", now, base)

    # 5. Traffic.
    expected = state.weight / 100.0
    share = obs.observed_share
    assert share is not None
    tolerance = policy.traffic_tolerance / 100.0
    if obs.canary.requests == 0 and obs.stable.requests > 0:
        streak = state.stable_requests_without_canary + obs.stable.requests
        silent_since = state.canary_silent_since or \
            (now - dt.timedelta(seconds=obs.window_seconds))
        chance = (1.0 - expected) ** streak
        check = Check(name="traffic", verdict="fail" if chance < DOWN_ALPHA else "unknown",
                      value=0.0, threshold=float(state.weight), samples=streak,
                      statistic=chance,
                      detail=f"canary served 0 of the last {streak} requests")
        evidence = base.model_copy(update={"checks": (check,)})
        state = state.with_(stable_requests_without_canary=streak,
                            canary_silent_since=silent_since)
        if chance < DOWN_ALPHA:
            silent_for = (now - silent_since).total_seconds()
            if silent_for >= policy.no_traffic_grace:
                return _rollback(state, "verdict",
                                 f"canary receives no traffic ({streak} stable requests, "
                                 f"none to the canary for {silent_for:.0f}s): it is down",
                                 now, evidence)
            return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE,
                         f"canary receives no traffic for {silent_for:.0f}s "
                         f"(grace {policy.no_traffic_grace:.0f}s)", now, evidence)
    elif obs.canary.requests > 0 and state.stable_requests_without_canary:
        state = state.with_(stable_requests_without_canary=0, canary_silent_since=None)

    chance = _chance(obs.total_requests, share, expected)
    shifted = abs(share - expected) <= tolerance or chance >= TRAFFIC_ALPHA
    traffic = Check(name="traffic", verdict="pass" if shifted else "fail",
                    value=round(share * 100, 4), threshold=float(state.weight),
                    samples=obs.total_requests, statistic=chance,
                    detail=f"observed canary share vs weight, tolerance "
                           f"{policy.traffic_tolerance:g} points")
    if not shifted:
        return _insufficient(
            policy, state,
            f"traffic not shifted: canary got {share:.1%} of {obs.total_requests} requests, "
            f"weight is {state.weight}%", now, base.model_copy(update={"checks": (traffic,)}))

    # 6. Count the window and judge.
    canary = Counts(requests=state.canary_counts.requests + obs.canary.requests,
                    errors=state.canary_counts.errors + obs.canary.errors,
                    latency=merge_histograms(state.canary_counts.latency, obs.canary.latency),
                    quality=_merge_quality(state.canary_counts.quality, obs.canary.quality),
                    classes=_merge_classes(state.canary_counts.classes, obs.canary.classes))
    stable = Counts(requests=state.stable_counts.requests + obs.stable.requests,
                    errors=state.stable_counts.errors + obs.stable.errors,
                    latency=merge_histograms(state.stable_counts.latency, obs.stable.latency),
                    quality=_merge_quality(state.stable_counts.quality, obs.stable.quality),
                    classes=_merge_classes(state.stable_counts.classes, obs.stable.classes))
    st = state.statistics
    relative = stats.update_relative(st.relative, obs.canary.errors, obs.stable.errors,
                                     obs.canary.requests, obs.stable.requests)
    limit = stats.update_limit(st.limit, obs.canary.errors, obs.canary.requests,
                               policy.max_error_rate)
    lat_rel, lat_lim = _latency_updates(policy, st.latency_relative, st.latency_limit, obs,
                                        st.stable_latency)
    qual = {c.name: quality.update(st.quality.get(c.name), c, obs.canary.quality.get(c.signal),
                                   obs.stable.quality.get(c.signal))
            for c in policy.quality.checks}
    state = state.with_(
        canary_counts=canary, stable_counts=stable, empty_intervals=0, empty_since=None,
        pass_evidence=class_mix.update_pass(
            {c.name: quality.update_pass(state.pass_evidence.get(c.name), c,
                                         obs.canary.quality.get(c.signal),
                                         obs.stable.quality.get(c.signal))
             for c in policy.quality.checks} | {
                k: v for k, v in state.pass_evidence.items() if k.startswith(class_mix.PASS_KEY)},
            policy.quality, obs.canary.classes, obs.stable.classes,
            _images(obs.canary.quality), _images(obs.stable.quality)),
        statistics=Statistics(relative=_floats(relative), limit=_floats(limit),
                              latency_relative=_floats(lat_rel), latency_limit=_floats(lat_lim),
                              quality=qual,
                              class_mix=class_mix.update(st.class_mix, policy.quality,
                                                         obs.canary.classes, obs.stable.classes,
                                                         _images(obs.canary.quality),
                                                         _images(obs.stable.quality)),
                              distribution=distribution.update(
                                  st.distribution, policy.quality.distribution,
                                  obs.canary.quality, obs.stable.quality),
                              stable_latency=merge_histograms(st.stable_latency,
                                                              obs.stable.latency)),
    )

    def e_check(name: str, log_lr: Any) -> tuple[float, float, bool]:
        threshold = stats.rejection_log_threshold(policy.alpha, stats.ALPHA_SHARES[name])
        value = float(stats.log_e_value(log_lr))
        return value, threshold, value >= threshold

    canary_rate = canary.errors / canary.requests if canary.requests else None
    stable_rate = stable.errors / stable.requests if stable.requests else None

    checks = [traffic]
    rel_e, rel_t, rel_fail = e_check("errors_vs_stable", relative)
    checks.append(Check(
        name="errors_vs_stable", verdict="fail" if rel_fail else "pass",
        value=canary_rate, threshold=stable_rate, samples=canary.requests, statistic=rel_e,
        detail=f"mixture SPRT on the canary's share of errors; rejects at log e >= {rel_t:.3f}"))
    lim_e, lim_t, lim_fail = e_check("error_rate_limit", limit)
    checks.append(Check(
        name="error_rate_limit", verdict="fail" if lim_fail else (
            "pass" if canary_rate is not None and canary_rate <= policy.max_error_rate
            else "unknown"),
        value=canary_rate, threshold=policy.max_error_rate, samples=canary.requests,
        statistic=lim_e, detail=f"mixture SPRT vs max_error_rate, rejects at log e >= "
                                f"{lim_t:.3f}; to step, the step's rate must be within it"))

    if obs.canary.latency is None:
        checks.append(Check(name="latency_p99", verdict="skipped",
                            detail="the metric source has no latency histogram"))
    else:
        p99_c = histogram_quantile(0.99, canary.latency)
        p99_s = histogram_quantile(0.99, stable.latency)
        n_lat_c = int(round(max(canary.latency.values()))) if canary.latency else 0
        n_lat_s = int(round(max(stable.latency.values()))) if stable.latency else 0
        enough = n_lat_c >= policy.min_latency_samples and p99_c is not None
        p99_c_ms = None if p99_c is None else p99_c * 1000
        p99_s_ms = None if p99_s is None else p99_s * 1000
        e, t, fail = e_check("latency_p99", lat_lim)
        checks.append(Check(
            name="latency_p99", value=p99_c_ms, threshold=policy.max_p99_ms, samples=n_lat_c,
            statistic=e, verdict="fail" if fail else "unknown" if not enough else (
                "pass" if p99_c_ms is not None and p99_c_ms <= policy.max_p99_ms else "unknown"),
            detail=f"SPRT: share of canary requests above the limit vs 1 %, rejects at log e >= "
                   f"{t:.3f}; to step, the step's p99 must be within the limit "
                   f"on {policy.min_latency_samples}+ samples"))
        if state.weight >= 100:
            checks.append(Check(name="latency_vs_stable", verdict="skipped",
                                detail="stable serves no traffic at 100%"))
        else:
            both = enough and n_lat_s >= policy.min_latency_samples and bool(p99_s)
            ratio = (p99_c / p99_s) if (both and p99_c is not None and p99_s) else None
            within = ratio is not None and p99_c_ms is not None and p99_s_ms is not None and (
                ratio <= policy.max_latency_ratio
                or p99_c_ms - p99_s_ms <= policy.min_latency_difference_ms)
            e, t, fail = e_check("latency_vs_stable", lat_rel)
            checks.append(Check(
                name="latency_vs_stable", value=ratio, threshold=policy.max_latency_ratio,
                samples=min(n_lat_c, n_lat_s), statistic=e,
                verdict="fail" if fail else ("pass" if both and within else "unknown"),
                detail=f"p99 ratio canary/stable (ms {_ms(p99_c_ms)} vs {_ms(p99_s_ms)}); "
                       f"SPRT on the canary's share of requests slower than "
                       f"{policy.max_latency_ratio:g}x stable's p99, rejects at log e >= "
                       f"{t:.3f}; to step, the ratio must be within it"))
    for qc in policy.quality.checks:
        checks.append(_quality_check(policy, qc, state, canary, stable))
    if policy.quality.distribution is not None and (canary.quality or stable.quality):
        checks.append(_distribution_check(policy, state, canary, stable))
    if policy.quality.class_mix is not None and (canary.classes or stable.classes):
        checks.append(_class_mix_check(policy, state, canary, stable))
    if paired is not None:
        checks.append(paired)
    checks.append(Check(
        name="requests", value=float(canary.requests), threshold=float(policy.min_requests),
        samples=canary.requests,
        verdict="pass" if canary.requests >= policy.min_requests else "unknown",
        detail="canary requests in this step"))
    evidence = Evidence(weight=state.weight, window=base.window, step=_step_dict(state),
                        checks=tuple(checks))

    failed = [c for c in checks if c.verdict == "fail"]
    if failed:
        names = {
            "errors_vs_stable": "canary errors exceed stable's",
            "error_rate_limit": f"canary error rate above {policy.max_error_rate:g}",
            "latency_p99": f"canary p99 above {policy.max_p99_ms:g} ms",
            "latency_vs_stable": f"canary slower than stable (tail beyond "
                                 f"{policy.max_latency_ratio:g}x the p99)",
        }
        reason = "; ".join(
            f"model quality ({c.name.removeprefix('quality_')}): {c.detail.split(' (SPRT')[0]}"
            if c.name.startswith("quality_") else names.get(c.name, c.name) for c in failed)
        return _rollback(state, "verdict", reason, now, evidence)

    # 7. Good enough to move on?
    waiting = [c for c in checks if c.verdict == "unknown"]
    if waiting:
        missing = ", ".join(
            f"{c.name} ({c.samples or 0} samples)" if c.name != "requests"
            else f"{canary.requests}/{policy.min_requests} canary requests" for c in waiting)
        return _hold(state, HoldCause.INSUFFICIENT_EVIDENCE, f"collecting evidence: {missing}",
                     now, evidence)
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
