"""Roll a model back to an earlier stable version: no analysis, and no request lost.

`mlops rollback MODEL [--to VERSION]`. Pure: `stable_versions()` reads the versions that
were stable from `promotion.yaml`'s history, `choose_target()` picks one or says why none
fits, `plan_rollback()` and `plan_restore()` return the files and the commit message.
I/O: `rollback()` reads the history through `gitops.repo.Mirror`, checks the model
files, and commits through `gitops.writeback.WriteBack`. With a runtime to ask
(`promotion.cluster.readiness`), a version that is not ready comes back at 0 % first
and takes the traffic in a second commit once ready. What the commits write and what is
refused: docs/inside-promotion.md; the two commits: docs/make-before-break.md.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import yaml

from contracts.artifact import (
    PARAMS_FILE,
    RECORD_FILE,
    ArtifactError,
    WeightsMismatch,
    read_record,
)
from contracts.traffic import set_subsets, set_weights
from gitops import layout
from gitops.repo import Mirror
from gitops.writeback import DEFAULT_BACKOFF, Backoff, Message, WriteBack, WriteResult
from promotion.cluster.readiness import Readiness, ReadinessCheck
from promotion.decision.state import CanaryState, LastDecision, Phase, dump_state_yaml, load_state
from promotion.errors import (
    RollbackDigestMismatch,
    RollbackError,
    RollbackNotFound,
    RollbackNotReady,
    StaleRollback,
    StateError,
)
from promotion.gitrepo.production import current_state, stable_version
from serving import manifests

__all__ = [
    "PastVersion",
    "RollbackPlan",
    "RollbackResult",
    "choose_target",
    "plan_restore",
    "plan_rollback",
    "rollback",
    "stable_versions",
]


@dataclass(frozen=True)
class PastVersion:
    """A version that was stable on the branch, and whether one can roll back to it."""

    version: str
    last_stable_commit: str
    """The newest commit whose `promotion.yaml` names it stable."""
    manifest: str | None = None
    """Its Deployment's text, from the last commit where the file existed."""
    manifest_commit: str | None = None
    missing: str | None = None
    """Why one cannot roll back to it (None: one can)."""
    checked: str = ""
    """What was checked of its model files (for the commit body)."""


@dataclass(frozen=True)
class RollbackPlan:
    """One commit: the files to write in `apps/<model>/`, the state, the message."""

    model: str
    target: str
    before: CanaryState
    state: CanaryState
    documents: list[dict[str, Any]] = field(default_factory=list)
    restore: dict[str, str] = field(default_factory=dict)
    """File name -> exact text (the recovered Deployment)."""
    remove_versions: list[str] = field(default_factory=list)
    message: Message = Message("")

    def write(self, root: pathlib.Path) -> None:
        """Write the plan into a checkout (the write-back's change function)."""
        folder = pathlib.Path(root) / layout.APPS / self.model
        for name, text in self.restore.items():
            (folder / name).write_text(text)  # verbatim: what served before, byte for byte
        layout.write_model(root, self.model, self.documents,
                           extra={layout.PROMOTION: dump_state_yaml(self.state)},
                           remove_versions=self.remove_versions)


@dataclass(frozen=True)
class RollbackResult:
    """What `rollback()` did."""

    model: str
    target: str
    previous: str | None
    status: str
    """`committed` or `unchanged` (the version already serves)."""
    commit: str | None
    message: str
    checked: str = ""
    """What was checked of the version's model files ("" when nothing was to check)."""
    prepared: str | None = None
    """The first commit of a make-before-break rollback (the Deployment back at 0 %)."""
    ready: str = ""
    """What the runtime said when the version was ready ("" when it was not asked)."""


#: How long a rollback waits for the version it brings back to be ready (seconds): a
#: model server's start on a busy node, an image pull, with margin.
DEFAULT_WAIT = 300.0


# -- pure ---------------------------------------------------------------------------------


def stable_versions(states: Iterable[tuple[str, CanaryState | None]]) -> list[tuple[str, str]]:
    """(version, newest commit naming it stable) per version, newest first.

    `states` is the history of `promotion.yaml`, newest first, as (commit,
    state); a state that could not be read is None and skipped.
    """
    seen: dict[str, str] = {}
    for commit, state in states:
        if state is not None and state.stable and state.stable not in seen:
            seen[state.stable] = commit
    return list(seen.items())


def _choices(past: Sequence[PastVersion], current: str | None) -> str:
    usable = [p.version for p in past if p.missing is None and p.version != current]
    return ", ".join(usable) if usable else "none"


