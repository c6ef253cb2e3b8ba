"""The sync's decision, pure: ``plan(desired, actual, now) -> [actions]``.

The sync loop observes (git, its processes, HAProxy's runtime state), calls
this function, and executes what it returns; nothing here touches a socket,
a process or a clock (``now`` is an input), so every reconcile rule is a
unit test over plain data.

Rules, in the order the actions come out:

1. A model without a HAProxy frontend gets one (``OpenFrontend``; a reload).
2. A desired version without a process is started; a crashed one is
   restarted once its back-off has passed (``StartServer(restart=True)``);
   one whose model directory or pod template changed is stopped (and
   started next tick from the new Deployment, as a rollout replaces a pod).
3. HAProxy, per model: a *ready* server is added with its weight; an added
   server gets its weight (the desired percent if ready, else 0 -- a
   starting or crashed version takes no traffic), its port (after a restart
   on another port) and is enabled; servers of versions that are no longer
   desired are removed.
3b. Within a backend, weights that go up are set before weights that go
   down, so the backend's total never dips below both the old and the new
   total while the sync applies a split one server at a time. HAProxy 2.6's
   roundrobin (src/lb_fwrr.c) re-places a server whose weight changed in
   the *next* round when its position is past ``current round's weight +
   the new total``: lowering the stable first (90 -> 50 while the canary is
   still 10, a total of 60) sent it out of the round, and the canary took
   every request until the round ended -- 100 % instead of 50 % for ~300
   requests (20 s of a canary step here).
4. Processes of versions that are no longer desired are stopped once HAProxy
   no longer routes to them (server deleted or disabled, i.e. on the tick
   after ``RemoveRoute``), so in-flight requests finish first.
5. Prometheus targets are rewritten when the set of servers changed.

HAProxy observed as ``None`` (socket unreachable, e.g. mid-reload) means no
HAProxy actions this tick; the next tick sees the real state and catches up.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Mapping, Union

from local.platform.desired import ModelSpec

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


@dataclasses.dataclass(frozen=True)
class OpenFrontend:
    model: str


@dataclasses.dataclass(frozen=True)
class StartServer:
    model: str
    version: str
    model_dir: str
    restart: bool = False


@dataclasses.dataclass(frozen=True)
class StopServer:
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


Action = Union[OpenFrontend, StartServer, StopServer, AddRoute, SetRoute, RemoveRoute, WriteTargets]


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
        model, version = key
        vspec = wanted[key]
        server = actual.servers.get(key)
        if server is None:
            actions.append(StartServer(model, version, vspec.model_dir))
        elif server.model_dir != vspec.model_dir or (vspec.pod and server.pod != vspec.pod):
            actions.append(StopServer(model, version))  # a new pod: started again next tick
        elif server.phase == "exited" and now >= server.retry_at:
            actions.append(StartServer(model, version, vspec.model_dir, restart=True))

    if actual.routes is not None:
        for model in sorted(set(desired) | set(actual.routes)):
            backend = actual.routes.get(model)
            if backend is None:
                continue  # no frontend/backend yet (OpenFrontend above)
            spec = desired.get(model)
            versions = spec.versions if spec else {}
            raising: list[Action] = []
            others: list[Action] = []
            for version in sorted(versions):
                server = actual.servers.get((model, version))
                ready = server is not None and server.phase == "ready"
                weight = spec.weights.get(version, 0) if (spec and ready) else 0
                route = backend.get(version)
                if route is None:
                    if ready and server is not None:
                        raising.append(AddRoute(model, version, server.port, weight))
                    continue
                new_port = server.port if (ready and server and server.port != route.port) else None
                if route.weight != weight or new_port is not None or not route.enabled:
                    (raising if weight > route.weight else others).append(
                        SetRoute(model, version, weight, port=new_port, enable=not route.enabled)
                    )
            # Raised weights first, lowered ones after (rule 3b): HAProxy applies
            # one `set weight` at a time, and a total that dips in between can
            # starve a server for hundreds of requests.
            actions += raising + others
            for version in sorted(backend):
                if version not in versions:
                    actions.append(RemoveRoute(model, version))

    for key in sorted(actual.servers):
        if key not in wanted:
            route = (actual.routes or {}).get(key[0], {}).get(key[1])
            if route is not None and route.enabled:
                continue  # drain first: stopped next tick, once HAProxy sends it nothing
            actions.append(StopServer(*key))

    targets = frozenset(
        (model, version, server.port)
        for (model, version), server in actual.servers.items()
        if (model, version) in wanted and server.phase != "exited"
    )
    if targets != actual.targets:
        actions.append(WriteTargets(targets))
    return actions
