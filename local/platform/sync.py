"""The local sync loop: our stand-in for Argo CD, run as a daemon by `mlops up`.

Every tick (``poll_interval``) it reads `apps/` when the GitOps repo's main moved
(:mod:`reposync`, :mod:`desired`), observes its model-server processes and HAProxy,
executes what the pure :func:`plan.plan` returns, and writes ``state/status.json``.
It supervises Prometheus and HAProxy (:mod:`supervisor`) and adopts the model servers a
previous sync left running. Run directly: ``python -m local.platform.sync --workdir DIR``.
More: docs/inside-local.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

from cogs.files import atomic_write_json, atomic_write_text, read_json
from cogs.ports import free_port, port_free
from local.platform import haproxy as haproxy_cfg
from local.platform import podspec, procs, prometheus
from local.platform.haproxy import RuntimeApi, RuntimeApiError
from local.platform.plan import (
    Action,
    Actual,
    AddRoute,
    OpenFrontend,
    RemoveRoute,
    RouteView,
    ServerView,
    SetRoute,
    StartServer,
    StopServer,
    TakeOver,
    WriteTargets,
    plan,
)
from local.platform.reposync import RepoSync
from local.platform.supervisor import ServiceSupervisor, backoff
from local.platform.workdir import PlatformConfig, Workdir, load_config

log = logging.getLogger("mlops.sync")

#: A server that is not ready this long after start counts as crashed.
START_TIMEOUT = 300.0
#: Defaults for model servers: one math thread each (several versions share
#: the machine), quiet Paddle, unbuffered logs. The caller's environment wins.
SERVER_ENV = {"OMP_NUM_THREADS": "1", "GLOG_minloglevel": "2", "PYTHONUNBUFFERED": "1"}


@dataclasses.dataclass
class ServerProc:
    """One model-server process the sync owns (or adopted)."""

    model: str
    version: str
    model_dir: str
    port: int
    record: procs.ProcRecord | None
    popen: subprocess.Popen[bytes] | None = None
    phase: str = "starting"
    restarts: int = 0
    failures: int = 0
    retry_at: float = 0.0
    started: float = 0.0
    last_exit: str | None = None
    #: The Deployment's readiness probe and start budget, and where probing stands.
    probe: podspec.Probe = dataclasses.field(default_factory=podspec.Probe)
    start_timeout: float = START_TIMEOUT
    start_period: float = 1.0
    pod: str = ""
    next_probe: float = 0.0
    successes: int = 0
    misses: int = 0
    ready_since: float | None = None
    not_ready_reason: str | None = None
    """What the server's readiness probe said when it last refused (its warm-up failed)."""
    #: The pod's emptyDir stand-in (a successor beside it gets another one).
    scratch: str = ""
    #: Started beside the version's serving process, for a changed pod (`plan` rule 2b).
    successor: bool = False

    def alive(self) -> bool:
        if self.record is None:
            return False
        if self.popen is not None:
            return self.popen.poll() is None
        return procs.record_alive(self.record)

    def view(self) -> ServerView:
        return ServerView(port=self.port, phase=self.phase, model_dir=self.model_dir,  # type: ignore[arg-type]
                          retry_at=self.retry_at, pod=self.pod)


def probe_ready(port: int, timeout: float = 0.5, path: str = "/v2/health/ready") -> bool:
    """One HTTP probe as the kubelet makes it: success is a status from 200 to 399."""
    return probe_answer(port, timeout, path)[0]