def choose_target(model: str, state: CanaryState | None, current: str | None,
                  past: Sequence[PastVersion], to: str | None) -> PastVersion:
    """The version to roll back to: `to`, else the newest stable one before `current`.

    Raises `RollbackNotFound` (naming what is missing and the versions one can
    roll back to) or `RollbackError` (the candidate of the canary in flight).
    """
    by_version = {p.version: p for p in past}
    if to is None:
        earlier = [p for p in past if p.version != current]
        if not earlier:
            raise RollbackNotFound(
                f"{model}: no earlier stable version in the GitOps history "
                f"(only {current or 'nothing'} was ever stable); nothing to roll back to")
        chosen = earlier[0]
    elif to == current:
        return by_version.get(to) or PastVersion(version=to, last_stable_commit="")
    elif state is not None and state.phase.active and state.candidate == to:
        raise RollbackError(
            f"{model}: {to} is the candidate of the canary in flight, not an earlier version; "
            f"`mlops canary promote {model}` makes it stable")
    elif to not in by_version:
        raise RollbackNotFound(
            f"{model}: cannot roll back to {to}: it was never the stable version in the GitOps "
            f"history; versions you can roll back to: {_choices(past, current)}")
    else:
        chosen = by_version[to]
    if chosen.missing is not None:
        raise RollbackNotFound(
            f"{model}: cannot roll back to {chosen.version}: {chosen.missing}; "
            f"versions you can roll back to: {_choices(past, current)}")
    return chosen


def _deployment(model: str, version: str, text: str) -> dict[str, Any]:
    """The recovered text, checked as the layout will read it back."""
    where = f"{layout.APPS}/{model}/deployment-{version}.yaml"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RollbackError(f"{where} as recovered from the history is not YAML: {exc}") from None
    labels = ((doc or {}).get("metadata") or {}).get("labels") or {} if isinstance(doc, dict) \
        else {}
    if not isinstance(doc, dict) or doc.get("kind") != "Deployment" \
            or labels.get("version") != version or labels.get("app") not in (None, model):
        raise RollbackError(f"{where} as recovered from the history is not the Deployment of "
                            f"{model} {version}")
    return doc


def plan_rollback(current: layout.ModelState, target: PastVersion, *, by: str,
                  now: dt.datetime, command: str = "", ready: str = "") -> RollbackPlan | None:
    """The commit that makes `target` stable at 100 %; None when it already is.

    `current` is `apps/<model>/` as read from the branch; `target.manifest`
    the Deployment's text from the history (unused while the version still has
    its Deployment in `current`). `ready`: what the runtime said when the
    version was ready, before this commit gives it the traffic ("" unasked).
    """
    model, version = current.model, target.version
    if current.virtual_service is None or current.destination_rule is None:
        raise RollbackError(f"apps/{model}/ lacks its VirtualService or DestinationRule; "
                            "fix the folder first (`mlops gitops lint`)")
    state = current_state(current) or CanaryState(model=model, stable=stable_version(current))
    serving = stable_version(current, state)
    in_flight = state.phase.active and state.candidate is not None
    if serving == version and version in current.deployments and not in_flight:
        return None
    restore: dict[str, str] = {}
    if version not in current.deployments or version != serving:
        if target.manifest is None:
            raise RollbackNotFound(f"{model}: no Deployment of {version} in the GitOps history")
        recovered = _deployment(model, version, target.manifest)
        if current.deployments.get(version) != recovered:  # not back already (`plan_restore`)
            restore[f"deployment-{version}.yaml"] = target.manifest
    docs = [set_subsets(current.destination_rule, version, None),
            set_weights(current.virtual_service, 0, with_canary=False)]
    remove = sorted(v for v in current.deployments if v != version)
    reason = f"rolled back to {version} by {by}: stable at 100% at once, no analysis"
    after = CanaryState(model=model, phase=Phase.PROMOTED, stable=version,
                        last_decision=LastDecision(kind="rollback", reason=reason, at=now,
                                                   cause="human", weight=0))
    ended = f"; canary {state.candidate} at {state.weight}% ended" if in_flight else ""
    subject = f"rollback({model}): {version} is stable at 100% (was {serving}{ended})"
    body = [f"Requested by {by}" + (f" with `{command}`." if command else "."),
            f"No analysis was done: {version} takes all the traffic at once, without canary "
            "steps or metrics.", ""]
    if ready:
        body.append(f"- {version} was ready before it took the traffic: {ready}")
    if restore:
        source = f" from {target.manifest_commit[:12]}" if target.manifest_commit else ""
        body.append(f"- deployment-{version}.yaml restored{source}, as it was the last time it "
                    "was on the branch")
    if target.checked:
        body.append(f"- model files: {target.checked}")
    if remove:
        body.append(f"- removed: {', '.join(f'deployment-{v}.yaml' for v in remove)}")
    trailers = [("Mlops-Decision", "rollback/human"), ("Mlops-Model", model),
                ("Mlops-Step", f"{state.weight if in_flight else 0}->0"),
                ("Mlops-Candidate", str(state.candidate if in_flight else None)),
                ("Mlops-Stable", str(serving)), ("Mlops-Rollback-To", version),
                ("Mlops-Reason", reason), ("Mlops-Requested-By", by)]
    if restore and target.manifest_commit:
        trailers.append(("Mlops-Restored-From", target.manifest_commit))
    return RollbackPlan(model=model, target=version, before=state, state=after, documents=docs,
                        restore=restore, remove_versions=remove,
                        message=Message(subject, "\n".join(body).strip(), trailers))


