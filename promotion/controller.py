"""The promotion controller: read git, look at the metrics, decide, commit. Repeat.

One pass (`Controller.tick`) per poll, for every model under `apps/` on the GitOps
repo's `main`: read its folder and `promotion.yaml`, adopt a weight a person committed
by hand (a takeover), judge every due window with the pure `decide`, and commit each
decision that changes the rollout, one commit each (`promotion/gitrepo/apply.py`).
Holds are kept in memory and rebuilt after a restart by replaying the windows since the
last committed decision. Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import json
import logging
import math
import pathlib
import shutil
import threading
import time
from typing import Any, Callable, Protocol

from contracts.traffic import TrafficError, read_routes
from gitops import layout
from gitops.batch import BatchItem, BatchResult, commit_batch
from gitops.errors import GitOpsError
from gitops.git import parse_trailers
from gitops.repo import Mirror
from gitops.writeback import Backoff, WriteBack
from promotion.cluster.readiness import AlwaysReady, Readiness, ReadinessCheck
from promotion.controller_metrics import ControllerMetrics
from promotion.decision import answers, quality
from promotion.decision.analysis import (
    Decision,
    Hold,
    Promote,
    Rollback,
    decide,
    decide_ready,
    shadowed,
)
from promotion.decision.observations import Observations, PairedAnswers, histogram_quantile
from promotion.decision.policy import CanaryPolicy
from promotion.decision.state import CanaryState, LastDecision, Phase
from promotion.errors import PolicyError, StaleDecision, StateError
from promotion.gitrepo import apply, platform_policy
from promotion.gitrepo.policy_file import bounded_folder_policy
from promotion.gitrepo.propose import current_state
from promotion.metrics import MetricSource
from promotion.metrics.probe import AnswersProbe
from promotion.reports import report
from promotion.reports.notify import format_text

__all__ = ["Controller", "ControllerConfig", "Outcome"]

log = logging.getLogger("mlops.controller")

_MATERIAL = ("phase", "weight", "stable", "candidate", "requested", "pause_reason",
             "awaiting_approval")


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)


class Commenter(Protocol):
    """Posts a comment on the pull request that proposed `candidate` (forge glue)."""

    def __call__(self, model: str, candidate: str, body: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    """How the controller runs (all plain values; the CLI builds it)."""

    repo: str
    workdir: pathlib.Path
    branch: str = "main"
    interval: float | None = None
    """Overrides every model's `policy.interval` (seconds) when set."""
    settle: float = 0.0
    """Seconds to wait after a window ends before reading it (scrape lag)."""
    on_rollback: apply.OnRollback = "remove"
    checkpoint_every: int = 0
    max_catchup: int = 240
    report_url: str | None = None
    """Base URL under which the work dir's `rollouts/` is published (for links)."""
    git_poll: float = 0.0
    """Fetch the GitOps repo at most this often (seconds; 0: every pass). A remote
    forge is not asked every second; our own commits update the mirror at once."""
    workers: int = 1
    """Models analysed at once in a pass (a fleet: their queries overlap). With more
    than one, the pass's decisions are pushed together at its end, one commit each
    (`gitops.batch`), and canary reports are written off the pass."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one analysed window (or human edit) led to."""

    model: str
    kind: str
    cause: str
    reason: str
    at: dt.datetime
    committed: str | None = None
    subject: str | None = None


