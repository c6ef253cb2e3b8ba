"""Requests pinned to a subset by `x-mlops-subset` (`contracts.traffic.SUBSET_HEADER`): the
VirtualService's routes for the canary's paired answers probe, and the prober's headers.

Istio evaluates `spec.http` in order, first match wins, so the weighted route
`spec.http[0]` (the one every reader in contracts/traffic.py indexes) carries
`match: [{withoutHeaders: {x-mlops-subset: {}}}]` and the pinned routes follow it.
Upstream behaviour relied on:
- Istio pilot/pkg/networking/core/route/route.go (`TranslateRouteMatch`,
  `translateHeaderMatch`, `canBeConvertedToPresentMatch`): a `withoutHeaders` entry
  whose StringMatch is empty becomes an Envoy `present_match` with `invert_match`;
- Envoy source/common/http/header_utility.cc (`matchHeaders`): an absent header with
  an inverted `present_match` matches, so http[0] takes every request without it;
- /work/shared/schemas/istio-virtualservice.schema.json (Istio's CRD schema): `headers`
  and `withoutHeaders` are maps of StringMatch (`exact`, `prefix`, `regex`, or empty).
The prober is checked against a real loopback HTTP server that records what it got.
"""

import http.server
import json
import threading

import pytest

from contracts.traffic import (
    SUBSET_HEADER,
    UNPINNED,
    VERSION_HEADER,
    read_routes,
    set_subsets,
    set_weights,
    weights_by_version,
)
from promotion.cluster.deploy import MESH_LABEL, controller_manifests
from promotion.metrics.probe import HttpProbe
from serving import manifests
from tests.manifest_validation import validate_manifest


def _pinned(vs):
    """{subset pinned: destination subset} of the routes after http[0]."""
    out = {}
    for route in vs["spec"]["http"][1:]:
        (match,) = route["match"]
        pinned = match["headers"][SUBSET_HEADER]["exact"]
        (entry,) = route["route"]
        assert "weight" not in entry  # one destination: it takes all pinned requests
        out[pinned] = entry["destination"]["subset"]
    return out


def test_rendered_virtual_service_pins_each_subset_after_the_weighted_route():
    dr = manifests.destination_rule("shapes", "v1", "v2")
    vs = manifests.virtual_service("shapes", 90, 10)
    validate_manifest(vs)  # Istio's VirtualService schema accepts the header matches
    assert vs["spec"]["http"][0]["match"] == [{"withoutHeaders": {SUBSET_HEADER: {}}}]
    assert _pinned(vs) == {"stable": "stable", "canary": "canary"}
    assert weights_by_version(dr, vs) == {"v1": 90, "v2": 10}  # readers of http[0] unchanged
    assert [r.weight for r in read_routes(dr, vs)] == [90, 10]
    alone = manifests.virtual_service("shapes", 100, 0, canary=False)
    validate_manifest(alone)
    assert _pinned(alone) == {"stable": "stable"}


def test_edits_keep_a_pinned_route_per_live_subset():
    """The controller's edits: a canary started gets its pinned route, a canary promoted or
    rolled back loses it (a route to a subset the DestinationRule no longer names would
    be refused by the linter and answer 503 in the mesh)."""
    stable_only = manifests.virtual_service("shapes", 100, 0, canary=False)
    started = set_weights(stable_only, 10, with_canary=True)
    assert _pinned(started) == {"stable": "stable", "canary": "canary"}
    assert started["spec"]["http"][2]["route"][0]["destination"] == \
        started["spec"]["http"][0]["route"][1]["destination"]
    stepped = set_weights(started, 50, with_canary=True)
    assert stepped["spec"]["http"][1:] == started["spec"]["http"][1:]  # no duplicates
    done = set_weights(stepped, 0, with_canary=False)
    assert _pinned(done) == {"stable": "stable"}
    assert weights_by_version(set_subsets(manifests.destination_rule("shapes", "v2", None),
                                          "v2", None), done) == {"v2": 100}
    validate_manifest(done)