def plan_restore(current: layout.ModelState, target: PastVersion, *, by: str,
                 command: str = "") -> RollbackPlan | None:
    """The first commit of a make-before-break rollback; None when there is nothing to bring
    back (the version's Deployment is on the branch already).

    `target`'s Deployment comes back from the history, byte for byte, with no route:
    the VirtualService and DestinationRule are not touched, so the traffic stays on
    what serves now while the version starts. A canary in flight is paused (its
    weights stay) so the controller neither steps nor promotes it meanwhile: the
    rollback that follows ends it. Pure, like `plan_rollback`.
    """
    model, version = current.model, target.version
    if version in current.deployments:
        return None
    if target.manifest is None:
        raise RollbackNotFound(f"{model}: no Deployment of {version} in the GitOps history")
    _deployment(model, version, target.manifest)
    state = current_state(current) or CanaryState(model=model, stable=stable_version(current))
    serving = stable_version(current, state)
    after = state
    paused = ""
    if state.phase.active and state.candidate is not None and state.phase is not Phase.PAUSED:
        after = state.with_(phase=Phase.PAUSED,
                            pause_reason=f"paused: rollback to {version} under way "
                                         f"(requested by {by})")
        paused = f"; canary {state.candidate} paused at {state.weight}%"
    subject = (f"rollback({model}): bring {version} back before it takes traffic "
               f"({serving} serves{paused})")
    source = f" from {target.manifest_commit[:12]}" if target.manifest_commit else ""
    body = [f"Requested by {by}" + (f" with `{command}`." if command else "."),
            f"The first of two commits (make-before-break): {version} runs again at 0% and "
            f"takes the traffic in the next commit, once it is ready; until then {serving} "
            "serves as before.", "",
            f"- deployment-{version}.yaml restored{source}, as it was the last time it was on "
            "the branch"]
    if target.checked:
        body.append(f"- model files: {target.checked}")
    if paused:
        body.append(f"- canary {state.candidate} paused at {state.weight}%: the rollback ends it")
    trailers = [("Mlops-Decision", "restore/human"), ("Mlops-Model", model),
                ("Mlops-Stable", str(serving)), ("Mlops-Rollback-To", version),
                ("Mlops-Requested-By", by)]
    if target.manifest_commit:
        trailers.append(("Mlops-Restored-From", target.manifest_commit))
    return RollbackPlan(model=model, target=version, before=state, state=after,
                        restore={f"deployment-{version}.yaml": target.manifest},
                        message=Message(subject, "\n".join(body), trailers))


def not_ready_message(model: str, version: str, serving: str | None, answer: Readiness,
                      waited: float, prepared: RollbackPlan | None,
                      prepared_commit: str | None) -> str:
    """Why the rollback stopped before moving the traffic, and what to do (pure)."""
    why = (f"{version} cannot become ready: {answer.reason}" if answer.lasting else
           f"{version} is not ready after {waited:.0f}s: {answer.reason}")
    text = f"{model}: {why}; the traffic did not move, {serving} still serves"
    if prepared is not None and prepared.state.phase is Phase.PAUSED \
            and prepared.before.phase is not Phase.PAUSED:
        text += f" (canary {prepared.before.candidate} paused at {prepared.before.weight}%)"
    if prepared_commit:
        text += (f". {version}'s Deployment came back at 0% in {prepared_commit[:12]}: run "
                 f"`mlops rollback {model} --to {version}` again once it is ready, or "
                 f"`git revert {prepared_commit[:12]}`")
    return text


# -- I/O ----------------------------------------------------------------------------------


