"""Canary modes in the policy: `mode: shadow` (judge, never act) and
`approval: step` (each step up waits for a person).

The pure part (`decide`, `shadowed`) is tested without git; the controller's
part with real bare repositories and the write-back, as in
tests/promotion/test_promotion_controller.py. Scripted part, as there: the metric source
(`RouterStub`) answers from main's committed weights; time is a hand-moved
clock.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest
import yaml

from contracts import traffic
from gitops.writeback import Message, WriteBack
from promotion.controller import Controller, ControllerConfig
from promotion.decision.analysis import Hold, decide, shadowed
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.decision.state import approve_step, start_canary
from promotion.errors import PolicyError, StateError
from promotion.gitrepo import apply
from tests.fixtures.promotion_controller import (
    MODEL,
    TEST_POLICY,
    Clock,
    RouterStub,
    canary_weight,
    decision_log,
    git,
    main_state,
    merge_to_main,
    merged_at,
)

T0 = dt.datetime(2026, 11, 25, 9, 0, tzinfo=dt.timezone.utc)


def _good(weight: int) -> Observations:
    n_c = 40 * weight
    return Observations(canary=VersionWindow(requests=n_c, errors=0),
                        stable=VersionWindow(requests=4000 - n_c, errors=2),
                        window_seconds=30)


def _bad(weight: int) -> Observations:
    n_c = 40 * weight
    return Observations(canary=VersionWindow(requests=n_c, errors=n_c // 3),
                        stable=VersionWindow(requests=4000 - n_c, errors=2),
                        window_seconds=30)


# -- pure ---------------------------------------------------------------------------------


def test_the_modes_are_validated_with_the_field_named():
    assert load_policy({"mode": "shadow", "approval": "step"}).mode == "shadow"
    with pytest.raises(PolicyError, match=r"promotion\.canary\.mode"):
        load_policy({"mode": "dry"})
    with pytest.raises(PolicyError, match=r"promotion\.canary\.approval"):
        load_policy({"approval": "always"})


def test_step_approval_holds_a_passing_step_until_approved():
    policy = CanaryPolicy(approval="step")
    state = start_canary("m", "v1", "v2", 10, T0)
    waiting = decide(policy, state, _good(10), T0 + dt.timedelta(minutes=1))
    assert (waiting.kind, waiting.cause) == ("hold", "awaiting-approval")
    assert waiting.state.awaiting_approval == 25 and waiting.state.weight == 10
    assert "mlops canary approve m" in waiting.reason
    # still waiting on the next window: the analysis goes on, no step
    again = decide(policy, waiting.state, _good(10), T0 + dt.timedelta(minutes=2))
    assert (again.kind, again.state.weight) == ("hold", 10)
    # approved: the next passing window steps, and the approval is spent
    approved = approve_step(again.state, "ada")
    step = decide(policy, approved, _good(10), T0 + dt.timedelta(minutes=3))
    assert (step.kind, step.state.weight) == ("step", 25)
    assert "approved by ada" in step.reason
    assert step.state.approved_by is None and step.state.awaiting_approval is None
    after = decide(policy, step.state, _good(25), T0 + dt.timedelta(minutes=4))
    assert (after.kind, after.cause, after.state.weight) == ("hold", "awaiting-approval", 25)


def test_step_approval_does_not_protect_a_bad_canary():
    policy = CanaryPolicy(approval="step")
    state = start_canary("m", "v1", "v2", 10, T0)
    waiting = decide(policy, state, _good(10), T0 + dt.timedelta(minutes=1))
    bad = decide(policy, waiting.state, _bad(10), T0 + dt.timedelta(minutes=2))
    assert (bad.kind, bad.cause) == ("rollback", "verdict")


def test_approval_needs_a_rollout_in_flight():
    state = start_canary("m", "v1", "v2", 10, T0)
    with pytest.raises(StateError, match="nothing to approve"):
        approve_step(state.with_(phase="promoted", weight=100), "ada")


def test_shadow_turns_every_verdict_into_a_recorded_hold():
    policy = CanaryPolicy()
    state = start_canary("m", "v1", "v2", 10, T0)
    for obs, kind in ((_good(10), "step"), (_bad(10), "rollback")):
        decision = decide(policy, state, obs, T0 + dt.timedelta(minutes=1))
        assert decision.kind == kind
        shadow = shadowed(state, decision)
        assert isinstance(shadow, Hold) and shadow.cause == f"shadow-{kind}"
        assert (shadow.state.weight, shadow.state.phase) == (10, state.phase)
        assert shadow.reason.startswith("shadow: would ") and decision.reason in shadow.reason
        assert shadow.evidence == decision.evidence  # the checks are kept for the record
    at_100 = start_canary("m", "v1", "v2", 100, T0)
    promote = decide(policy, at_100, _good(100), T0 + dt.timedelta(minutes=1))
    assert promote.kind == "promote"
    assert shadowed(at_100, promote).cause == "shadow-promote"
    # what people ask for is carried out
    requested = decide(policy, state.with_(requested="abort", requested_by="bob"), _good(10), T0)
    assert shadowed(state, requested) is requested


# -- the controller -----------------------------------------------------------------------


def _controller(repo: pathlib.Path, work: pathlib.Path, source: RouterStub,
                clock: Clock) -> Controller:
    return Controller(ControllerConfig(repo=str(repo), workdir=work), source, clock=clock)


def _run(controller: Controller, clock: Clock, seconds: int) -> list:
    outcomes = []
    for _ in range(seconds):
        clock.advance(1.0)
        outcomes += controller.tick()
    return outcomes


def _now(clock: Clock) -> dt.datetime:
    return dt.datetime.fromtimestamp(clock.now, dt.timezone.utc)


def test_shadow_mode_records_a_rollback_verdict_and_moves_no_weight(promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2", policy={**TEST_POLICY, "mode": "shadow"})
    clock = Clock(merged_at(promotion_repo))
    source = RouterStub(promotion_repo, rate=200.0, canary_errors=0.3, stable_errors=0.001)
    controller = _controller(promotion_repo, tmp_path / "work", source, clock)
    head = git(promotion_repo, "rev-parse", "main")
    try:
        outcomes = _run(controller, clock, 8)
        # a canary auto mode rolls back in a few windows: here, no commit at all
        assert git(promotion_repo, "rev-parse", "main") == head
        assert canary_weight(promotion_repo) == 10
        assert {o.cause for o in outcomes} == {"shadow-rollback"}
        timeline = [json.loads(line) for line in (
            tmp_path / "work" / "rollouts" / MODEL / "v2" / "timeline.jsonl").read_text()
            .splitlines()]
        assert timeline and all(p["cause"] == "shadow-rollback" for p in timeline)
        assert "would roll back" in timeline[0]["reason"]
        # a person ends it; the report lists the verdicts that were not acted on
        apply.human_commit(WriteBack(str(promotion_repo)), "main", MODEL, "abort", "ops",
                           _now(clock))
        _run(controller, clock, 2)
    finally:
        controller.close()
    log = decision_log(promotion_repo)
    assert [(c["subject"], c["Mlops-Decision"]) for c in log] == [
        ("rollback(shapes): 10% -> 0% (v2 over v1)", "rollback/requested")]
    report = (tmp_path / "work" / "rollouts" / MODEL / "v2" / "report.md").read_text()
    assert f"Shadow mode: {len(timeline)} verdicts recorded, none acted on." in report
    assert "would roll back" in report


def test_shadow_mode_adopts_a_persons_weight_without_pausing(promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2", policy={**TEST_POLICY, "mode": "shadow"})
    clock = Clock(merged_at(promotion_repo))
    controller = _controller(promotion_repo, tmp_path / "work", RouterStub(promotion_repo),
                             clock)

    def fifty(root: pathlib.Path) -> None:
        path = root / f"apps/{MODEL}/virtualservice.yaml"
        vs = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump(traffic.set_weights(vs, 50, with_canary=True),
                                       sort_keys=False))

    try:
        _run(controller, clock, 3)
        WriteBack(str(promotion_repo)).commit("main", fifty, Message("ops: 50%"))
        outcomes = _run(controller, clock, 6)
    finally:
        controller.close()
    state = main_state(promotion_repo)
    assert (state["phase"], state["weight"]) == ("progressing", 50)
    assert "shadow mode" in state["last_decision"]["reason"]
    assert canary_weight(promotion_repo) == 50
    assert any(o.cause == "shadow-step" and "would step to 100%" in o.reason for o in outcomes)


def test_step_approval_commits_the_wait_once_and_steps_after_mlops_canary_approve(
        promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2", policy={**TEST_POLICY, "approval": "step"})
    clock = Clock(merged_at(promotion_repo))
    controller = _controller(promotion_repo, tmp_path / "work", RouterStub(promotion_repo),
                             clock)
    try:
        _run(controller, clock, 10)
        subjects = git(promotion_repo, "log", "--format=%s", "main").splitlines()
        waits = [s for s in subjects if s.startswith("approval(")]
        assert waits == ["approval(shapes): 10% -> 25% waits for approval (v2 over v1)"]
        assert canary_weight(promotion_repo) == 10
        assert main_state(promotion_repo)["awaiting_approval"] == 25

        apply.human_commit(WriteBack(str(promotion_repo)), "main", MODEL, "approve", "ada",
                           _now(clock))
        _run(controller, clock, 6)
    finally:
        controller.close()
    steps = [c for c in decision_log(promotion_repo) if c["subject"].startswith("canary(")]
    assert steps[0]["subject"] == "canary(shapes): 10% -> 25% (v2 over v1)"
    assert "approved by ada" in steps[0]["Mlops-Reason"]
    assert canary_weight(promotion_repo) == 25
    # one approval, one step: at 25 % it waits again
    state = main_state(promotion_repo)
    assert (state["weight"], state["awaiting_approval"], state.get("approved_by")) == \
        (25, 50, None)
