"""`mlops canary pause|resume|abort|promote|approve MODEL`: a human steers a rollout.

Each is one commit to `apps/<model>/promotion.yaml` on the GitOps repo's main
branch, with trailers naming the action and who asked (`Mlops-Decision:
pause/human`, `Mlops-Requested-By:`), so the history records humans exactly as
it records the controller. Pause and resume act at once; abort and promote are
requests that the controller carries out with its next decision commit (only
a decision moves the weights); approve lets the next step up happen under
`approval: step`. `mlops canary status MODEL` says where the
rollout stands (`--json`: the whole state).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
from typing import TYPE_CHECKING

from mlops.commands._options import gitops_option, require_gitops
from mlops.errors import UserError

if TYPE_CHECKING:
    from promotion.decision.state import CanaryState


def _act(args: argparse.Namespace) -> int:
    from gitops.people import current_user
    from promotion.gitrepo.steering import canary_action

    workdir = pathlib.Path(args.workdir) if args.workdir else None
    print(canary_action(require_gitops(args), args.model, args.action, current_user(args.by),
                        args.branch, workdir))
    return 0


def _status(args: argparse.Namespace) -> int:
    from gitops.repo import Mirror
    from promotion.decision.state import dump_state, load_state

    gitops = require_gitops(args)
    with tempfile.TemporaryDirectory(prefix="mlops-canary-") as tmp:
        with Mirror(gitops, path=pathlib.Path(tmp) / "m.git") as mirror:
            tip = mirror.sha(args.branch)
            text = mirror.show(tip, f"apps/{args.model}/promotion.yaml") if tip else None
            split = {name: mirror.show(tip, f"apps/{args.model}/{name}") if tip else None
                     for name in ("destinationrule.yaml", "virtualservice.yaml")}
    if text is None:
        raise UserError(f"apps/{args.model}/promotion.yaml not found on {args.branch!r} of "
                        f"{args.gitops}")
    state = load_state(text, f"apps/{args.model}/promotion.yaml")
    refused = split_problem(args.model, split["destinationrule.yaml"],
                            split["virtualservice.yaml"])
    if args.json:
        print(json.dumps({**dump_state(state), **({"refused": refused} if refused else {})},
                         indent=2))
    else:
        print(_summary(state) + (f"\n  refused: {refused}; the controller and the sync "
                                 "change nothing until it is fixed" if refused else ""))
    return 0


def split_problem(model: str, destination_rule: str | None,
                  virtual_service: str | None) -> str | None:
    """Why the controller refuses the split on main (file and field), None when it does not:
    the same strict reading as the controller's and the local sync's."""
    import yaml

    from contracts.traffic import TrafficError, read_routes

    if destination_rule is None or virtual_service is None:
        return None
    try:
        read_routes(yaml.safe_load(destination_rule), yaml.safe_load(virtual_service),
                    dr_path=f"apps/{model}/destinationrule.yaml",
                    vs_path=f"apps/{model}/virtualservice.yaml")
    except TrafficError as exc:
        return str(exc)
    except yaml.YAMLError as exc:
        return f"apps/{model}: YAML does not parse: {exc}".splitlines()[0]
    return None


def _summary(state: CanaryState) -> str:
    """What a human asks first: who serves what share, and the last committed decision."""
    lines = [f"{state.model}: {state.phase.value}"
             + (f" ({state.pause_reason})" if state.pause_reason else "")]
    lines.append(f"  stable     {state.stable or '-'}  {100 - state.weight}%")
    if state.candidate:
        lines.append(f"  candidate  {state.candidate}  {state.weight}%")
    # No request counts: holds are not committed (unless --checkpoint-every), so
    # the counts in git lag the controller's; its log and /metrics have them.
    if state.requested:
        lines.append(f"  requested: {state.requested} by {state.requested_by or '?'}")
    if state.awaiting_approval:
        lines.append(f"  waiting for approval to go to {state.awaiting_approval}%: "
                     f"`mlops canary approve {state.model}`")
    if state.approved_by:
        lines.append(f"  next step approved by {state.approved_by}")
    last = state.last_decision
    if last is not None:
        lines.append(f"  last decision: {last.kind} at {last.at:%Y-%m-%d %H:%M:%S}Z: {last.reason}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops canary`: five actions and `status`, over the same model and repo options."""
    parser = subparsers.add_parser(
        "canary", help="pause, resume, abort, promote or approve a step of a rollout")
    sub = parser.add_subparsers(dest="canary_command", metavar="ACTION", required=True)
    rollout = argparse.ArgumentParser(add_help=False)  # what every action names
    rollout.add_argument("model", metavar="MODEL")
    gitops_option(rollout)
    rollout.add_argument("--branch", default="main", help="the GitOps repo's branch "
                                                          "(default: main)")
    steer = argparse.ArgumentParser(add_help=False, parents=[rollout])  # what a commit needs
    steer.add_argument("--by", help="who asks (default: the current user)")
    steer.add_argument("--workdir", help="reuse clones here (default: a temporary dir)")
    for action, text in (("pause", "stop the analysis; weights stay"),
                         ("resume", "resume the analysis of a paused rollout"),
                         ("abort", "roll the candidate back at the next decision"),
                         ("promote", "promote the candidate at the next decision"),
                         ("approve", "approve the next step up (policy approval: step)")):
        sub.add_parser(action, help=text, parents=[steer]).set_defaults(func=_act,
                                                                       action=action)
    status = sub.add_parser("status", help="where the rollout of MODEL stands (promotion.yaml)",
                            parents=[rollout])
    status.add_argument("--json", action="store_true", help="the whole promotion.yaml as JSON")
    status.set_defaults(func=_status)
