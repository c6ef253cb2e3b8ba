"""The sync's decision, pure: ``plan(desired, actual, now) -> [actions]``.

The sync loop observes (git, its processes, HAProxy's runtime state), calls this
function and executes what it returns; nothing here touches a socket, a process or a
clock. Its rules, numbered as the comments cite them (1 frontends, 2 and 2b servers and
their surge successors, 3 routes, 3b weights raised before lowered, 3c a split kept
until its versions serve, 4 processes stopped after their routes, 5 Prometheus
targets), and why: docs/inside-local.md.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Mapping, Union

from local.platform.desired import ModelSpec, VersionSpec

Phase = Literal["starting", "ready", "exited"]


@dataclasses.dataclass(frozen=True)
class ServerView:
    """What the sync knows about one model-server process."""

    port: int
    phase: Phase
    model_dir: str
    #: Earliest time a crashed server may be started again (back-off).
    retry_at: float = 0.0
    #: Digest of the pod template it was started from (``VersionSpec.pod``).
    pod: str = ""


@dataclasses.dataclass(frozen=True)
class RouteView:
    """One HAProxy server as the runtime API reports it."""

    port: int
    weight: int
    enabled: bool


@dataclasses.dataclass(frozen=True)
class Actual:
    servers: Mapping[tuple[str, str], ServerView]
    frontends: Mapping[str, int]
    #: backend -> server -> state; None when HAProxy could not be asked.
    routes: Mapping[str, Mapping[str, RouteView]] | None
    #: (model, version, port) triples Prometheus currently scrapes.
    targets: frozenset[tuple[str, str, int]]
    #: The new process of a version whose pod changed, started beside the one that
    #: serves (rule 2b); it takes over once HAProxy sends it the version's traffic.
    successors: Mapping[tuple[str, str], ServerView] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OpenFrontend:
    model: str


@dataclasses.dataclass(frozen=True)
class StartServer:
    model: str
    version: str
    model_dir: str
    restart: bool = False
    #: Beside the process that serves the version (a surge pod), not in its place.
    successor: bool = False


@dataclasses.dataclass(frozen=True)
class StopServer:
    model: str
    version: str
    #: Stop the version's successor (made stale by a newer commit), not its server.
    successor: bool = False


@dataclasses.dataclass(frozen=True)
class TakeOver:
    """The successor becomes the version's server; the old process (if any) is stopped."""

    model: str
    version: str


@dataclasses.dataclass(frozen=True)
class AddRoute:
    model: str
    version: str
    port: int
    weight: int


@dataclasses.dataclass(frozen=True)
class SetRoute:
    model: str
    version: str
    weight: int
    port: int | None = None  # new address, only when it changed
    enable: bool = False


@dataclasses.dataclass(frozen=True)
class RemoveRoute:
    model: str
    version: str


@dataclasses.dataclass(frozen=True)
class WriteTargets:
    targets: frozenset[tuple[str, str, int]]


Action = Union[OpenFrontend, StartServer, StopServer, TakeOver, AddRoute, SetRoute, RemoveRoute,
               WriteTargets]


def _stale(server: ServerView, vspec: VersionSpec) -> bool:
    """Was the process started from another model directory or pod template?"""
    return server.model_dir != vspec.model_dir or bool(vspec.pod and server.pod != vspec.pod)


def _fresh_successor(actual: Actual, key: tuple[str, str],
                     vspec: VersionSpec) -> ServerView | None:
    successor = actual.successors.get(key)
    return successor if successor is not None and not _stale(successor, vspec) else None


def _processes(key: tuple[str, str], vspec: VersionSpec, actual: Actual,
               route: RouteView | None, now: float) -> list[Action]:
    """Rules 2 and 2b for one desired version."""
    model, version = key
    server = actual.servers.get(key)
    successor = actual.successors.get(key)
    fresh = _fresh_successor(actual, key, vspec)
    out: list[Action] = []
    if successor is not None and fresh is None:
        out.append(StopServer(model, version, successor=True))  # a newer commit came
    if server is None:
        out.append(TakeOver(model, version) if fresh is not None
                   else StartServer(model, version, vspec.model_dir))
    elif _stale(server, vspec):
        if server.phase != "ready":
            # It serves nothing: replaced at once (by the successor if one is on its way).
            out.append(TakeOver(model, version) if fresh is not None
                       else StopServer(model, version))
        elif fresh is None:
            if successor is None:
                out.append(StartServer(model, version, vspec.model_dir, successor=True))
        elif fresh.phase == "exited":
            if now >= fresh.retry_at:
                out.append(StartServer(model, version, vspec.model_dir, restart=True,
                                       successor=True))
        elif fresh.phase == "ready" and route is not None and route.port == fresh.port:
            out.append(TakeOver(model, version))  # HAProxy sends it the traffic now
    elif server.phase == "exited" and now >= server.retry_at:
        out.append(StartServer(model, version, vspec.model_dir, restart=True))
    return out


