"""One decision, one commit: turn a decided `CanaryState` into files and a message.

`plan()` is pure: it edits copies of the model's documents read from `main` (the
VirtualService's weights, the promoted or removed Deployments, `promotion.yaml`).
`commit()` hands the plan to `gitops.writeback`, which pushes without force and rebases
only over a moved remote; the change re-reads `promotion.yaml` and refuses a stale
decision (`StaleDecision`). What each outcome writes, and why: docs/inside-promotion.md.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from cogs.text import one_line, printable
from contracts.traffic import set_subsets, set_weights
from gitops import layout
from gitops.writeback import Message, WriteBack, WriteResult
from promotion.decision import state as st
from promotion.decision.state import CanaryState, LastDecision, Phase, dump_state_yaml, load_state
from promotion.errors import StaleDecision, StateError

__all__ = [
    "POLICY_FILE",
    "OnRollback",
    "Plan",
    "commit",
    "message",
    "plan",
    "window_id",
]

POLICY_FILE = "canary-policy.yaml"
"""The model's canary policy, written by `propose` beside `promotion.yaml`."""

OnRollback = Literal["remove", "scale-to-zero"]

Kind = Literal["step", "hold", "rollback", "promote", "manual", "start"]


@dataclass(frozen=True)
class Plan:
    """What one commit writes into `apps/<model>/`."""

    model: str
    documents: list[dict[str, Any]] = field(default_factory=list)
    remove_versions: list[str] = field(default_factory=list)
    state: CanaryState | None = None


def window_id(at: dt.datetime) -> str:
    """The decision's identity: the end of its analysis window (UTC, ISO 8601)."""
    return at.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


# -- pure document edits ----------------------------------------------------------------


def plan(current: layout.ModelState, before: CanaryState, after: CanaryState,
         on_rollback: OnRollback = "remove") -> Plan:
    """The documents that make `apps/<model>/` say what `after` says.

    `current` is the folder as read from `main`; `before` is the state the
    decision started from (it names the versions being replaced).
    """
    model = current.model
    if current.virtual_service is None or current.destination_rule is None:
        raise ValueError(f"apps/{model}/ lacks its VirtualService or DestinationRule")
    docs: list[dict[str, Any]] = []
    remove: list[str] = []
    vs, dr = current.virtual_service, current.destination_rule
    candidate = before.candidate
    if after.phase is Phase.PROMOTED:
        new_stable = after.stable
        assert new_stable is not None
        docs.append(set_subsets(dr, new_stable, None))
        docs.append(set_weights(vs, 0, with_canary=False))
        # The old stable goes, and so do leftovers of earlier rollouts (a candidate
        # that was rolled back and scaled to 0): only the new stable is live.
        remove += sorted(v for v in current.deployments if v != new_stable)
    elif after.phase is Phase.ROLLED_BACK:
        assert before.stable is not None
        if on_rollback == "remove":
            docs.append(set_subsets(dr, before.stable, None))
            docs.append(set_weights(vs, 0, with_canary=False))
            if candidate and candidate in current.deployments:
                remove.append(candidate)
        else:
            docs.append(set_subsets(dr, before.stable, candidate))
            docs.append(set_weights(vs, 0, with_canary=candidate is not None))
            if candidate and candidate in current.deployments:
                dep = copy.deepcopy(current.deployments[candidate])
                dep.setdefault("spec", {})["replicas"] = 0
                docs.append(dep)
    else:
        docs.append(set_weights(vs, after.weight, with_canary=after.candidate is not None))
    return Plan(model=model, documents=docs, remove_versions=remove, state=after)


def finalise_promoted(state: CanaryState) -> CanaryState:
    """The committed form of a promotion: the candidate is the stable version now."""
    # A fresh state: the finished rollout's counters are history (they are in
    # the commits' trailers), not something the next rollout should inherit.
    return CanaryState(model=state.model, phase=Phase.PROMOTED, stable=state.candidate,
                       last_decision=state.last_decision)


# -- commit message -----------------------------------------------------------------------


def subject(kind: Kind, before: CanaryState, after: CanaryState) -> str:
    """`canary(<model>): 10% -> 25% (v2 over v1)` and its siblings."""
    model, cand, stable = before.model, before.candidate, before.stable
    pair = f"({cand} over {stable})"
    if kind == "promote":
        return f"promote({model}): {cand} is stable at 100% (replaces {stable})"
    if kind == "rollback":
        return f"rollback({model}): {before.weight}% -> 0% {pair}"
    if kind == "manual":
        paused = ", paused" if after.phase is Phase.PAUSED else ""
        return f"canary({model}): {before.weight}% -> {after.weight}% by hand {pair}{paused}"
    if kind == "start":
        return f"canary({model}): start at {after.weight}% {pair}"
    if kind == "step":
        return f"canary({model}): {before.weight}% -> {after.weight}% {pair}"
    if after.phase is Phase.PAUSED and before.phase is not Phase.PAUSED:
        return f"pause({model}): at {after.weight}% {pair}"
    if after.awaiting_approval and after.awaiting_approval != before.awaiting_approval:
        return (f"approval({model}): {after.weight}% -> {after.awaiting_approval}% "
                f"waits for approval {pair}")
    return f"hold({model}): at {after.weight}% {pair}"


