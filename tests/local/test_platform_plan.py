"""The sync's pure reconcile decision, over plain data (no process, socket or clock)."""

import pytest

from local.platform.desired import ModelSpec, VersionSpec
from local.platform.plan import (
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

M = "shapes"


def spec(weights, dirs=None):
    dirs = dirs or {}
    return ModelSpec(
        versions={v: VersionSpec(model_dir=dirs.get(v, f"/models/{v}")) for v in weights},
        weights=dict(weights),
    )


def server(port, phase="ready", model_dir=None, version="v1", retry_at=0.0):
    return ServerView(port=port, phase=phase, model_dir=model_dir or f"/models/{version}",
                      retry_at=retry_at)


def actual(servers=None, routes=None, frontends=None, targets=None):
    servers = servers or {}
    if targets is None:
        targets = frozenset((m, v, s.port) for (m, v), s in servers.items() if s.phase != "exited")
    return Actual(servers=servers, frontends=frontends if frontends is not None else {M: 9000},
                  routes=routes, targets=targets)


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def test_fresh_model_opens_frontend_and_starts_every_version():
    actions = plan({M: spec({"v1": 90, "v2": 10})}, actual(frontends={}, routes={}), now=0)
    assert actions[0] == OpenFrontend(M)
    assert of(actions, StartServer) == [StartServer(M, "v1", "/models/v1"),
                                        StartServer(M, "v2", "/models/v2")]
    assert not of(actions, AddRoute)


def test_starting_server_gets_no_route_ready_server_gets_its_weight():
    servers = {(M, "v1"): server(8001), (M, "v2"): server(8002, phase="starting", version="v2")}
    actions = plan({M: spec({"v1": 90, "v2": 10})}, actual(servers, routes={M: {}}), now=0)
    assert of(actions, AddRoute) == [AddRoute(M, "v1", 8001, 90)]
    assert not of(actions, StartServer)


def test_weight_change_is_a_set_route_without_restart():
    servers = {(M, "v1"): server(8001), (M, "v2"): server(8002, version="v2")}
    routes = {M: {"v1": RouteView(8001, 90, True), "v2": RouteView(8002, 10, True)}}
    actions = plan({M: spec({"v1": 50, "v2": 50})}, actual(servers, routes), now=0)
    assert actions == [SetRoute(M, "v2", 50), SetRoute(M, "v1", 50)]


def test_raised_weights_are_set_before_lowered_ones():
    """HAProxy takes one `set weight` at a time: the canary's raise goes first so the
    backend's total never dips in between (on real HAProxy: test_platform_haproxy.py,
    test_a_canary_step_applied_by_the_sync_keeps_the_split_from_the_first_request)."""
    servers = {(M, "a"): server(8001, version="a"), (M, "b"): server(8002, version="b"),
               (M, "c"): server(8003, version="c")}
    routes = {M: {"a": RouteView(8001, 50, True), "b": RouteView(8002, 50, True)}}
    actions = plan({M: spec({"a": 0, "b": 40, "c": 60})}, actual(servers, routes), now=0)
    assert actions == [AddRoute(M, "c", 8003, 60), SetRoute(M, "a", 0), SetRoute(M, "b", 40)]


def test_converged_state_plans_nothing():
    servers = {(M, "v1"): server(8001), (M, "v2"): server(8002, version="v2")}
    routes = {M: {"v1": RouteView(8001, 90, True), "v2": RouteView(8002, 10, True)}}
    assert plan({M: spec({"v1": 90, "v2": 10})}, actual(servers, routes), now=0) == []


@pytest.mark.parametrize("now, restarted", [(4.9, False), (5.0, True)])
def test_crashed_server_takes_no_traffic_and_restarts_after_backoff(now, restarted):
    servers = {(M, "v1"): server(8001),
               (M, "v2"): server(8002, phase="exited", version="v2", retry_at=5.0)}
    routes = {M: {"v1": RouteView(8001, 90, True), "v2": RouteView(8002, 10, True)}}
    before = frozenset({(M, "v1", 8001), (M, "v2", 8002)})
    actions = plan(
        {M: spec({"v1": 90, "v2": 10})}, actual(servers, routes, targets=before), now=now
    )
    assert SetRoute(M, "v2", 0) in actions
    assert (StartServer(M, "v2", "/models/v2", restart=True) in actions) is restarted
    # The exited server leaves Prometheus' targets.
    assert WriteTargets(frozenset({(M, "v1", 8001)})) in actions


def test_restart_on_another_port_moves_the_route():
    servers = {(M, "v1"): server(8011)}
    routes = {M: {"v1": RouteView(8001, 0, True)}}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes), now=0)
    assert actions == [SetRoute(M, "v1", 100, port=8011)]