def wait_ready(readiness: ReadinessCheck, model: str, version: str,
               desired: dict[str, Any] | None, *, wait: float, poll: float = 1.0,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep,
               progress: Callable[[str], None] | None = None) -> tuple[Readiness, float]:
    """Ask until `version` is ready, cannot be (lasting), or `wait` seconds passed;
    (the last answer, seconds waited). Each new reason goes to `progress`."""
    started = clock()
    said = None
    while True:
        answer = readiness.check(model, version, desired)
        waited = clock() - started
        if answer.ready or answer.lasting or waited >= wait:
            return answer, waited
        if progress is not None and answer.reason != said:
            said = answer.reason
            progress(f"  waiting for {version} to be ready (up to {wait:.0f}s): {answer.reason}")
        sleep(min(poll, max(0.0, wait - waited)))


def _published(model: str, version: str, manifest: str | None,
               models_root: pathlib.Path | None, *, digest: bool) -> tuple[str | None, str]:
    """(what is missing or None, what was checked) of a version's model files."""
    if manifest is None:
        return (f"its Deployment (apps/{model}/deployment-{version}.yaml) is not in the GitOps "
                "history", "")
    try:
        doc = yaml.safe_load(manifest)
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
    except (yaml.YAMLError, AttributeError):
        return f"apps/{model}/deployment-{version}.yaml in the history is not a Deployment", ""
    uri = str(annotations.get(manifests.ANNOTATION_MODEL_URI) or "")
    if models_root is not None:
        folder = pathlib.Path(models_root) / model / version
    elif uri.startswith("file://"):
        folder = pathlib.Path(uri[len("file://"):])
    else:
        return None, (f"not checked (model-uri {uri or '-'} is not a local path; "
                      "pass --models-root to check the models volume)")
    for name in (RECORD_FILE, PARAMS_FILE):
        if not (folder / name).is_file():
            return (f"its model files are no longer published: {folder / name} not found "
                    f"(models root {models_root or folder.parent.parent}); publish {version} "
                    "again or retrain it", "")
    if digest:
        try:
            record = read_record(folder, check_weights=True)
        except WeightsMismatch as exc:
            raise RollbackDigestMismatch(f"{model}: cannot roll back to {version}: {exc}; "
                                         "nothing was committed") from None
        except ArtifactError as exc:
            return f"its published model files are not usable: {exc}", ""
        expected = annotations.get(manifests.ANNOTATION_WEIGHTS_SHA256)
        if expected and record.weights_sha256 != expected:
            raise RollbackDigestMismatch(
                f"{model}: cannot roll back to {version}: {folder / RECORD_FILE} holds weights "
                f"{record.weights_sha256[:12]}..., not the {str(expected)[:12]}... its "
                "Deployment was approved with; nothing was committed")
    return None, f"{folder} (weights sha256 checked)" if digest else str(folder)


def _history(mirror: Mirror, tip: str, model: str) -> list[tuple[str, CanaryState | None]]:
    path = f"{layout.APPS}/{model}/{layout.PROMOTION}"
    out: list[tuple[str, CanaryState | None]] = []
    for info in mirror.log(tip, paths=[path], first_parent=True):
        text = mirror.show(info.sha, path)
        try:
            out.append((info.sha, load_state(text, path) if text is not None else None))
        except StateError:
            out.append((info.sha, None))  # a hand-broken state in the past: not a stable one
    return out


def _recover(mirror: Mirror, tip: str, model: str, version: str) -> tuple[str | None, str | None]:
    """The Deployment's text at the last commit (first-parent) where the file existed."""
    path = f"{layout.APPS}/{model}/deployment-{version}.yaml"
    changes = mirror.log(tip, paths=[path], first_parent=True)
    if not changes:
        return None, None
    newest = changes[0].sha
    text = mirror.show(newest, path)
    if text is not None:
        return text, newest
    parent = mirror.git.out("rev-parse", f"{newest}^1")  # it was deleted there
    return mirror.show(parent, path), parent


