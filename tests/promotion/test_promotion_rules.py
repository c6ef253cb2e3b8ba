"""decide()'s rules and checks one at a time, each on a crafted window.

`promotion/decision/analysis.py` walks `RULES` (and the counted window's
`checks.CHECKS`, then `VERDICTS`) in order; each is a pure function, so each
is asked here alone what it makes of one state and one window: no server, no
clock. The cross product over phases and weights stays in
tests/promotion/test_promotion_analysis.py.
"""

from __future__ import annotations

import datetime as dt

from promotion.decision import analysis, checks
from promotion.decision.analysis import Evidence, Hold, Rollback, Step
from promotion.decision.checks import Check
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import CanaryPolicy
from promotion.decision.state import CanaryState, Counts, start_canary

T0 = dt.datetime(2026, 11, 23, 9, 0, tzinfo=dt.timezone.utc)
NOW = T0 + dt.timedelta(minutes=10)
POLICY = CanaryPolicy()


def state(weight: int = 10, **changes: object) -> CanaryState:
    return start_canary("shapes-detector", "v1", "v2", weight, T0).with_(**changes)


def obs(canary: int, stable: int, canary_errors: int = 0) -> Observations:
    return Observations(canary=VersionWindow(requests=canary, errors=canary_errors),
                        stable=VersionWindow(requests=stable), window_seconds=30)


def test_the_table_holds_the_documented_order():
    """The order of the rules is the policy (module docstring): humans before faults,
    faults before the probe, the probe before traffic, counting before judging."""
    assert [r.__name__ for r in analysis.RULES] == [
        "inactive", "requested", "paused", "metric_fault", "answers_differ", "no_requests",
        "canary_down", "traffic_not_shifted", "count_window", "judge"]
    assert [c.__name__ for c in checks.CHECKS][0] == "traffic"
    assert [c.__name__ for c in checks.CHECKS][-1] == "requests"


def test_traffic_fails_a_share_off_its_weight_beyond_chance_and_passes_one_on_it():
    """10 % weight, 1000 requests: 3 % to the canary cannot be chance; 9.5 % is within
    the 5-point tolerance."""
    (off,) = checks.traffic(POLICY, state(10), obs(30, 970))
    (on,) = checks.traffic(POLICY, state(10), obs(95, 905))
    assert (off.verdict, off.value, off.threshold) == ("fail", 3.0, 10.0)
    assert off.statistic is not None and off.statistic < checks.TRAFFIC_ALPHA
    assert on.verdict == "pass"
    assert checks.traffic(POLICY, state(10), obs(0, 0)) == ()  # no requests: no share


def test_error_rate_limit_holds_a_step_over_the_limit_that_the_test_has_not_rejected():
    """"Not yet rejected" is not "good": 3 % errors on 100 requests against a 1 % limit,
    with the sequential test still at its start (log e 0), is `unknown`, not `pass`."""
    over = state(10, canary_counts=Counts(requests=100, errors=3))
    within = state(10, canary_counts=Counts(requests=100, errors=1))
    (check,) = checks.error_rate_limit(POLICY, over, obs(0, 0))
    assert (check.verdict, check.value, check.statistic) == ("unknown", 0.03, 0.0)
    (check,) = checks.error_rate_limit(POLICY, within, obs(0, 0))
    assert check.verdict == "pass"


def test_requests_waits_for_min_requests_in_the_step():
    (short,) = checks.requests(POLICY, state(10, canary_counts=Counts(requests=199)), obs(0, 0))
    (enough,) = checks.requests(POLICY, state(10, canary_counts=Counts(requests=200)), obs(0, 0))
    assert (short.verdict, enough.verdict) == ("unknown", "pass")


def test_latency_checks_without_a_histogram_skip_the_limit_and_make_no_comparison():
    """The haproxy preset measures no latency: p99 vs its limit is `skipped`, and no
    comparison with stable is made at all (it would hold forever as `unknown`)."""
    window = obs(100, 900)  # VersionWindow.latency None: the source has no histogram
    (p99,) = checks.latency_p99(POLICY, state(10), window)
    assert p99.verdict == "skipped"
    assert checks.latency_vs_stable(POLICY, state(10), window) == ()