@dataclasses.dataclass
class _Track:
    """The uncommitted continuation of one model's committed state."""

    base: CanaryState
    state: CanaryState
    as_of: dt.datetime
    uncommitted: int = 0
    routed: bool = False
    """The router has this commit's split (asked until it has; then not again)."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    """A decision made in this pass, its commit not pushed yet."""

    outcome: Outcome
    kind: str
    before: CanaryState
    after: CanaryState
    message: Any
    item: BatchItem


class Controller:
    """Reconciles every model of one GitOps repo against one metric source."""

    def __init__(
        self,
        config: ControllerConfig,
        source: MetricSource | Callable[[CanaryPolicy], MetricSource],
        *,
        metrics: ControllerMetrics | None = None,
        notifier: Any = None,
        refresher: Any = None,
        commenter: Commenter | None = None,
        readiness: ReadinessCheck | None = None,
        prober: AnswersProbe | None = None,
        clock: Callable[[], float] = time.time,
        backoff: Backoff = Backoff(tries=5, first=0.5, cap=5.0),
    ) -> None:
        self.config = config
        # One source for every model, or one per model's policy (its preset).
        self._source = source
        self.metrics = metrics or ControllerMetrics()
        self.notifier = notifier
        self.refresher = refresher
        self.commenter = commenter
        # Who says a merged candidate is deployed and ready (None: assume it is).
        self.readiness: ReadinessCheck = readiness or AlwaysReady()
        # Who asks stable and canary the same images (None: the answers check is skipped).
        self.prober = prober
        self._probed: dict[str, tuple[tuple[str, str, int], float | None, PairedAnswers]] = {}
        self._waiting: dict[str, str] = {}  # model -> last "step not applied" reason logged
        self.clock = clock
        self.workdir = pathlib.Path(config.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.writer = WriteBack(config.repo, workdir=self.workdir / "writeback", backoff=backoff)
        self._mirror: Mirror | None = None
        self._fetched_at: float | None = None
        self._tree_sha: str | None = None
        self._tracks: dict[str, _Track] = {}
        self._folders: dict[tuple[str, str], layout.ModelState] = {}
        self._folder_trees: dict[str, str] = {}  # model -> its folder's git tree id at the tip
        self._policies: dict[tuple[str, str], CanaryPolicy] = {}
        self._config_id: str | None = None  # blob id of mlops-gitops.yaml at the tip
        self._pending: list[_Pending] = []  # decisions of this pass not pushed yet (workers > 1)
        self._prefetched: dict[tuple[str, str, str, float, dt.datetime], Observations] = {}
        self._effects: concurrent.futures.ThreadPoolExecutor | None = None
        self._effects_mirror: Mirror | None = None
        self.last_error: str | None = None
        """Why the last pass could not read the GitOps repo (None: it could)."""
        self.refused: dict[str, str] = {}
        """model -> why its folder on main is refused (a split Istio would reject)."""

    # -- reading main ----------------------------------------------------------------------

    @property
    def mirror(self) -> Mirror:
        if self._mirror is None:
            self._mirror = Mirror(self.config.repo, path=self.workdir / "mirror.git")
        return self._mirror

    def close(self) -> None:
        """Finish pending reports, release the mirrors (the work dir stays for the next run)."""
        if self._effects is not None:
            self._effects.shutdown(wait=True)
            self._effects = None
        for mirror in (self._mirror, self._effects_mirror):
            if mirror is not None:
                mirror.close()
        self._mirror = self._effects_mirror = None

    def _checkout(self) -> pathlib.Path | None:
        """The tip of the branch as files in the work dir (re-exported when it moves)."""
        now = time.monotonic()
        if self._fetched_at is None or now - self._fetched_at >= self.config.git_poll:
            self.mirror.fetch()
            self._fetched_at = now
        sha = self.mirror.sha(self.config.branch)
        if sha is None:
            return None
        tree = self.workdir / "main"
        if sha != self._tree_sha:
            before, config = dict(self._folder_trees), self._config_id
            trees = self._trees(sha)
            if self._tree_sha is None or config != self._config_id or not tree.is_dir():
                tmp = self.workdir / "main.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                self.mirror.export(sha, tmp)
                shutil.rmtree(tree, ignore_errors=True)
                tmp.rename(tree)
            else:
                # Only the model folders that moved: with a fleet, a commit is one
                # model's decision, and exporting every folder each time grew the
                # pass with models x commits. Until it is done the tree
                # is no commit's: a failure below means a full export next time.
                self._tree_sha = None
                for model in set(before) - set(trees):
                    shutil.rmtree(tree / layout.APPS / model, ignore_errors=True)
                moved = sorted(m for m, t in trees.items() if before.get(m) != t)
                for model in moved:
                    shutil.rmtree(tree / layout.APPS / model, ignore_errors=True)
                if moved:
                    self.mirror.export(sha, tree, [f"{layout.APPS}/{m}" for m in moved])
            self._tree_sha = sha
            self._folder_trees = trees
        return tree

    def _trees(self, sha: str) -> dict[str, str]:
        """model -> the git tree id of `apps/<model>/` at `sha` (one `ls-tree` for all).

        A folder whose tree id did not change is not parsed again: at 100 models
        every decision moves main, and re-reading every folder each time made a
        pass grow with models x decisions."""
        proc = self.mirror.git.run("ls-tree", sha, f"{layout.APPS}/", layout.CONFIG_FILE,
                                   check=False)
        out = {}
        for line in proc.stdout.splitlines():
            meta, _, path = line.partition("\t")
            if path == layout.CONFIG_FILE:  # the policies read its namespace: re-read them
                if meta.split()[-1] != self._config_id:
                    self._config_id, self._policies = meta.split()[-1], {}
            elif meta.split()[1] == "tree":
                out[path.rpartition("/")[2]] = meta.split()[-1]
        return out

    def _last_change(self, path: str) -> tuple[float, dict[str, str], str] | None:
        """(commit time, trailers, 'sha author') of the last first-parent commit touching path."""
        assert self._tree_sha is not None
        sep = "\x1f"
        proc = self.mirror.git.run(
            "log", "-1", "--first-parent", f"--format=%ct{sep}%h %an{sep}%(trailers:only,unfold)",
            self._tree_sha, "--", path, check=False, exact=True)
        text = proc.stdout.strip()
        if proc.returncode != 0 or not text:
            return None
        stamp, who, trailers = (text.split(sep) + ["", ""])[:3]
        return float(stamp), parse_trailers(trailers), who

    def _log_wait(self, model: str, reason: str) -> None:
        if self._waiting.get(model) != reason:  # once per change, not once per pass
            self._waiting[model] = reason
            log.info("%s: waiting for the router: %s", model, reason)

    def _anchor(self, model: str, state: CanaryState) -> dt.datetime:
        """Where the committed state's analysis windows start (see the module docstring)."""
        candidates = [t for t in (state.last_decision.at if state.last_decision else None,
                                  state.step_started_at, state.started_at) if t is not None]
        anchor = max(candidates) if candidates else None
        change = self._last_change(f"{layout.APPS}/{model}/{layout.PROMOTION}")
        if change is not None and "Mlops-Window" not in change[1]:
            # Written by a human or a merge (not a controller decision): time
            # spent before that commit was not under this state.
            merged = _utc(change[0])
            anchor = merged if anchor is None else max(anchor, merged)
        return anchor or _utc(self.clock())

    # -- the loop --------------------------------------------------------------------------

    def tick(self) -> list[Outcome]:
        """One pass over every model; returns what happened."""
        outcomes: list[Outcome] = []
        try:
            root = self._checkout()
        except Exception as exc:  # a bad commit or a git fault: log, count, try next tick
            log.error("cannot read %s: %s", self.config.repo, exc)
            self.metrics.error("-", "git")
            self.last_error = str(exc)
            return outcomes
        self.last_error = None
        if root is None:
            return outcomes
        models = layout.list_models(root)
        live = {(self._folder_trees.get(m, self._tree_sha or ""), m) for m in models}
        self._folders = {k: v for k, v in self._folders.items() if k in live}
        self._policies = {k: v for k, v in self._policies.items() if k in live}
        self._prefetch(models)
        if self.config.workers > 1 and len(models) > 1:
            # Models are independent: analyse them at once; their commits wait
            # in `_pending` and go out in one push below.
            with concurrent.futures.ThreadPoolExecutor(self.config.workers) as pool:
                for found in pool.map(lambda m: self._reconcile_guarded(root, m), models):
                    outcomes += found
        else:
            for model in models:
                outcomes += self._reconcile_guarded(root, model)
        outcomes = self._flush(outcomes)  # workers > 1: decisions waited for one push
        self._prefetched = {}
        self.metrics.tick()
        return outcomes

    def _reconcile_guarded(self, root: pathlib.Path, model: str) -> list[Outcome]:
        """`reconcile`, with one model's failure logged and contained."""
        try:
            found = self.reconcile(root, model)
        except StaleDecision as exc:
            log.info("%s: %s", model, exc)
            self._tracks.pop(model, None)
            found = []
        except TrafficError as exc:
            # A human's split that Istio would reject: refused, said once per
            # change (not every pass), and nothing moves until it is fixed.
            if self.refused.get(model) != str(exc):
                log.error("%s: refused: %s; nothing changes until it is fixed", model, exc)
                self.metrics.error(model, type(exc).__name__)
            self.refused[model] = str(exc)
            self._tracks.pop(model, None)
            return []
        except (GitOpsError, StateError, PolicyError) as exc:
            log.error("%s: %s", model, exc)
            self.metrics.error(model, type(exc).__name__)
            self._tracks.pop(model, None)
            found = []
        except Exception as exc:  # one broken model must not stop the others
            log.exception("%s: unexpected error: %s", model, exc)
            self.metrics.error(model, type(exc).__name__)
            self._tracks.pop(model, None)
            found = []
        self.refused.pop(model, None)
        return found

    def run(self, stop: threading.Event, poll: float = 1.0) -> None:
        """Tick every `poll` seconds until `stop` is set."""
        while not stop.is_set():
            started = time.monotonic()
            self.tick()
            stop.wait(max(0.0, poll - (time.monotonic() - started)))

    def source_for(self, policy: CanaryPolicy) -> MetricSource:
        """The metric source for a model's policy."""
        if isinstance(self._source, MetricSource):
            return self._source
        return self._source(policy)

    # -- one model -------------------------------------------------------------------------

    def _policy(self, root: pathlib.Path, folder: layout.ModelState) -> CanaryPolicy:
        # The one reading `mlops ui` shares (the models' namespace from mlops-gitops.yaml),
        # within the platform's bounds again.
        policy, loosened = bounded_folder_policy(folder, layout.load_config(root))
        if loosened:
            log.warning("%s: apps/%s/%s loosens the platform's policy (%s: %s); judged with "
                        "the platform's values instead", folder.model, folder.model,
                        apply.POLICY_FILE, platform_policy.WHERE, ", ".join(loosened))
        return policy

    def reconcile(self, root: pathlib.Path, model: str) -> list[Outcome]:
        """Bring one model forward by every window that is due."""
        key = (self._folder_trees.get(model, self._tree_sha or ""), model)
        folder = self._folders.get(key)
        if folder is None:  # parse each version of a folder once, not every pass
            folder = layout.read_model(root, model)
            self._folders[key] = folder
        committed = current_state(folder)
        if committed is None:
            return []
        self.metrics.state(model, committed.phase.value, committed.weight)
        track = self._tracks.get(model)
        if track is None or track.base != committed:
            as_of = self._anchor(model, committed)
            state = committed
            if state.phase.active and state.started_at is None:
                state = state.with_(started_at=as_of, step_started_at=as_of)
            track = _Track(base=committed, state=state, as_of=as_of)
            self._tracks[model] = track
        if not committed.phase.active or committed.candidate is None:
            return []

        now = _utc(self.clock())
        policy = self._policies.get(key)
        if policy is None:  # like the folder: validated once per version of it
            policy = self._policies[key] = self._policy(root, folder)
        manual = self._manual_weight(folder, track, now, takeover=policy.mode != "shadow")
        if manual is not None:
            return [manual]

        interval = float(self.config.interval or policy.interval)
        # A promotion asked for moves all the traffic to the candidate: only once it is
        # ready (make-before-break); a waiting one gets its first step first.
        promote = committed.requested == "promote"
        if committed.requested is not None and not (promote and committed.phase is Phase.WAITING):
            if promote:
                answer = self.readiness.check(model, committed.candidate,
                                              folder.deployments.get(committed.candidate))
                if not answer.ready:  # `mlops canary abort` still ends it at once
                    self._log_wait(model, f"promotion waits for the candidate: {answer.reason}")
                    return []
            empty = Observations(window_seconds=interval)
            return [self._apply(folder, track, decide(policy, track.state, empty, now), now)]
        if committed.phase is Phase.PAUSED:
            return []
        if committed.phase is Phase.WAITING:
            # No traffic and no analysis until the runtime has applied the merge and
            # the candidate's pods are ready; then one commit gives it the first step.
            # A failure no wait can fix ends the rollout now, not after ready_timeout.
            answer = self.readiness.check(model, committed.candidate,
                                          folder.deployments.get(committed.candidate))
            if not answer.ready and answer.lasting:
                decision = _cannot_serve(policy, track.state, answer, now)
            else:
                decision = decide_ready(policy, track.state, answer.ready, answer.reason, now)
            return [self._apply(folder, track, decision, now)]

        if not track.routed:
            answer = self.readiness.routed(model, folder.weights())
            if not answer.ready:
                # The step's clock starts when its split is live, not at the commit: no
                # window and no "no traffic" grace runs on the previous step's routing.
                track.as_of = max(track.as_of, now)
                track.state = track.state.with_(step_started_at=now)
                self._log_wait(model, answer.reason)
                return []
            track.routed = True

        outcomes: list[Outcome] = []
        ready = now - dt.timedelta(seconds=self.config.settle)
        while (window := self._window(track.as_of, interval, ready)) is not None:
            end = track.as_of + dt.timedelta(seconds=window)
            assert committed.stable is not None and committed.candidate is not None
            obs = self._prefetched.pop((model, committed.stable, committed.candidate, window, end),
                                       None)  # read ahead with the other models (`_prefetch`)
            if obs is None:
                obs = self.source_for(policy).observe(model, committed.stable,
                                                      committed.candidate, window, at=end)
            if obs.fault is None:
                paired = self._paired(policy, model, committed, interval)
                if paired is not None:
                    obs = obs.model_copy(update={"answers": paired})
            decision = decide(policy, track.state, obs, end)
            if policy.mode == "shadow":
                decision = shadowed(track.state, decision)
            self._record_point(model, committed, track.state, obs, decision, end, policy)
            outcome = self._apply(folder, track, decision, end)
            outcomes.append(outcome)
            if outcome.committed is not None or self._tracks.get(model) is not track:
                break  # main moved: the next tick starts from the new commit
        return outcomes

    def _window(self, as_of: dt.datetime, interval: float, ready: dt.datetime) -> float | None:
        """The length of the next due window from `as_of` (None: none is due yet)."""
        if as_of + dt.timedelta(seconds=interval) > ready:
            return None
        due = int((ready - as_of).total_seconds() // interval)
        return interval * (due - self.config.max_catchup + 1) \
            if due > self.config.max_catchup else interval

    def _prefetch(self, models: list[str]) -> None:
        """Every model's next due window read at once, before the pass.

        A source with `observe_many` (`PrometheusSource`: one query per signal for
        all of them) answers the windows the pass is about to ask for one model at a
        time; `reconcile` takes an answer only for exactly the same (model, versions,
        window, end), else it asks as before, so no decision can differ. Models whose
        folder moved since the last pass are not read ahead (their track is rebuilt)."""
        self._prefetched = {}
        ready = _utc(self.clock()) - dt.timedelta(seconds=self.config.settle)
        groups: dict[int, tuple[Any, list[tuple[str, str, str, float, dt.datetime]]]] = {}
        for model in models:
            track = self._tracks.get(model)
            policy = self._policies.get((self._folder_trees.get(model, self._tree_sha or ""),
                                         model))
            if track is None or policy is None or not track.routed:
                continue
            state = track.base
            if state.phase is not Phase.PROGRESSING or state.requested is not None \
                    or state.stable is None or state.candidate is None:
                continue
            window = self._window(track.as_of, float(self.config.interval or policy.interval),
                                  ready)
            try:
                source = self.source_for(policy)
            except Exception:  # said by `reconcile`, with the model's other errors
                continue
            if window is None or not hasattr(source, "observe_many"):
                continue
            groups.setdefault(id(source), (source, []))[1].append(
                (model, state.stable, state.candidate, window,
                 track.as_of + dt.timedelta(seconds=window)))
        for source, wanted in groups.values():
            if len(wanted) < 2:
                continue  # one model: its own queries, as before
            try:
                found = source.observe_many(wanted)
                self._prefetched.update((w, o) for w, o in zip(wanted, found)
                                        if isinstance(o, Observations))
            except Exception as exc:  # reading ahead is an optimisation: ask per model
                log.warning("reading %d windows at once failed: %s", len(wanted), exc)

    def _paired(self, policy: CanaryPolicy, model: str, committed: CanaryState,
                interval: float) -> PairedAnswers | None:
        """The paired answers of this step (`promotion/metrics/probe.py`,
        `promotion/decision/answers.py`).

        Probed once per step, not per window: the answers are deterministic, so
        asking again only adds requests; every window of the step carries the same
        evidence (a replay after a restart probes once more). A failed probe is
        tried again an interval later, unless asking again cannot help (a 404: the
        stable ships no probe set)."""
        check = policy.quality.answers
        if self.prober is None or check is None:
            return None
        assert committed.stable is not None and committed.candidate is not None
        key = (committed.stable, committed.candidate, committed.weight)
        now = self.clock()
        cached = self._probed.get(model)
        if cached is not None and cached[0] == key and (
                cached[1] is None or now - cached[1] < interval):
            return cached[2]
        retry_after: float | None = None  # None: this step's answer
        try:
            stable, canary = self.prober.answers(model, committed.stable, committed.candidate)
            paired = answers.compare(stable, canary, check)
        except Exception as exc:  # a probe never stops the analysis: "no probe", said why
            paired = PairedAnswers.failed(str(exc))
            retry_after = None if getattr(exc, "lasting", False) else now
            if cached is None or cached[2].error != paired.error:
                log.warning("%s: paired answers probe failed: %s", model, exc)
        self._probed[model] = (key, retry_after, paired)
        return paired

    def _material(self, before: CanaryState, decision: Decision, track: _Track) -> bool:
        if not isinstance(decision, Hold):
            return True
        after = decision.state
        if any(getattr(before, f) != getattr(after, f) for f in _MATERIAL):
            return True
        every = self.config.checkpoint_every
        return bool(every) and track.uncommitted + 1 >= every

    def _apply(self, folder: layout.ModelState, track: _Track, decision: Decision,
               at: dt.datetime) -> Outcome:
        model = folder.model
        evidence = decision.evidence.to_dict()
        self.metrics.decision(model, decision.kind, decision.cause, at.timestamp(), evidence)
        log.info("%s: %s/%s at %s%%: %s %s", model, decision.kind, decision.cause,
                 track.state.weight, decision.reason,
                 json.dumps(evidence, sort_keys=True, separators=(",", ":")))
        if not self._material(track.base, decision, track):
            track.state = decision.state
            track.as_of = at
            track.uncommitted += 1
            return Outcome(model, decision.kind, decision.cause, decision.reason, at)
        after = decision.state
        if isinstance(decision, Promote):
            after = apply.finalise_promoted(after)
        kind = decision.kind
        return self._commit(folder, track, kind, after, at, decision.reason, decision.cause,
                            evidence)

    def _commit(self, folder: layout.ModelState, track: _Track, kind: str,
                after: CanaryState, at: dt.datetime, reason: str, cause: str,
                evidence: dict[str, Any]) -> Outcome:
        model = folder.model
        before = track.state
        the_plan = apply.plan(folder, before, after, self.config.on_rollback)
        msg = apply.message(kind, before, after, at=at, reason=reason, cause=cause,  # type: ignore[arg-type]
                            evidence=evidence)
        self._tracks.pop(model, None)  # the next tick starts from what main says
        self._fetched_at = None  # ... fetched again at once, whatever `git_poll` says
        outcome = Outcome(model, kind, cause, reason, at, None, msg.subject)
        pending = _Pending(outcome, kind, before, after, msg,
                           BatchItem(apply.change_for(the_plan, track.base), msg))
        if self.config.workers > 1:
            self._pending.append(pending)  # pushed with the pass's others (`_flush`)
            return outcome
        result = apply.commit(self.writer, self.config.branch, the_plan, track.base, msg)
        return self._committed(pending, result.commit if result.status == "committed" else None)

    def _write_batch(self, items: list[BatchItem]) -> list[BatchResult]:
        """Push a pass's decisions together (one writer, one push; `gitops.batch`)."""
        return commit_batch(self.writer, self.config.branch, items)

    def _flush(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Push the pass's pending decisions; `outcomes` with their commits filled in."""
        pending, self._pending = self._pending, []
        if not pending:
            return outcomes
        try:
            results = self._write_batch([p.item for p in pending])
        except GitOpsError as exc:  # nothing was pushed: every decision is made again
            log.error("cannot push %d decisions: %s", len(pending), exc)
            self.metrics.error("-", type(exc).__name__)
            results = [BatchResult("error", error=exc)] * len(pending)
        done: dict[int, Outcome] = {}
        for p, result in zip(pending, results):
            if isinstance(result.error, StaleDecision):
                log.info("%s: %s", p.outcome.model, result.error)
            elif result.error is not None and not isinstance(result.error, GitOpsError):
                log.error("%s: %s", p.outcome.model, result.error)
                self.metrics.error(p.outcome.model, type(result.error).__name__)
            done[id(p.outcome)] = self._committed(p, result.commit)
        return [done.get(id(o), o) for o in outcomes]

    def _committed(self, p: _Pending, commit: str | None) -> Outcome:
        """After the push: count, log and run the side effects of a committed decision."""
        model = p.outcome.model
        if commit is not None:
            self.metrics.committed(model, p.kind)
            self.metrics.state(model, p.after.phase.value, p.after.weight)
            log.info("%s: committed %s %s", model, commit[:12], p.message.subject)
            self._after_commit(model, p.kind, p.before, p.after, p.message.subject,
                               p.outcome.reason, commit)
        return dataclasses.replace(p.outcome, committed=commit)

    # -- humans ----------------------------------------------------------------------------

    def _manual_weight(self, folder: layout.ModelState, track: _Track,
                       now: dt.datetime, takeover: bool = True) -> Outcome | None:
        """A weight edited by hand in the VirtualService is adopted and recorded.

        With `takeover` (the norm) the rollout pauses: the person has taken the
        wheel. In shadow mode people steer by design, so the weight is adopted
        and the analysis goes on at it."""
        state = track.base
        assert state.candidate is not None
        weights = folder.weights()
        observed = weights.get(state.candidate, 0)
        if observed == state.weight:
            return None
        if folder.destination_rule is not None and folder.virtual_service is not None:
            # Strict here, lenient elsewhere: a weight the controller adopts must be one
            # Istio accepts (150 is refused naming the file and field, never adopted).
            read_routes(folder.destination_rule, folder.virtual_service,
                        dr_path=f"{layout.APPS}/{folder.model}/destinationrule.yaml",
                        vs_path=f"{layout.APPS}/{folder.model}/virtualservice.yaml")
        change = self._last_change(f"{layout.APPS}/{folder.model}/virtualservice.yaml")
        sha, _, author = change[2].partition(" ") if change else ("", "", "")
        who = f" (commit {sha} by {author})" if change else ""
        if observed == 0:
            reason = f"canary weight set to 0% by hand{who}: rolled back"
            last = LastDecision(kind="rollback", reason=reason, at=now, cause="manual", weight=0)
            after = state.with_(phase=Phase.ROLLED_BACK, weight=0, requested=None,
                                last_decision=last)
            kind = "rollback"
        elif not takeover:
            reason = f"canary weight set to {observed}% by hand{who}: adopted (shadow mode)"
            last = LastDecision(kind="step", reason=reason, at=now, cause="manual",
                                weight=observed)
            after = state.reset_step(now).with_(weight=observed, last_decision=last)
            kind = "manual"
        else:
            # A takeover: the human's weight stands and the controller stops steering
            # until `mlops canary resume` (resuming one interval later would undo a
            # person's decision without asking them).
            reason = (f"canary weight set to {observed}% by hand{who}: paused until "
                      f"`mlops canary resume {folder.model}`")
            last = LastDecision(kind="step", reason=reason, at=now, cause="manual",
                                weight=observed)
            after = state.reset_step(now).with_(
                weight=observed, last_decision=last, phase=Phase.PAUSED,
                pause_reason=f"paused: weight set to {observed}% by hand{who}")
            kind = "manual"
        track.state = state
        return self._commit(folder, track, kind, after, now, reason, "manual",
                            {"weight": state.weight, "observed_weight": observed})

    # -- after a commit --------------------------------------------------------------------

    def rollout_dir(self, model: str, candidate: str) -> pathlib.Path:
        """Where one rollout's timeline and report live in the work dir."""
        return self.workdir / "rollouts" / model / candidate

    def _record_point(self, model: str, committed: CanaryState, state: CanaryState,
                      obs: Observations, decision: Decision, end: dt.datetime,
                      policy: CanaryPolicy | None = None) -> None:
        if obs.fault is not None or committed.candidate is None:
            return
        point: dict[str, Any] = {"t": end.timestamp(), "weight": state.weight,
                                 "decision": decision.kind, "cause": decision.cause}
        if decision.cause.startswith("shadow-"):
            point["reason"] = decision.reason  # shadow verdicts live here, not in git
        for version, window in (("stable", obs.stable), ("canary", obs.canary)):
            p99 = histogram_quantile(0.99, window.latency) if window.latency else None
            point[version] = {
                "requests": window.requests, "errors": window.errors,
                "rps": window.requests / obs.window_seconds,
                "error_rate": (window.errors / window.requests) if window.requests else None,
                "p99_ms": None if p99 is None or math.isinf(p99) else p99 * 1000.0,
            }
            shares = {}
            for check in policy.quality.checks if policy is not None else ():
                poor = quality.poor_answers(window.quality.get(check.signal), check.at_most)
                if poor is not None and poor[1]:
                    shares[check.name] = poor[0] / poor[1]
            if shares:  # the share of poor answers per quality check, for the plot
                point[version]["poor"] = shares
        path = self.rollout_dir(model, committed.candidate) / "timeline.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(point, sort_keys=True) + "\n")

    def _after_commit(self, model: str, kind: str, before: CanaryState, after: CanaryState,
                      subject: str, reason: str, commit: str | None) -> None:
        if kind == "rollback" and self.refresher is not None:
            self.refresher.refresh(model)  # first: every second counts on a rollback
        if self.config.workers > 1:
            # A report plots in a child process (seconds): off the pass, in order.
            if self._effects is None:
                self._effects = concurrent.futures.ThreadPoolExecutor(1, "mlops-reports")
            self._effects.submit(self._effects_of, model, kind, before, after, subject, reason,
                                 commit)
            return
        self._effects_of(model, kind, before, after, subject, reason, commit)

    def _effects_of(self, model: str, kind: str, before: CanaryState, after: CanaryState,
                    subject: str, reason: str, commit: str | None) -> None:
        """The report, the PR comment and the notification of one committed decision."""
        report_link = None
        if after.phase in (Phase.PROMOTED, Phase.ROLLED_BACK) and before.candidate:
            report_link = self._write_report(model, before, after)
        if after.phase is Phase.PAUSED and before.phase is not Phase.PAUSED:
            kind = "pause"  # a spent budget: someone has to look
        if self.notifier is not None and kind in ("step", "promote", "rollback", "manual", "pause"):
            self.notifier.send(format_text(kind, subject, reason, commit, report_link))

    def _write_report(self, model: str, before: CanaryState, after: CanaryState) -> str | None:
        candidate = before.candidate
        assert candidate is not None
        directory = self.rollout_dir(model, candidate)
        outcome = "promoted" if after.phase is Phase.PROMOTED else "rolled back"
        try:
            points = _dedupe(report.read_timeline(directory / "timeline.jsonl"))
            decisions = self.decisions(model, candidate)
            md, _png = report.write_canary_report(directory, model, before.stable, candidate,
                                                  outcome, decisions, points)
        except Exception as exc:  # a report must never stop a rollback
            log.warning("%s: canary report failed: %s", model, exc)
            return None
        link = str(md) if not self.config.report_url else \
            f"{self.config.report_url.rstrip('/')}/rollouts/{model}/{candidate}/report.md"
        if self.commenter is not None:
            try:
                body = md.read_text() + f"\n\nFull report and plot: {link}\n"
                self.commenter(model, candidate, body)
            except Exception as exc:
                log.warning("%s: PR comment failed: %s", model, exc)
        return link

    def decisions(self, model: str, candidate: str) -> list[dict[str, Any]]:
        """The committed decisions of one rollout, oldest first, read from git trailers."""
        mirror = self.mirror
        if self._effects is not None:  # reports run beside the pass: their own mirror
            if self._effects_mirror is None:
                self._effects_mirror = Mirror(self.config.repo,
                                              path=self.workdir / "mirror-reports.git")
            mirror = self._effects_mirror
        mirror.fetch()
        tip = mirror.sha(self.config.branch)
        out: list[dict[str, Any]] = []
        for info in mirror.log(tip) if tip else []:
            t = info.trailers
            if t.get("Mlops-Model") != model or t.get("Mlops-Candidate") != candidate:
                continue
            when = t.get("Mlops-Window")
            stamp = None
            if when:
                try:
                    stamp = dt.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    stamp = None
            out.append({"kind": t.get("Mlops-Decision", "?").split("/")[0],
                        "subject": info.subject, "commit": info.sha,
                        "time": stamp, "reason": t.get("Mlops-Reason", "")})
        return list(reversed(out))


def _cannot_serve(policy: CanaryPolicy, state: CanaryState, answer: Readiness,
                  now: dt.datetime) -> Decision:
    """The rollback of a candidate that will never be ready (`Readiness.lasting`).

    `decide_ready` waits `ready_timeout` (15 minutes by default) for a candidate that is
    not ready, as it should for one that is still being applied or started; a warm-up
    inference that fails on every try (a 32x32 resize the graph cannot
    reshape) waited those 15 minutes for nothing. Its evidence is `decide_ready`'s; the
    rollback is the one `decide_ready` makes at the timeout, with the runtime's reason
    and without the wait (same cause, `not-ready`, so the trail reads alike)."""
    waiting = decide_ready(policy, state, False, answer.reason, now)
    if state.phase is not Phase.WAITING or not isinstance(waiting, Hold):
        return waiting  # not a waiting candidate, or ready_timeout passed: decide_ready's
    waited = (now - (state.started_at or now)).total_seconds()
    reason = (f"cannot become ready: {answer.reason} (a failure no wait fixes; rolled back "
              f"after {waited:.0f}s, not after ready_timeout {policy.ready_timeout:.0f}s)")
    last = LastDecision(kind="rollback", reason=reason, at=now, cause="not-ready", weight=0)
    after = state.with_(phase=Phase.ROLLED_BACK, weight=0, requested=None, last_decision=last)
    return Rollback(reason=reason, cause="not-ready", evidence=waiting.evidence, state=after)


def _dedupe(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per window end (a replay after a restart appends windows again)."""
    by_t: dict[float, dict[str, Any]] = {}
    for point in points:
        by_t[float(point["t"])] = point
    return [by_t[t] for t in sorted(by_t)]