def test_a_virtual_service_written_without_pinning_is_left_so():
    vs = {"spec": {"http": [{"route": [{"destination": {"subset": "stable"}, "weight": 100}]},
                            {"name": "human", "route": [{"destination": {"subset": "x"}}]}]}}
    edited = set_weights(vs, 10, with_canary=True)
    assert "match" not in edited["spec"]["http"][0]
    assert edited["spec"]["http"][1:] == vs["spec"]["http"][1:]
    assert UNPINNED != edited["spec"]["http"][0].get("match")


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def _answer(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        self.seen.append((self.path, self.headers.get(VERSION_HEADER),
                          self.headers.get(SUBSET_HEADER)))
        self._answer({"images": [{"name": "a.png", "data": "aW1n"}]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["content-length"]))
        self.seen.append((self.path, self.headers.get(VERSION_HEADER),
                          self.headers.get(SUBSET_HEADER)))
        self._answer({"outputs": [{"name": "bbox", "data": [0, 0.9, 1, 1, 5, 5]},
                                  {"name": "bbox_num", "data": [1]},
                                  {"name": "labels", "data": ["circle"]}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_prober_pins_each_request_by_version_and_by_subset(recorder):
    """HAProxy routes by `x-mlops-version`, the VirtualService by `x-mlops-subset`: every
    request of a probe carries both, for the version it asks."""
    stable, canary = HttpProbe(lambda model: recorder).answers("shapes", "v1", "v2")
    assert stable[0][0].label == canary[0][0].label == "circle"
    root = "/v2/models/shapes/versions"
    assert _Recorder.seen == [(f"{root}/v1/probe", "v1", "stable"),
                              (f"{root}/v1/infer", "v1", "stable"),
                              (f"{root}/v2/infer", "v2", "canary")]


def test_the_controllers_pod_is_in_the_mesh():
    """Only a sidecar applies the VirtualService's header routes, so the controller's pod
    asks for one: Istio's pod label `sidecar.istio.io/inject: "true"` injects it whatever
    the namespace's label (istio.io, "Installing the Sidecar", controlling the injection
    policy); the selector stays as it was, so an upgrade does not orphan the old pod."""

    docs = controller_manifests(gitops_url="https://git.example.com/gitops.git",
                                prometheus_url="http://prometheus.monitoring:9090")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    validate_manifest(deployment)
    assert deployment["spec"]["template"]["metadata"]["labels"][MESH_LABEL] == "true"
    assert MESH_LABEL not in deployment["spec"]["selector"]["matchLabels"]


def test_a_gateway_keeps_the_mesh_and_only_the_mesh_may_pin():
    """Issue 42, B3: a VirtualService whose `gateways` lists a Gateway binds its routes to
    that Gateway alone unless `mesh` is listed too (istio pilot/pkg/model/push_context.go
    `getGatewayNames`: the mesh is implied only by an empty list), so the guide's advice
    took the weights and the controller's pinned probe away from in-mesh callers; and
    outside callers could pin the canary with the header. Now `mesh` is kept, and the pinned
    routes match only in the mesh (an HTTPMatchRequest's `gateways` overrides the
    VirtualService's)."""
    vs = manifests.virtual_service("shapes", 90, 10, gateways=["istio-system/public"],
                                   hosts=["detect.example.com"])
    validate_manifest(vs)
    assert vs["spec"]["gateways"] == ["mesh", "istio-system/public"]
    assert manifests.virtual_service("shapes", 90, 10, gateways=["mesh", "g"])["spec"][
        "gateways"] == ["mesh", "g"]
    for route in vs["spec"]["http"][1:]:
        (match,) = route["match"]
        assert match["gateways"] == ["mesh"], route["name"]
    assert vs["spec"]["http"][0]["match"] == UNPINNED  # the weighted route serves both
    # a canary added or removed later keeps the pinned routes mesh-only
    stable_only = manifests.virtual_service("shapes", 100, 0, canary=False,
                                            gateways=["istio-system/public"])
    with_canary = set_weights(stable_only, 10, with_canary=True)
    assert [r["name"] for r in with_canary["spec"]["http"][1:]] == ["pinned-stable",
                                                                   "pinned-canary"]
    assert all(r["match"][0]["gateways"] == ["mesh"] for r in with_canary["spec"]["http"][1:])
