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


def test_changed_model_dir_restarts_the_version():
    servers = {(M, "v1"): server(8001, model_dir="/old")}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes=None), now=0)
    assert actions[0] == StopServer(M, "v1")


def test_unreachable_haproxy_means_no_route_actions():
    servers = {(M, "v1"): server(8001)}
    actions = plan({M: spec({"v1": 100})}, actual(servers, routes=None), now=0)
    assert not [a for a in actions if isinstance(a, (AddRoute, SetRoute, RemoveRoute))]


def test_disabled_route_is_enabled():
    servers = {(M, "v1"): server(8001)}
    routes = {M: {"v1": RouteView(8001, 100, False)}}
    assert plan({M: spec({"v1": 100})}, actual(servers, routes), now=0) == [
        SetRoute(M, "v1", 100, enable=True)]