def message(kind: Kind, before: CanaryState, after: CanaryState, *, at: dt.datetime,
            reason: str, cause: str, evidence: dict[str, Any] | None = None,
            extra_trailers: dict[str, str] | None = None) -> Message:
    """The commit message: subject, a readable body, and the `Mlops-*` trailers.

    The reason is free text that may quote what a pusher wrote (a class name from
    the export's labels): it goes through `cogs.text` before it becomes the trailer
    and the body, so a control character in it is shown escaped instead of making
    git refuse the commit -- every tick, while the bad canary keeps its traffic."""
    evidence = evidence or {}
    lines = [printable(reason), ""]
    for check in evidence.get("checks", []):
        parts = [f"{check.get('name')}: {check.get('verdict')}"]
        for key in ("value", "threshold", "samples", "statistic"):
            if key in check:
                parts.append(f"{key}={check[key]}")
        lines.append("- " + one_line(" ".join(str(p) for p in parts)))
    trailers = [
        ("Mlops-Decision", f"{kind}/{cause}"),
        ("Mlops-Model", before.model),
        (
            "Mlops-Step",
            f"{before.weight}->{after.weight if after.phase is not Phase.PROMOTED else 100}",
        ),
        ("Mlops-Candidate", one_line(str(before.candidate))),
        ("Mlops-Stable", one_line(str(before.stable))),
        ("Mlops-Window", window_id(at)),
        ("Mlops-Reason", one_line(reason)),
        ("Mlops-Evidence", json.dumps(evidence, sort_keys=True, separators=(",", ":"))),
    ]
    trailers += list((extra_trailers or {}).items())
    return Message(one_line(subject(kind, before, after)), "\n".join(lines).strip(), trailers)


# -- the write -----------------------------------------------------------------------------


def change_for(the_plan: Plan, base: CanaryState) -> Callable[[pathlib.Path], None]:
    """The write-back change function: refuse a moved base, then write the plan."""
    model = the_plan.model

    def change(root: pathlib.Path) -> None:
        path = root / layout.APPS / model / layout.PROMOTION
        text = path.read_text() if path.is_file() else None
        if text is None or load_state(text, f"apps/{model}/promotion.yaml") != base:
            raise StaleDecision(
                f"apps/{model}/promotion.yaml changed on the branch since the decision was "
                "made; deciding again from the new state"
            )
        extra = {layout.PROMOTION: dump_state_yaml(the_plan.state)} if the_plan.state else None
        layout.write_model(root, model, the_plan.documents, extra=extra,
                           remove_versions=the_plan.remove_versions)

    return change


def commit(writer: WriteBack, branch: str, the_plan: Plan, base: CanaryState,
           msg: Message) -> WriteResult:
    """Write `the_plan` on `branch` as one commit (unchanged when already there)."""
    return writer.commit(branch, change_for(the_plan, base), msg)


# -- humans ----------------------------------------------------------------------------------

HumanAction = Literal["pause", "resume", "abort", "promote", "approve"]


def human_change(state: CanaryState, action: HumanAction, by: str,
                 now: dt.datetime) -> CanaryState:
    """The state after a human's `mlops canary <action>` (validated by `promotion.decision.state`).

    Pause and resume take effect at once and are stamped as the latest decision
    (so the controller's next window starts at `now`, not before the pause);
    abort and promote are *requests* the controller carries out with its next
    decision, because only a decision commit moves the weights; approve lets
    the next step up (`approval: step`) happen when the analysis passes it.
    """
    if action == "pause":
        new = st.pause(state, by)
        return new.with_(last_decision=LastDecision(kind="hold", reason=f"paused by {by}",
                                                    at=now, cause="human", weight=state.weight))
    if action == "resume":
        new = st.resume(state, now)
        return new.with_(last_decision=LastDecision(kind="hold", reason=f"resumed by {by}",
                                                    at=now, cause="human", weight=state.weight))
    if action == "abort":
        return st.request_abort(state, by)
    if action == "promote":
        return st.request_promote(state, by)
    if action == "approve":
        return st.approve_step(state, by)
    raise ValueError(f"unknown action {action!r}")


def human_commit(writer: WriteBack, branch: str, model: str, action: HumanAction, by: str,
                 now: dt.datetime) -> tuple[WriteResult, CanaryState]:
    """Commit a human action to `apps/<model>/promotion.yaml` (one commit, no force)."""
    seen: dict[str, CanaryState] = {}

    def change(root: pathlib.Path) -> None:
        path = root / layout.APPS / model / layout.PROMOTION
        if not path.is_file():
            raise StateError(f"apps/{model}/promotion.yaml not found on {branch!r}: "
                             f"is {model!r} served from this GitOps repo?")
        before = load_state(path.read_text(), f"apps/{model}/promotion.yaml")
        after = human_change(before, action, by, now)
        seen["before"], seen["after"] = before, after
        layout.write_model(root, model, extra={layout.PROMOTION: dump_state_yaml(after)})

    result = writer.commit(branch, change, Message(
        f"{action}({model}): requested by {by}",
        body=f"`mlops canary {action} {model}` by {by}.",
        trailers=[("Mlops-Decision", f"{action}/human"), ("Mlops-Model", model),
                  ("Mlops-Requested-By", by)]))
    return result, seen["after"]