def rollback(repo: str, model: str, *, to: str | None = None, by: str, branch: str = "main",
             workdir: pathlib.Path | None = None, models_root: pathlib.Path | None = None,
             now: dt.datetime | None = None, backoff: Backoff = DEFAULT_BACKOFF,
             command: str = "", readiness: ReadinessCheck | None = None,
             wait: float = DEFAULT_WAIT, poll: float = 1.0,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             progress: Callable[[str], None] | None = None) -> RollbackResult:
    """Make `to` (default: the previous stable version) stable at 100 %.

    With `readiness`, make-before-break (module docstring): a version that is not
    ready comes back at 0 % first, and the traffic moves only once it is ready
    (`RollbackNotReady` after `wait` seconds, or at once when it cannot be).
    `progress` gets a line per commit and per new reason while waiting."""
    now = now or dt.datetime.now(dt.timezone.utc)
    writer = WriteBack(repo, workdir=workdir, backoff=backoff)
    prepared: tuple[RollbackPlan, str | None] | None = None
    ready = ""  # what the runtime said once the version was ready
    stale = 0
    while True:
        with tempfile.TemporaryDirectory(prefix="mlops-rollback-") as tmp:
            with Mirror(repo, path=pathlib.Path(tmp) / "mirror.git") as mirror:
                tip = mirror.sha(branch)
                if tip is None:
                    raise RollbackNotFound(f"{mirror.remote.display}: branch {branch!r} not "
                                           "found; is it a GitOps repo?")
                if not mirror.ls(tip, f"{layout.APPS}/{model}"):
                    raise RollbackNotFound(f"model {model!r} has no folder apps/{model}/ on "
                                           f"{branch!r} of {mirror.remote.display}")
                root = pathlib.Path(tmp) / "tree"
                mirror.export(tip, root)
                current = layout.read_model(root, model)
                state = current_state(current)
                serving = stable_version(current, state)
                past = [PastVersion(version, commit, *_recover(mirror, tip, model, version))
                        for version, commit in stable_versions(_history(mirror, tip, model))]
        # Every earlier version is looked for on the models volume (cheap); the weights'
        # digest is checked for the chosen one only (hashing every version's weights is not).
        past = [replace(p, missing=_published(model, p.version, p.manifest, models_root,
                                              digest=False)[0]) for p in past]
        target = choose_target(model, state, serving, past, to)
        if target.version != serving or target.version not in current.deployments:
            missing, checked = _published(model, target.version, target.manifest, models_root,
                                          digest=True)
            past = [replace(p, missing=missing) if p.version == target.version else p
                    for p in past]
            target = replace(choose_target(model, state, serving, past, target.version),
                             checked=checked)
        the_plan = plan_rollback(current, target, by=by, now=now, command=command, ready=ready)
        if the_plan is None:
            return RollbackResult(model, target.version, serving, "unchanged", tip,
                                  f"{model}: {target.version} already serves 100% on "
                                  f"{branch!r}; nothing to roll back",
                                  prepared=prepared[1] if prepared else None)
        to = target.version  # the same version on every pass, whatever the branch does
        if readiness is not None and not ready:
            first = plan_restore(current, target, by=by, command=command)
            if first is not None:
                try:
                    done = _commit(writer, branch, model, first, state)
                except StaleRollback:
                    stale += 1
                    if stale < 3:
                        continue
                    raise
                prepared = (first, done.commit)
                if progress is not None:
                    progress(f"{first.message.subject}; commit {(done.commit or '')[:12]}")
            desired = current.deployments.get(target.version)
            if desired is None and target.manifest is not None:
                desired = _deployment(model, target.version, target.manifest)
            answer, waited = wait_ready(readiness, model, target.version, desired, wait=wait,
                                        poll=poll, clock=clock, sleep=sleep, progress=progress)
            if not answer.ready:
                raise RollbackNotReady(not_ready_message(
                    model, target.version, serving, answer, waited,
                    prepared[0] if prepared else None, prepared[1] if prepared else None))
            ready = answer.reason
            continue  # plan the traffic's move again, from the branch as it is now
        try:
            result = _commit(writer, branch, model, the_plan, state)
        except StaleRollback:
            stale += 1
            if stale < 3:
                continue  # plan again from the new tip
            raise
        return RollbackResult(model, target.version, serving, result.status, result.commit,
                              the_plan.message.subject, target.checked,
                              prepared=prepared[1] if prepared else None, ready=ready)


def _commit(writer: WriteBack, branch: str, model: str, the_plan: RollbackPlan,
            state: CanaryState | None) -> WriteResult:
    """Commit a plan on top of the `promotion.yaml` it was planned from (`StaleRollback`
    when someone changed it meanwhile: plan again)."""
    base = the_plan.before if state is not None else None

    def change(root: pathlib.Path) -> None:
        path = root / layout.APPS / model / layout.PROMOTION
        origin = f"{layout.APPS}/{model}/{layout.PROMOTION}"
        seen = load_state(path.read_text(), origin) if path.is_file() else None
        if seen != base:
            raise StaleRollback(f"apps/{model}/promotion.yaml changed on {branch!r} while "
                                "the rollback was planned; run again")
        the_plan.write(root)

    return writer.commit(branch, change, the_plan.message)
