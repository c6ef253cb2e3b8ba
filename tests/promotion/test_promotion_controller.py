"""The controller applies decisions as commits: one per decision, history tells the story.

Real parts: bare git repositories, the write-back, `decide()`. Scripted part:
the metric source (`RouterStub` in tests/fixtures/promotion_controller.py)
answers from the weights committed on main with scripted error rates. That is
legitimate here because the decision and the Prometheus source are tested
against a real Prometheus elsewhere (tests/test_promotion_replay*.py); these
tests check what the controller *does* with decisions. Time is a hand-moved
clock, so no test sleeps.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import subprocess

import pytest
import yaml

from contracts import traffic
from gitops import layout
from gitops.writeback import Message, WriteBack
from mlops.cli import main as cli
from promotion.controller import Controller, ControllerConfig
from promotion.decision.state import load_state
from promotion.errors import StaleDecision
from promotion.gitrepo import apply
from tests.fixtures.promotion_controller import (
    MODEL,
    Clock,
    RouterStub,
    canary_weight,
    decision_log,
    git,
    main_file,
    main_state,
    merge_to_main,
    merged_at,
)
from tests.manifest_validation import validate_manifest


def _controller(repo: pathlib.Path, work: pathlib.Path, source: RouterStub, clock: Clock,
                **config: object) -> Controller:
    return Controller(ControllerConfig(repo=str(repo), workdir=work, **config),  # type: ignore[arg-type]
                      source, clock=clock)


def _run(controller: Controller, clock: Clock, seconds: int) -> list:
    outcomes = []
    for _ in range(seconds):
        clock.advance(1.0)
        outcomes += controller.tick()
    return outcomes


@pytest.fixture
def fresh_canary_repo(promotion_repo: pathlib.Path) -> pathlib.Path:
    """v1 stable, v2 merged just now: for a test whose human commits carry the wall clock's
    time while the controller's clock starts at the merge (a resume stamped on the
    controller's clock must come after a pause or edit stamped on the wall clock)."""
    merge_to_main(promotion_repo, "v2")
    return promotion_repo