def test_removed_version_leaves_haproxy_before_its_process_stops():
    servers = {(M, "v1"): server(8001), (M, "v2"): server(8002, version="v2")}
    routes = {M: {"v1": RouteView(8001, 90, True), "v2": RouteView(8002, 10, True)}}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes), now=0)
    assert RemoveRoute(M, "v2") in actions and SetRoute(M, "v1", 100) in actions
    assert StopServer(M, "v2") not in actions  # still routed: drain first
    # Next tick: deleted (or at least disabled) in HAProxy -> the process stops.
    for left in ({"v1": RouteView(8001, 100, True)},
                 {"v1": RouteView(8001, 100, True), "v2": RouteView(8002, 10, False)}):
        actions = plan({M: spec({"v1": 100})}, actual(servers, {M: left}), now=1)
        assert StopServer(M, "v2") in actions


def test_removed_model_is_torn_down():
    servers = {(M, "v1"): server(8001)}
    routes = {M: {"v1": RouteView(8001, 100, True)}}
    assert plan({}, actual(servers, routes), now=0)[0] == RemoveRoute(M, "v1")
    assert StopServer(M, "v1") in plan({}, actual(servers, {M: {}}), now=1)


@pytest.mark.parametrize("phase", ["starting", "exited"])
def test_changed_model_dir_of_a_server_that_serves_nothing_restarts_it(phase):
    servers = {(M, "v1"): server(8001, phase=phase, model_dir="/old")}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes=None), now=0)
    assert actions[0] == StopServer(M, "v1")


def test_a_changed_pod_starts_beside_the_serving_one_which_stops_only_after_the_switch():
    """Rule 2b, the rendered Deployment's `maxUnavailable: 0, maxSurge: 1`: the old
    process serves until the new one is ready and HAProxy sends it the traffic."""
    desired = {M: spec({"v1": 100})}
    old = server(8001, model_dir="/old")
    routes = {M: {"v1": RouteView(8001, 100, True)}}
    assert plan(desired, actual({(M, "v1"): old}, routes), now=0) == [
        StartServer(M, "v1", "/models/v1", successor=True)]

    def with_successor(phase, route_port=8001):
        return Actual(servers={(M, "v1"): old}, frontends={M: 9000},
                      routes={M: {"v1": RouteView(route_port, 100, True)}},
                      targets=frozenset({(M, "v1", 8001), (M, "v1", 8002)}),
                      successors={(M, "v1"): server(8002, phase=phase)})

    assert plan(desired, with_successor("starting"), now=1) == []  # the old one serves on
    assert plan(desired, with_successor("ready"), now=2) == [SetRoute(M, "v1", 100, port=8002)]
    assert plan(desired, with_successor("ready", route_port=8002), now=3) == [TakeOver(M, "v1")]


def test_a_crashed_successor_is_restarted_after_its_backoff_while_the_old_one_serves():
    old = server(8001, model_dir="/old")
    crashed = server(8002, phase="exited", retry_at=5.0)
    state = Actual(servers={(M, "v1"): old}, frontends={M: 9000},
                   routes={M: {"v1": RouteView(8001, 100, True)}},
                   targets=frozenset({(M, "v1", 8001)}), successors={(M, "v1"): crashed})
    assert plan({M: spec({"v1": 100})}, state, now=4) == []
    assert plan({M: spec({"v1": 100})}, state, now=5) == [
        StartServer(M, "v1", "/models/v1", restart=True, successor=True)]