def test_canary_down_rolls_back_after_the_grace_and_carries_the_run_otherwise():
    """At 10 %, 200 stable requests and none to the canary have chance 0.9^200 (7e-10),
    below DOWN_ALPHA: silent since before the grace, the rule rolls back on its own."""
    silent = state(10, stable_requests_without_canary=100,
                   canary_silent_since=NOW - dt.timedelta(seconds=POLICY.no_traffic_grace + 1))
    decision = analysis.canary_down(POLICY, silent, obs(0, 100), NOW)
    assert isinstance(decision, Rollback) and decision.cause == "verdict"
    assert "it is down" in decision.reason
    # Within the grace: hold, and the run is carried in the state.
    fresh = state(10, stable_requests_without_canary=100, canary_silent_since=NOW)
    held = analysis.canary_down(POLICY, fresh, obs(0, 100), NOW)
    assert isinstance(held, Hold) and held.state.stable_requests_without_canary == 200
    # Few stable requests: chance explains them, no decision, the run grows.
    carried = analysis.canary_down(POLICY, state(10), obs(0, 20), NOW)
    assert isinstance(carried, CanaryState) and carried.stable_requests_without_canary == 20
    # One canary request ends the run.
    ended = analysis.canary_down(POLICY, silent, obs(1, 100), NOW)
    assert isinstance(ended, CanaryState)
    assert (ended.stable_requests_without_canary, ended.canary_silent_since) == (0, None)


def test_metric_fault_counts_a_fault_and_a_clean_window_clears_the_count():
    faulted = analysis.metric_fault(POLICY, state(10), Observations.faulted("refused",
                                                                            window_seconds=30),
                                    NOW)
    assert isinstance(faulted, Hold) and faulted.cause == "fault"
    assert faulted.state.fault_intervals == 1
    cleared = analysis.metric_fault(POLICY, faulted.state, obs(10, 90), NOW)
    assert isinstance(cleared, CanaryState)
    assert (cleared.fault_intervals, cleared.fault_since) == (0, None)


def _evidence(*verdicts: str) -> Evidence:
    return Evidence(weight=25, checks=tuple(
        Check(name=f"c{i}", verdict=v) for i, v in enumerate(verdicts)))  # type: ignore[arg-type]


def test_verdicts_reject_any_fail_hold_any_unknown_and_step_only_on_all_passed():
    s = state(25)
    failed = analysis.rejected(POLICY, s, _evidence("pass", "unknown", "fail"), NOW)
    assert isinstance(failed, Rollback) and failed.reason == "c2"
    assert analysis.rejected(POLICY, s, _evidence("pass", "unknown"), NOW) is None
    waiting = analysis.collecting(POLICY, s, _evidence("pass", "unknown", "skipped"), NOW)
    assert isinstance(waiting, Hold) and waiting.cause == "insufficient-evidence"
    assert analysis.collecting(POLICY, s, _evidence("pass", "skipped"), NOW) is None
    moved = analysis.advance(POLICY, s, _evidence("pass", "skipped"), NOW)
    assert isinstance(moved, Step) and moved.to == 50 and moved.state.weight == 50


def test_advance_with_step_approval_waits_for_a_person_then_steps():
    policy = CanaryPolicy(approval="step")
    wait = analysis.advance(policy, state(25), _evidence("pass"), NOW)
    assert isinstance(wait, Hold) and wait.cause == "awaiting-approval"
    assert wait.state.awaiting_approval == 50 and wait.state.weight == 25
    approved = analysis.advance(policy, state(25, approved_by="ana"), _evidence("pass"), NOW)
    assert isinstance(approved, Step) and "approved by ana" in approved.reason
    assert approved.state.approved_by is None