def test_good_canary_steps_to_100_and_becomes_stable(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    controller = _controller(canary_repo, tmp_path / "work", RouterStub(canary_repo), clock)
    _run(controller, clock, 15)

    log = decision_log(canary_repo)
    assert [c["subject"] for c in log] == [
        "canary(shapes): 10% -> 25% (v2 over v1)",
        "canary(shapes): 25% -> 50% (v2 over v1)",
        "canary(shapes): 50% -> 100% (v2 over v1)",
        "promote(shapes): v2 is stable at 100% (replaces v1)",
    ]
    assert [c["Mlops-Step"] for c in log] == ["10->25", "25->50", "50->100", "100->100"]
    assert [c["Mlops-Decision"] for c in log] == ["step/passed"] * 3 + ["promote/passed"]
    for c in log:
        assert c["Mlops-Model"] == MODEL and c["Mlops-Candidate"] == "v2"
        evidence = json.loads(c["Mlops-Evidence"])
        assert {ch["name"] for ch in evidence["checks"]} >= {"traffic", "errors_vs_stable"}
    # Windows are strictly increasing: no decision was written twice.
    windows = [c["Mlops-Window"] for c in log]
    assert windows == sorted(set(windows))

    state = main_state(canary_repo)
    assert (state["phase"], state["stable"], state["candidate"]) == ("promoted", "v2", None)
    files = git(canary_repo, "ls-tree", "--name-only", f"main:apps/{MODEL}").split()
    assert "deployment-v1.yaml" not in files and "deployment-v2.yaml" in files
    dr = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/destinationrule.yaml"))
    assert dr["spec"]["subsets"] == [{"name": "stable", "labels": {"version": "v2"}}]
    vs = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/virtualservice.yaml"))
    assert [(r["destination"]["subset"], r["weight"]) for r in vs["spec"]["http"][0]["route"]] \
        == [("stable", 100)]
    validate_manifest(dr)
    validate_manifest(vs)
    kustomization = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/kustomization.yaml"))
    assert "deployment-v1.yaml" not in kustomization["resources"]

    report = tmp_path / "work" / "rollouts" / MODEL / "v2"
    assert (report / "canary.png").stat().st_size > 1000
    text = (report / "report.md").read_text()
    assert "Outcome: promoted" in text and "canary(shapes): 25% -> 50% (v2 over v1)" in text

    # Nothing more happens once the rollout is finished.
    before = git(canary_repo, "rev-parse", "main")
    _run(controller, clock, 3)
    assert git(canary_repo, "rev-parse", "main") == before


def test_holds_are_not_committed(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo, rate=10.0)  # 1 canary request per window at 10 %
    controller = _controller(canary_repo, tmp_path / "work", source, clock)
    outcomes = _run(controller, clock, 10)
    assert [o.kind for o in outcomes] == ["hold"] * len(outcomes) and len(outcomes) >= 8
    assert decision_log(canary_repo) == []
    assert len(source.calls) == len(outcomes)


def test_bad_canary_is_rolled_back_and_removed(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo, rate=200.0, canary_errors=0.3, stable_errors=0.001)
    controller = _controller(canary_repo, tmp_path / "work", source, clock)
    _run(controller, clock, 6)

    log = decision_log(canary_repo)
    assert [c["subject"] for c in log] == ["rollback(shapes): 10% -> 0% (v2 over v1)"]
    assert log[0]["Mlops-Decision"] == "rollback/verdict"
    state = main_state(canary_repo)
    assert (state["phase"], state["weight"], state["stable"]) == ("rolled_back", 0, "v1")
    files = git(canary_repo, "ls-tree", "--name-only", f"main:apps/{MODEL}").split()
    assert "deployment-v2.yaml" not in files and "deployment-v1.yaml" in files
    assert canary_weight(canary_repo) == 0
    text = (tmp_path / "work" / "rollouts" / MODEL / "v2" / "report.md").read_text()
    assert "Outcome: rolled back" in text


def test_rollback_can_scale_the_candidate_to_zero(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo, rate=200.0, canary_errors=0.3)
    controller = _controller(canary_repo, tmp_path / "work", source, clock,
                             on_rollback="scale-to-zero")
    _run(controller, clock, 6)
    dep = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/deployment-v2.yaml"))
    assert dep["spec"]["replicas"] == 0
    dr = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/destinationrule.yaml"))
    assert [s["name"] for s in dr["spec"]["subsets"]] == ["stable", "canary"]
    vs = yaml.safe_load(main_file(canary_repo, f"apps/{MODEL}/virtualservice.yaml"))
    assert [(r["destination"]["subset"], r["weight"]) for r in vs["spec"]["http"][0]["route"]] \
        == [("stable", 100), ("canary", 0)]
    for doc in (dep, dr, vs):
        validate_manifest(doc)


def test_a_new_controller_replays_uncommitted_holds(canary_repo, tmp_path):
    """Kill after two holds (drop the object); the next one steps at the same window."""
    start = merged_at(canary_repo)
    reference = tmp_path / "reference.git"
    git(tmp_path, "clone", "-q", "--bare", str(canary_repo), str(reference))

    clock = Clock(start)
    first = _controller(canary_repo, tmp_path / "w1", RouterStub(canary_repo), clock)
    _run(first, clock, 2)  # two holds at 10 % (10 + 10 of 40 canary requests), nothing committed
    assert decision_log(canary_repo) == []
    first.close()
    second = _controller(canary_repo, tmp_path / "w2", RouterStub(canary_repo), clock)
    _run(second, clock, 10)

    ref_clock = Clock(start)
    uninterrupted = _controller(reference, tmp_path / "w3", RouterStub(reference), ref_clock)
    _run(uninterrupted, ref_clock, 12)

    def story(repo: pathlib.Path) -> list[tuple[str, str]]:
        return [(c["Mlops-Step"], c["Mlops-Window"]) for c in decision_log(repo)]

    assert story(canary_repo) == story(reference)
    assert [s for s, _ in story(canary_repo)] == ["10->25", "25->50", "50->100", "100->100"]


def test_insufficient_evidence_budget_survives_a_restart(canary_repo, tmp_path):
    policy = {"steps": [10, 100], "interval": "1s", "min_requests": 40,
              "insufficient_evidence": {"max_intervals": 4, "action": "pause"}}
    # Rewrite the policy on main (a human edit of canary-policy.yaml).
    WriteBack(str(canary_repo)).commit(
        "main", lambda root: (root / f"apps/{MODEL}/{apply.POLICY_FILE}").write_text(
            yaml.safe_dump(policy)), Message("tighten the budget"))
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo)
    source.silent = True
    first = _controller(canary_repo, tmp_path / "w1", source, clock)
    _run(first, clock, 3)  # three empty windows, nothing committed
    assert decision_log(canary_repo) == []
    second = _controller(canary_repo, tmp_path / "w2", source, clock)
    _run(second, clock, 1)  # the fourth empty window spends the budget
    log = decision_log(canary_repo)
    assert [c["subject"] for c in log] == ["pause(shapes): at 10% (v2 over v1)"]
    assert main_state(canary_repo)["phase"] == "paused"
    assert main_state(canary_repo)["empty_intervals"] == 4