def test_a_successor_of_an_older_commit_is_stopped_and_the_old_server_kept():
    old = server(8001, model_dir="/old")
    older = server(8002, model_dir="/older")
    state = Actual(servers={(M, "v1"): old}, frontends={M: 9000},
                   routes={M: {"v1": RouteView(8001, 100, True)}},
                   targets=frozenset({(M, "v1", 8001), (M, "v1", 8002)}),
                   successors={(M, "v1"): older})
    actions = plan({M: spec({"v1": 100})}, state, now=0)
    assert actions[0] == StopServer(M, "v1", successor=True)  # a new one comes next tick
    assert not of(actions, (SetRoute, RemoveRoute, StartServer, TakeOver))
    assert StopServer(M, "v1") not in actions


def test_a_rollback_to_a_starting_version_keeps_the_serving_one_until_it_takes_over():
    """Rule 3c (issue 43): the commit removes v2 and sends 100 % to v1, which starts."""
    desired = {M: spec({"v1": 100})}
    v2 = server(8002, version="v2")
    routes = {M: {"v2": RouteView(8002, 100, True)}}
    starting = plan(desired, actual({(M, "v2"): v2}, routes), now=0)
    assert StartServer(M, "v1", "/models/v1") in starting
    assert not of(starting, (RemoveRoute, StopServer, SetRoute))
    servers = {(M, "v1"): server(8001, phase="starting"), (M, "v2"): v2}
    assert not of(plan(desired, actual(servers, routes), now=1), (RemoveRoute, StopServer,
                                                                   SetRoute, AddRoute))
    servers[(M, "v1")] = server(8001)  # ready: routed, v2 still in
    ready = plan(desired, actual(servers, routes), now=2)
    assert of(ready, AddRoute) == [AddRoute(M, "v1", 8001, 100)]
    assert not of(ready, (RemoveRoute, StopServer))
    routes = {M: {"v1": RouteView(8001, 100, True), "v2": RouteView(8002, 100, True)}}
    assert of(plan(desired, actual(servers, routes), now=3), RemoveRoute) == [RemoveRoute(M, "v2")]
    routes = {M: {"v1": RouteView(8001, 100, True)}}
    assert StopServer(M, "v2") in plan(desired, actual(servers, routes), now=4)


def test_a_split_moved_to_a_starting_version_does_not_lower_the_serving_one():
    """The old version still has its Deployment, at 0 % in the new split."""
    desired = {M: spec({"v1": 0, "v2": 100})}
    servers = {(M, "v1"): server(8001), (M, "v2"): server(8002, phase="starting", version="v2")}
    routes = {M: {"v1": RouteView(8001, 100, True)}}
    assert plan(desired, actual(servers, routes), now=0) == []
    servers[(M, "v2")] = server(8002, version="v2")
    assert plan(desired, actual(servers, routes), now=1) == [AddRoute(M, "v2", 8002, 100)]
    routes = {M: {"v1": RouteView(8001, 100, True), "v2": RouteView(8002, 100, True)}}
    assert plan(desired, actual(servers, routes), now=2) == [SetRoute(M, "v1", 0)]


def test_a_crashed_version_is_not_kept_for_a_starting_one():
    desired = {M: spec({"v1": 100})}
    servers = {(M, "v1"): server(8001, phase="starting"),
               (M, "v2"): server(8002, phase="exited", version="v2")}
    routes = {M: {"v2": RouteView(8002, 100, True)}}
    assert RemoveRoute(M, "v2") in plan(desired, actual(servers, routes), now=0)