def probe_answer(port: int, timeout: float = 0.5,
                 path: str = "/v2/health/ready") -> tuple[bool, str | None]:
    """`probe_ready`, and the server's own reason when it answers not ready (our
    server's `{"ready": false, "reason": ...}`: a version that cannot answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        if 200 <= answer.status < 400:
            return True, None
        try:
            reason = json.loads(answer.read(65536)).get("reason")
        except (ValueError, AttributeError):
            reason = None
        return False, reason if isinstance(reason, str) else None
    except (OSError, http.client.HTTPException):
        return False, None
    finally:
        conn.close()


class Sync:
    """State and executor of the sync loop (decisions live in :mod:`plan`)."""

    def __init__(self, workdir: Workdir, config: PlatformConfig) -> None:
        self.workdir = workdir
        self.config = config
        self.repo = RepoSync(workdir, config)
        self.services = ServiceSupervisor(workdir, config)
        self.api = RuntimeApi(workdir.admin_socket(), timeout=2.0)
        self.servers: dict[tuple[str, str], ServerProc] = {}
        #: New processes of versions whose pod changed, beside the serving one (rule 2b).
        self.successors: dict[tuple[str, str], ServerProc] = {}
        self.frontends: dict[str, int] = {
            str(k): int(v) for k, v in (read_json(workdir.frontends, {}) or {}).items()
        }
        self.targets: frozenset[tuple[str, str, int]] | None = None
        self.routes: dict[str, dict[str, RouteView]] | None = None
        self.haproxy_up: dict[tuple[str, str], bool] = {}
        self.stopping = False
        self.reload_grace_until = 0.0
        self._adopt()

    # -- start-up -------------------------------------------------------
    def _adopt(self) -> None:
        """Take over model servers a previous sync started and left running."""
        if not self.workdir.server_pids.is_dir():
            return
        for path in sorted(self.workdir.server_pids.glob("*.json")):
            record = procs.read_record(path)
            if record is None:
                path.unlink(missing_ok=True)
                continue
            extra = record.extra
            key = (str(extra.get("model")), str(extra.get("version")))
            server = ServerProc(
                model=key[0], version=key[1], model_dir=str(extra.get("model_dir")),
                port=int(extra.get("port", 0)), record=record,
                restarts=int(extra.get("restarts", 0)), started=time.monotonic(),
                pod=str(extra.get("pod", "")), scratch=str(extra.get("scratch", "")),
                successor=bool(extra.get("successor")),
            )
            probe = extra.get("probe")
            if isinstance(probe, dict):
                server.probe = podspec.Probe(**probe)
            if procs.record_alive(record):
                log.info(
                    "adopted model server %s-%s (pid %d, port %d)", *key, record.pid, server.port
                )
            else:
                server.phase = "exited"
                server.last_exit = "exited while the sync was not running"
            (self.successors if server.successor else self.servers)[key] = server

    # -- supervise Prometheus and HAProxy ----------------------------------
    def supervise_services(self, now: float) -> None:
        """Restart a dead Prometheus or HAProxy (:mod:`supervisor`)."""
        if "haproxy" in self.services.supervise(now):
            # a fresh HAProxy: re-observe, the plan re-adds every server
            self.routes = None
            self.frontends = {
                str(k): int(v) for k, v in (read_json(self.workdir.frontends, {}) or {}).items()
            }

    # -- observe ----------------------------------------------------------
    def refresh_processes(self, now: float) -> None:
        for server in [*self.servers.values(), *self.successors.values()]:
            if server.phase == "exited":
                continue
            if not server.alive():
                code = server.popen.returncode if server.popen is not None else None
                server.phase = "exited"
                server.failures += 1
                server.retry_at = now + backoff(server.failures)
                server.last_exit = f"exit code {code}" if code is not None else "process gone"
                log.error(
                    "model server %s-%s (pid %s) died: %s; restart in %.0f s",
                    server.model, server.version,
                    server.record.pid if server.record else "?", server.last_exit,
                    server.retry_at - now,
                )
                self._write_pidfile(server)
                continue
            self._probe(server, now)

    def _probe(self, server: ServerProc, now: float) -> None:
        """The Deployment's readiness probe, with its period and thresholds (kubelet rules).

        Nothing is probed before the start delay (cluster-latency mode: image
        pull and container start) plus ``initialDelaySeconds``; then every
        ``periodSeconds``. ``successThreshold`` passes in a row make a server
        ready; ``failureThreshold`` misses in a row make a ready one unready
        again (out of HAProxy, as a pod leaves the endpoints). A server never
        ready within the start budget counts as crashed.
        """
        probe = server.probe
        if now < server.started + self.config.start_delay + probe.initial_delay:
            return
        if now < server.next_probe:
            return
        server.next_probe = now + (probe.period if server.phase == "ready" else server.start_period)
        ok, server.not_ready_reason = probe_answer(server.port, timeout=probe.timeout,
                                                   path=probe.path)
        if ok:
            server.misses = 0
            server.successes += 1
            if server.phase == "starting" and server.successes >= probe.success_threshold:
                server.phase = "ready"
                server.failures = 0
                server.ready_since = time.time()
                log.info("model server %s-%s ready on port %d", server.model, server.version,
                         server.port)
            return
        server.successes = 0
        server.misses += 1
        if server.phase == "ready" and server.misses >= probe.failure_threshold:
            server.phase = "starting"
            server.ready_since = None
            log.error("model server %s-%s failed %d readiness probes; out of HAProxy until it "
                      "passes again", server.model, server.version, server.misses)
        elif server.phase == "starting" and (
                now - server.started > self.config.start_delay + server.start_timeout):
            log.error("model server %s-%s not ready after %.0f s; stopping it",
                      server.model, server.version, now - server.started)
            if server.record is not None:
                procs.stop(server.record, popen=server.popen, timeout=5)
            server.phase = "exited"
            server.failures += 1
            server.retry_at = now + backoff(server.failures)
            server.last_exit = "not ready in time"

    def observe_haproxy(self) -> None:
        try:
            backends = set(self.api.backends())
            states = self.api.servers_state()
        except (OSError, RuntimeApiError) as exc:
            if self.routes is not None:
                log.warning("haproxy runtime API unreachable: %s", exc)
            self.routes = None
            return
        routes: dict[str, dict[str, RouteView]] = {
            model: {} for model in self.frontends if model in backends
        }
        up: dict[tuple[str, str], bool] = {}
        for state in states:
            if state.backend in routes:
                routes[state.backend][state.name] = RouteView(
                    port=state.port, weight=state.weight, enabled=state.enabled
                )
                up[(state.backend, state.name)] = state.up and state.enabled
        self.routes = routes
        self.haproxy_up = up

    def actual(self, now: float) -> Actual:
        # A frontend counts once HAProxy really has its backend; a config
        # HAProxy never loaded (it was down when we wrote it) is re-rendered,
        # but not while a reload we just triggered is still settling.
        if self.routes is None or now < self.reload_grace_until:
            frontends = dict(self.frontends)
        else:
            frontends = {m: p for m, p in self.frontends.items() if m in self.routes}
        return Actual(
            servers={key: s.view() for key, s in self.servers.items()},
            frontends=frontends,
            routes=self.routes,
            targets=self.targets if self.targets is not None else frozenset({("", "", -1)}),
            successors={key: s.view() for key, s in self.successors.items()},
        )

    # -- execute ----------------------------------------------------------
    def execute(self, action: Action, now: float) -> None:
        try:
            if isinstance(action, OpenFrontend):
                self._open_frontend(action.model)
                self.reload_grace_until = now + 3.0
            elif isinstance(action, StartServer):
                self._start_server(action, now)
            elif isinstance(action, StopServer):
                self._stop_server(action.model, action.version, successor=action.successor)
            elif isinstance(action, TakeOver):
                self._take_over(action.model, action.version)
            elif isinstance(action, AddRoute):
                self.api.add_server(
                    action.model, action.version,
                    haproxy_cfg.server_line_args(action.port, action.weight),
                )
                log.info("haproxy: added %s/%s port %d weight %d",
                         action.model, action.version, action.port, action.weight)
            elif isinstance(action, SetRoute):
                if action.port is not None:
                    self.api.set_addr(action.model, action.version, action.port)
                self.api.set_weight(action.model, action.version, action.weight)
                if action.enable:
                    self.api.enable_server(action.model, action.version)
                log.info("haproxy: %s/%s weight %d%s", action.model, action.version, action.weight,
                         f" port {action.port}" if action.port else "")
            elif isinstance(action, RemoveRoute):
                try:
                    self.api.disable_server(action.model, action.version)
                except RuntimeApiError:
                    pass
                self.api.del_server(action.model, action.version)
                log.info("haproxy: removed %s/%s", action.model, action.version)
            elif isinstance(action, WriteTargets):
                prometheus.write_model_targets(self.workdir, action.targets)
                self.targets = action.targets
        except (OSError, RuntimeApiError, subprocess.SubprocessError) as exc:
            log.error("%s failed: %s (retrying next tick)", action, exc)

    def _open_frontend(self, model: str) -> None:
        port = self.frontends.get(model) or free_port()
        self.frontends[model] = port
        atomic_write_json(self.workdir.frontends, self.frontends)
        servers = {
            backend: {name: (r.port, r.weight) for name, r in routes.items()}
            for backend, routes in (self.routes or {}).items()
        }
        text = haproxy_cfg.render_config(
            self.workdir, stats_port=self.config.haproxy_stats_port,
            frontends=self.frontends, servers=servers,
        )
        atomic_write_text(self.workdir.haproxy_cfg, text)
        record = procs.read_record(self.workdir.pidfile("haproxy"))
        if record is not None and procs.record_alive(record):
            os.kill(record.pid, signal.SIGUSR2)  # master-worker reload
            log.info("haproxy: frontend for %s on port %d (reloaded)", model, port)
            self.routes = None  # re-observe after the reload
        else:
            log.warning("haproxy is not running; frontend for %s written to the config", model)

    def _start_server(self, action: StartServer, now: float) -> None:
        """Start the Deployment's container as a local process (``podspec``)."""
        key = (action.model, action.version)
        slots, beside = ((self.successors, self.servers) if action.successor
                         else (self.servers, self.successors))
        old = slots.get(key)
        spec = self.repo.desired[action.model].versions[action.version]
        port = old.port if (old is not None and old.port and port_free(old.port)) else free_port()
        # One emptyDir per pod: not the one the process beside it (rule 2b) uses.
        scratch = self.workdir.root / "scratch" / f"{action.model}-{action.version}"
        other = beside.get(key)
        if other is not None and other.scratch in ("", str(scratch)):
            scratch = scratch.with_name(scratch.name + "-next")
        try:
            pod = podspec.local_pod(spec.deployment, source=spec.source,
                                    model_dir=action.model_dir, port=port, scratch=str(scratch))
        except podspec.PodSpecError as exc:  # checked when read; a race with a new commit
            log.error("cannot start %s-%s: %s", action.model, action.version, exc)
            return
        for path in pod.scratch_dirs:
            pathlib.Path(path).mkdir(parents=True, exist_ok=True)
        env = procs.marked_env(str(self.workdir.root), {**SERVER_ENV, **os.environ, **pod.env})
        popen, record = procs.spawn(
            f"{action.model}-{action.version}", list(pod.argv),
            self.workdir.server_log(action.model, action.version), env=env,
        )
        server = ServerProc(
            model=action.model,
            version=action.version,
            model_dir=action.model_dir,
            port=port,
            record=record,
            popen=popen,
            started=now,
            restarts=(old.restarts + 1)
            if (old is not None and action.restart)
            else (old.restarts if old else 0),
            failures=old.failures if old is not None else 0,
            last_exit=old.last_exit if old is not None else None,
            probe=pod.readiness,
            start_timeout=pod.start_timeout,
            start_period=pod.start_period,
            pod=spec.pod,
            scratch=str(scratch),
            successor=action.successor,
        )
        slots[key] = server
        self._write_pidfile(server)
        log.info("%s model server %s-%s (pid %d, port %d)%s: %s",
                 "restarted" if action.restart else "started",
                 action.model, action.version, record.pid, port,
                 " beside the serving one, for its new pod" if action.successor else "",
                 " ".join(pod.argv))

    def _write_pidfile(self, server: ServerProc) -> None:
        if server.record is None:
            return
        record = dataclasses.replace(server.record, extra={
            "model": server.model, "version": server.version, "model_dir": server.model_dir,
            "port": server.port, "restarts": server.restarts, "pod": server.pod,
            "probe": dataclasses.asdict(server.probe), "scratch": server.scratch,
            "successor": server.successor,
        })
        procs.write_record(
            self.workdir.server_pidfile(server.model, server.version, server.successor), record)

    def _stop_server(self, model: str, version: str, successor: bool = False) -> None:
        server = (self.successors if successor else self.servers).pop((model, version), None)
        if server is not None and server.record is not None:
            procs.stop(server.record, popen=server.popen, timeout=10)
        self.workdir.server_pidfile(model, version, successor).unlink(missing_ok=True)
        log.info("stopped model server %s-%s%s", model, version,
                 " (its successor, started for an older commit)" if successor else "")

    def _take_over(self, model: str, version: str) -> None:
        """The successor becomes the version's server; the old process stops (plan rule
        2b: HAProxy sends the successor the traffic already, or the old one served none)."""
        key = (model, version)
        new = self.successors.pop(key, None)
        if new is None:
            return
        old = self.servers.pop(key, None)
        if old is not None and old.record is not None:
            procs.stop(old.record, popen=old.popen, timeout=10)
        new.successor = False
        self.servers[key] = new
        self._write_pidfile(new)
        self.workdir.server_pidfile(model, version, successor=True).unlink(missing_ok=True)
        log.info("model server %s-%s: the new pod (pid %s, port %d) took over%s", model, version,
                 new.record.pid if new.record else "?", new.port,
                 f" from pid {old.record.pid}" if old is not None and old.record else "")

    # -- record ----------------------------------------------------------
    def status(self) -> dict[str, Any]:
        models: dict[str, Any] = {}
        for model in sorted(set(self.repo.desired) | {m for m, _ in self.servers}):
            spec = self.repo.desired.get(model)
            versions: dict[str, Any] = {}
            names = set(spec.versions if spec else ()) | {v for m, v in self.servers if m == model}
            for version in sorted(names):
                server = self.servers.get((model, version))
                route = (self.routes or {}).get(model, {}).get(version)
                versions[version] = {
                    "desired_weight": spec.weights.get(version) if spec else None,
                    "haproxy_weight": route.weight if route else None,
                    "haproxy_up": self.haproxy_up.get((model, version)),
                    "phase": server.phase if server else "pending",
                    # Applied, passed its readiness probe, and routed by HAProxy: what a
                    # controller asks before it sends the version traffic. A version whose
                    # new pod still starts beside the old one is not (yet) what git says,
                    # as a Deployment mid-rollout is not ready in a cluster.
                    "ready": bool(spec and version in spec.versions and server
                                  and server.phase == "ready" and route is not None
                                  and route.enabled
                                  and (model, version) not in self.successors),
                    "ready_since": server.ready_since if server else None,
                    "not_ready_reason": server.not_ready_reason if server else None,
                    # The server's own verdict that it cannot answer (our server names a
                    # reason only once it gave up: a warm-up inference that failed, never
                    # retried; serving/dataplane.py): no wait makes it ready.
                    "cannot_serve": server.not_ready_reason
                    if server and server.phase != "ready" else None,
                    "pid": server.record.pid if server and server.record else None,
                    "port": server.port if server else None,
                    "restarts": server.restarts if server else 0,
                    "last_exit": server.last_exit if server else None,
                    "model_dir": (spec.versions[version].model_dir
                                  if spec and version in spec.versions
                                  else (server.model_dir if server else None)),
                    "weights_sha256": (spec.versions[version].weights_sha256
                                       if spec and version in spec.versions else None),
                    "log": str(self.workdir.server_log(model, version)),
                }
                successor = self.successors.get((model, version))
                if successor is not None:  # a new pod starting beside the serving one
                    versions[version]["successor"] = {
                        "phase": successor.phase, "port": successor.port,
                        "pid": successor.record.pid if successor.record else None,
                        "not_ready_reason": successor.not_ready_reason}
            port = self.frontends.get(model)
            models[model] = {
                "frontend_port": port,
                "url": f"http://127.0.0.1:{port}" if port else None,
                "versions": versions,
            }
        return {
            "sync_pid": os.getpid(),
            "updated_at": time.time(),
            **self.repo.status(),
            "haproxy_reachable": self.routes is not None,
            "service_restarts": dict(self.services.restarts),
            "models": models,
        }

    # -- loop ------------------------------------------------------------
    def tick(self) -> None:
        now = time.monotonic()
        self.supervise_services(now)
        self.repo.poll()
        self.refresh_processes(now)
        self.observe_haproxy()
        for action in plan(self.repo.desired, self.actual(now), now):
            self.execute(action, now)
        if any(s.phase == "starting" for s in [*self.servers.values(),
                                               *self.successors.values()]):
            self.refresh_processes(time.monotonic())
        atomic_write_json(self.workdir.status, self.status())

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        log.info("sync started: %s (%s), every %.2f s", self.config.gitops, self.config.branch,
                 self.config.poll_interval)
        while not self.stopping:
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop must survive one bad tick
                log.exception("sync tick failed")
            elapsed = time.monotonic() - started
            time.sleep(max(0.05, self.config.poll_interval - elapsed))
        log.info("sync stopping (model servers keep running until `mlops down`)")

    def _on_term(self, signum: int, frame: Any) -> None:
        self.stopping = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.platform.sync")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    workdir = Workdir(pathlib.Path(args.workdir).resolve())
    config = load_config(workdir)
    if config is None:
        log.error("%s has no platform config; start the platform with `mlops up`", workdir.config)
        return 2
    Sync(workdir, config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