def test_human_pause_resume_and_abort(fresh_canary_repo, tmp_path):
    canary_repo = fresh_canary_repo
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo, rate=10.0)
    controller = _controller(canary_repo, tmp_path / "work", source, clock)
    writer = WriteBack(str(canary_repo))
    _run(controller, clock, 2)

    apply.human_commit(writer, "main", MODEL, "pause", "alice", dt.datetime.now(dt.timezone.utc))
    calls = len(source.calls)
    _run(controller, clock, 5)
    assert len(source.calls) == calls  # paused: no analysis at all
    assert decision_log(canary_repo) == []

    now = dt.datetime.fromtimestamp(clock.now, dt.timezone.utc)
    apply.human_commit(writer, "main", MODEL, "resume", "alice", now)
    _run(controller, clock, 2)
    assert len(source.calls) > calls

    apply.human_commit(writer, "main", MODEL, "abort", "bob", now)
    _run(controller, clock, 1)
    log = decision_log(canary_repo)
    assert [(c["subject"], c["Mlops-Decision"]) for c in log] == [
        ("rollback(shapes): 10% -> 0% (v2 over v1)", "rollback/requested")]
    assert "bob" in log[0]["Mlops-Reason"]
    subjects = git(canary_repo, "log", "--format=%s", "main").splitlines()
    assert subjects[:4] == ["rollback(shapes): 10% -> 0% (v2 over v1)",
                            "abort(shapes): requested by bob", "resume(shapes): requested by alice",
                            "pause(shapes): requested by alice"]