class Platform:
    """HAProxy and the processes as plain data, changed one action at a time as the sync
    applies them; a started server is ready `start_ticks` ticks later."""

    def __init__(self, servers, routes, start_ticks=3):
        self.servers = dict(servers)
        self.successors = {}
        self.routes = {M: dict(routes)}
        self.age = {}
        self.start_ticks = start_ticks
        self.ports = iter(range(8100, 8200))

    def actual(self):
        return Actual(servers=dict(self.servers), frontends={M: 9000},
                      routes={m: dict(r) for m, r in self.routes.items()},
                      targets=frozenset(), successors=dict(self.successors))

    def tick(self):
        for slots in (self.servers, self.successors):
            for key, view in list(slots.items()):
                self.age[view.port] = self.age.get(view.port, 0) + 1
                if view.phase == "starting" and self.age[view.port] >= self.start_ticks:
                    slots[key] = ServerView(view.port, "ready", view.model_dir, pod=view.pod)

    def apply(self, action, desired):
        backend = self.routes[M]
        if isinstance(action, StartServer):
            slots = self.successors if action.successor else self.servers
            vspec = desired[M].versions[action.version]
            slots[(M, action.version)] = ServerView(next(self.ports), "starting",
                                                    vspec.model_dir, pod=vspec.pod)
        elif isinstance(action, StopServer):
            (self.successors if action.successor else self.servers).pop((M, action.version))
        elif isinstance(action, TakeOver):
            self.servers[(M, action.version)] = self.successors.pop((M, action.version))
        elif isinstance(action, AddRoute):
            backend[action.version] = RouteView(action.port, action.weight, True)
        elif isinstance(action, SetRoute):
            route = backend[action.version]
            backend[action.version] = RouteView(action.port or route.port, action.weight, True)
        elif isinstance(action, RemoveRoute):
            backend.pop(action.version)

    def serves(self):
        """Some route with weight sends requests to a ready process on its port."""
        ready = {v.port for v in [*self.servers.values(), *self.successors.values()]
                 if v.phase == "ready"}
        return any(r.enabled and r.weight > 0 and r.port in ready
                   for r in self.routes[M].values())


@pytest.mark.parametrize("case", ["rollback to a stopped version", "pod template changed",
                                  "promotion of a starting candidate"])
def test_no_action_leaves_the_backend_without_a_serving_route(case):
    """Make-before-break, applied action by action as the sync does (HAProxy takes one
    command at a time) until the platform converges: at no point does a request find
    no ready server. The plan before issue 43 broke the first two (the only serving
    route removed, the only process stopped, while the new one started)."""
    if case == "rollback to a stopped version":
        platform = Platform({(M, "v2"): server(8002, version="v2")},
                            {"v2": RouteView(8002, 100, True)})
        desired = {M: spec({"v1": 100})}
    elif case == "pod template changed":
        platform = Platform({(M, "v1"): server(8001, model_dir="/old")},
                            {"v1": RouteView(8001, 100, True)})
        desired = {M: spec({"v1": 100})}
    else:
        platform = Platform({(M, "v1"): server(8001)}, {"v1": RouteView(8001, 100, True)})
        desired = {M: spec({"v2": 100})}
    for _ in range(20):
        actions = [a for a in plan(desired, platform.actual(), now=0)
                   if not isinstance(a, WriteTargets)]
        for action in actions:
            platform.apply(action, desired)
            assert platform.serves(), (case, action, platform.routes, platform.servers)
        platform.tick()
    assert list(platform.routes[M]) == list(desired[M].weights)
    assert set(platform.servers) == {(M, v) for v in desired[M].weights}
    assert not platform.successors


def test_unreachable_haproxy_means_no_route_actions():
    servers = {(M, "v1"): server(8001)}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes=None), now=0)
    assert not [a for a in actions if isinstance(a, (AddRoute, SetRoute, RemoveRoute))]


def test_disabled_route_is_enabled():
    servers = {(M, "v1"): server(8001)}
    routes = {M: {"v1": RouteView(8001, 100, False)}}
    assert plan({M: spec({"v1": 100})}, actual(servers, routes), now=0) == [
        SetRoute(M, "v1", 100, enable=True)]