def _serving(actual: Actual, key: tuple[str, str], spec: ModelSpec | None,
             route: RouteView | None) -> ServerView | None:
    """The process HAProxy should send the version's traffic to: a ready successor of a
    changed pod (rule 2b), else the version's server."""
    server = actual.servers.get(key)
    vspec = spec.versions.get(key[1]) if spec else None
    if vspec is not None:
        fresh = _fresh_successor(actual, key, vspec)
        if fresh is not None and fresh.phase == "ready" and (server is None
                                                             or _stale(server, vspec)):
            return fresh
    return server


def _serves(server: ServerView | None, route: RouteView | None) -> bool:
    """Does HAProxy send this route traffic, to a process that answers?"""
    return (server is not None and server.phase == "ready" and route is not None
            and route.enabled and route.weight > 0 and route.port == server.port)


def _routes(model: str, spec: ModelSpec | None, backend: Mapping[str, RouteView],
            actual: Actual) -> list[Action]:
    """Rules 3, 3b and 3c for one model's backend."""
    versions = spec.versions if spec else {}
    weights = spec.weights if spec else {}
    serving = {version: _serving(actual, (model, version), spec, backend.get(version))
               for version in set(versions) | set(backend)}
    # Rule 3c: while no version of the new split serves, what serves now stays as it is.
    coming = [v for v in versions if weights.get(v, 0) > 0]
    if coming and not any(_serves(serving[v], backend.get(v)) for v in coming):
        kept = {v for v, route in backend.items() if _serves(serving[v], route)}
    else:
        kept = set()
    raising: list[Action] = []
    others: list[Action] = []
    for version in sorted(versions):
        server = serving[version]
        ready = server is not None and server.phase == "ready"
        weight = weights.get(version, 0) if ready else 0
        route = backend.get(version)
        if route is None:
            if ready and server is not None:
                raising.append(AddRoute(model, version, server.port, weight))
            continue
        if version in kept and weight < route.weight:
            continue  # keeps serving until the new split can (rule 3c)
        new_port = server.port if (ready and server and server.port != route.port) else None
        if route.weight != weight or new_port is not None or not route.enabled:
            (raising if weight > route.weight else others).append(
                SetRoute(model, version, weight, port=new_port, enable=not route.enabled)
            )
    # Raised weights first, lowered ones after (rule 3b): HAProxy applies
    # one `set weight` at a time, and a total that dips in between can
    # starve a server for hundreds of requests.
    out = raising + others
    for version in sorted(backend):
        if version not in versions and version not in kept:
            out.append(RemoveRoute(model, version))
    return out


def plan(desired: Mapping[str, ModelSpec], actual: Actual, now: float) -> list[Action]:
    """Actions that move ``actual`` towards ``desired`` (see module docstring)."""
    actions: list[Action] = []
    wanted = {
        (model, version): vspec
        for model, spec in desired.items()
        for version, vspec in spec.versions.items()
    }

    for model in sorted(desired):
        if model not in actual.frontends:
            actions.append(OpenFrontend(model))

    for key in sorted(wanted):
        route = (actual.routes or {}).get(key[0], {}).get(key[1])
        actions += _processes(key, wanted[key], actual, route, now)

    if actual.routes is not None:
        for model in sorted(set(desired) | set(actual.routes)):
            backend = actual.routes.get(model)
            if backend is None:
                continue  # no frontend/backend yet (OpenFrontend above)
            actions += _routes(model, desired.get(model), backend, actual)

    for key in sorted(actual.servers):
        if key not in wanted:
            route = (actual.routes or {}).get(key[0], {}).get(key[1])
            if route is not None and route.enabled:
                continue  # drain first: stopped next tick, once HAProxy sends it nothing
            actions.append(StopServer(*key))
    for key in sorted(actual.successors):
        if key not in wanted:
            actions.append(StopServer(*key, successor=True))  # never routed: nothing to drain

    targets = frozenset(
        (model, version, server.port)
        for processes in (actual.servers, actual.successors)
        for (model, version), server in processes.items()
        if (model, version) in wanted and server.phase != "exited"
    )
    if targets != actual.targets:
        actions.append(WriteTargets(targets))
    return actions