def test_human_promote_request(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    controller = _controller(canary_repo, tmp_path / "work", RouterStub(canary_repo, rate=1), clock)
    apply.human_commit(WriteBack(str(canary_repo)), "main", MODEL, "promote", "carol",
                       dt.datetime.now(dt.timezone.utc))
    _run(controller, clock, 1)
    log = decision_log(canary_repo)
    assert [(c["subject"], c["Mlops-Decision"]) for c in log] == [
        ("promote(shapes): v2 is stable at 100% (replaces v1)", "promote/requested")]
    assert main_state(canary_repo)["stable"] == "v2"


def test_a_manual_weight_edit_is_a_takeover_that_pauses_until_resumed(fresh_canary_repo,
                                                                      tmp_path):
    canary_repo = fresh_canary_repo
    clock = Clock(merged_at(canary_repo))
    controller = _controller(canary_repo, tmp_path / "work", RouterStub(canary_repo, rate=10),
                             clock)
    _run(controller, clock, 1)

    def set_canary(weight: int):
        def change(root: pathlib.Path) -> None:
            path = root / f"apps/{MODEL}/virtualservice.yaml"
            vs = yaml.safe_load(path.read_text())
            path.write_text(yaml.safe_dump(traffic.set_weights(vs, weight, with_canary=True),
                                           sort_keys=False))
        return change

    human = WriteBack(str(canary_repo))
    edit = human.commit("main", set_canary(30), Message("ops: give v2 more traffic"))
    _run(controller, clock, 1)
    log = decision_log(canary_repo)
    assert [c["subject"] for c in log] == [
        "canary(shapes): 10% -> 30% by hand (v2 over v1), paused"]
    state = main_state(canary_repo)
    assert (state["weight"], state["phase"]) == (30, "paused")
    # the pause names the human's commit and its author
    author = subprocess.run(["git", "--git-dir", str(canary_repo), "log", "-1", "--format=%an",
                             edit.commit], capture_output=True, text=True).stdout.strip()
    assert f"commit {edit.commit[:7]}" in state["pause_reason"] and author in state["pause_reason"]

    # a takeover holds: however long the controller runs, it steers nothing
    _run(controller, clock, 6)
    assert len(decision_log(canary_repo)) == 1 and main_state(canary_repo)["weight"] == 30

    # `mlops canary resume` hands it back: analysis resumes from the human's weight
    apply.human_commit(human, "main", MODEL, "resume", "ops",
                       dt.datetime.fromtimestamp(clock.now, dt.timezone.utc))
    _run(controller, clock, 20)
    steps = [c["subject"] for c in decision_log(canary_repo)[1:]]
    assert steps and steps[0] == "canary(shapes): 30% -> 50% (v2 over v1)", steps

    human.commit("main", set_canary(0), Message("ops: stop v2"))
    _run(controller, clock, 1)
    log = decision_log(canary_repo)
    assert log[-1]["subject"].startswith("rollback(shapes): ") and "-> 0% (v2 over v1)" in \
        log[-1]["subject"]
    assert log[-1]["Mlops-Decision"] == "rollback/manual"
    assert main_state(canary_repo)["phase"] == "rolled_back"


def test_a_weight_of_150_is_refused_once_naming_the_file_and_no_traceback(
        canary_repo, tmp_path, caplog, capsys):
    """Issue 27: a human weight of 150 during a canary crashed every pass with a
    pydantic traceback naming no file; it is one refusal naming file and field."""

    clock = Clock(merged_at(canary_repo))
    controller = _controller(canary_repo, tmp_path / "work", RouterStub(canary_repo, rate=10),
                             clock)
    _run(controller, clock, 1)

    def weight_150(root: pathlib.Path) -> None:
        path = root / f"apps/{MODEL}/virtualservice.yaml"
        vs = yaml.safe_load(path.read_text())
        for entry in vs["spec"]["http"][0]["route"]:
            if entry["destination"]["subset"] == "canary":
                entry["weight"] = 150
        path.write_text(yaml.safe_dump(vs, sort_keys=False))

    WriteBack(str(canary_repo)).commit("main", weight_150, Message("ops: typo"))
    caplog.clear()
    with caplog.at_level("INFO", logger="mlops.controller"):
        _run(controller, clock, 13)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert f"apps/{MODEL}/virtualservice.yaml" in message and "150" in message
    assert "weight" in message and errors[0].exc_info is None
    assert not any(r.exc_info for r in caplog.records)
    assert decision_log(canary_repo) == [] and main_state(canary_repo)["weight"] == 10
    assert "virtualservice.yaml" in controller.refused[MODEL]

    capsys.readouterr()
    assert cli(["canary", "status", MODEL, "--gitops", str(canary_repo)]) == 0
    out = capsys.readouterr().out
    assert f"refused: apps/{MODEL}/virtualservice.yaml: route weight 150" in out, out


def test_a_stale_decision_is_not_written(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    controller = _controller(canary_repo, tmp_path / "work", RouterStub(canary_repo), clock)
    _run(controller, clock, 4)  # the first step is committed
    assert len(decision_log(canary_repo)) == 1

    root = tmp_path / "tree"
    root.mkdir()
    git(tmp_path, "--git-dir", str(canary_repo), "--work-tree", str(root), "checkout", "main",
        "--", ".")
    folder = layout.read_model(root, MODEL)
    old = load_state(main_file(canary_repo, f"apps/{MODEL}/promotion.yaml")).with_(weight=10)
    plan = apply.plan(folder, old, old.with_(weight=25))
    msg = apply.message("step", old, old.with_(weight=25), at=dt.datetime.now(dt.timezone.utc),
                        reason="again", cause="passed")
    with pytest.raises(StaleDecision):
        apply.commit(WriteBack(str(canary_repo)), "main", plan, old, msg)
    assert len(decision_log(canary_repo)) == 1


def test_checkpoint_commits_a_hold_every_n_intervals(canary_repo, tmp_path):
    clock = Clock(merged_at(canary_repo))
    source = RouterStub(canary_repo, rate=10.0)  # 1 canary request per window: holds
    controller = _controller(canary_repo, tmp_path / "work", source, clock, checkpoint_every=3)
    _run(controller, clock, 7)
    log = decision_log(canary_repo)
    assert [c["subject"] for c in log] == ["hold(shapes): at 10% (v2 over v1)"] * 2
    assert [c["Mlops-Decision"] for c in log] == ["hold/insufficient-evidence"] * 2
    # The checkpoint carries the counts, so the step's evidence keeps growing across it.
    assert main_state(canary_repo)["canary_counts"]["requests"] == 6


def test_a_control_character_in_a_reason_does_not_block_the_rollback(canary_repo, tmp_path):
    """Issue 41, finding 9: the reason names a class from the pushed export's labels;
    with an ESC in it git refused the commit on every tick and the bad canary kept its
    traffic. The reason is escaped (`cogs.text.one_line`) before it becomes a trailer."""
    root = tmp_path / "tree"
    root.mkdir()
    git(tmp_path, "--git-dir", str(canary_repo), "--work-tree", str(root), "checkout", "main",
        "--", ".")
    folder = layout.read_model(root, MODEL)
    old = load_state(main_file(canary_repo, f"apps/{MODEL}/promotion.yaml"))
    after = old.with_(weight=0)
    plan = apply.plan(folder, old, after)
    reason = "classes cat\x1b]52;c;ZXZpbA==\x07\x1b[2J moved:\rbad\u2028x"
    msg = apply.message("rollback", old, after, at=dt.datetime.now(dt.timezone.utc),
                        reason=reason, cause="failed")
    result = apply.commit(WriteBack(str(canary_repo)), "main", plan, old, msg)
    assert result.status == "committed"
    entry = decision_log(canary_repo)[-1]
    assert entry["Mlops-Reason"] == (
        "classes cat\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J moved: bad x")
    body = git(canary_repo, "log", "-1", "--format=%B", "main")
    assert "\x1b" not in body and "\x07" not in body


def test_the_platform_bounds_are_applied_again_to_the_policy_read_back(canary_repo, tmp_path):
    """Issue 41, finding 4: the controller judged whatever `canary-policy.yaml` said. A
    policy that reached git naming another namespace and a looser error limit is judged
    with the platform's (`mlops-gitops.yaml` policy:) and the repo's namespace."""
    writer = WriteBack(str(canary_repo))

    def loosen(root: pathlib.Path) -> None:
        config = root / layout.CONFIG_FILE
        doc = yaml.safe_load(config.read_text())
        doc["policy"] = {"canary": {"max_error_rate": 0.02, "min_requests": 40}}
        config.write_text(yaml.safe_dump(doc))
        path = root / layout.APPS / MODEL / apply.POLICY_FILE
        policy = yaml.safe_load(path.read_text())
        policy.update({"max_error_rate": 0.5, "min_requests": 1,
                       "metrics": {"preset": "model", "namespace": "attacker"}})
        path.write_text(yaml.safe_dump(policy))

    writer.commit("main", loosen, Message("edit the policy by hand"))
    seen = []

    def source_for(policy):
        seen.append(policy)
        return RouterStub(canary_repo)

    clock = Clock(merged_at(canary_repo))
    controller = Controller(ControllerConfig(repo=str(canary_repo), workdir=tmp_path / "work"),
                            source_for, clock=clock)
    _run(controller, clock, 3)
    assert seen, "no window was analysed"
    policy = seen[-1]
    namespace = yaml.safe_load(main_file(canary_repo, layout.CONFIG_FILE))["namespace"]
    assert policy.metrics.preset is None and policy.metrics.namespace == namespace != "attacker"
    assert (policy.max_error_rate, policy.min_requests) == (0.02, 40)
