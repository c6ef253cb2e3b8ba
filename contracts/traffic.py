"""The traffic split: which version gets what share, built, read and edited here.

A model's split is its DestinationRule (subsets `stable`, `canary` by a `version` label)
and the first HTTP route of its VirtualService. Every room that builds, edits or reads a
split uses these functions, so Istio's weight rules hold the same everywhere. Reading is
lenient (`weights_by_version`: what can be read) or strict (`read_routes`: `TrafficError`
naming the file and the field). Why: docs/inside-foundations.md.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, NamedTuple

from contracts.errors import ExitCode, MlopsError

__all__ = [
    "CANARY",
    "STABLE",
    "MESH_GATEWAY",
    "SUBSET_HEADER",
    "UNPINNED",
    "VERSION_HEADER",
    "Route",
    "TrafficError",
    "build_route",
    "check_split",
    "pinned_routes",
    "read_routes",
    "set_subsets",
    "set_weights",
    "weights_by_version",
]

STABLE = "stable"
CANARY = "canary"
#: A request carrying this header (value: a version) goes to that version whatever the
#: weights: the canary's paired answers probe (`promotion/metrics/probe.py`) asks stable and
#: canary the same images this way, through the router clients use (HAProxy's
#: `use-server` locally, a VirtualService header `match` in a cluster).
VERSION_HEADER = "x-mlops-version"
#: Istio's twin of `VERSION_HEADER` (value: `stable` or `canary`): a VirtualService routes
#: by subset, not by version, so the probe sends both. The weighted route `spec.http[0]`
#: matches only requests without it (`UNPINNED`), and one route per subset after it
#: (`pinned_routes`) sends the pinned ones; `spec.http[0]` stays the weighted route every
#: reader here indexes. Istio turns `withoutHeaders: {h: {}}` into Envoy's inverted
#: `present_match` (pilot/pkg/networking/core/route/route.go, `TranslateRouteMatch`).
SUBSET_HEADER = "x-mlops-subset"
#: Istio's name for the sidecars of the mesh among a VirtualService's `gateways`: with the
#: list empty it is the only one; a list without it binds the routes to the Gateways named
#: there alone (istio pilot/pkg/model/push_context.go `getGatewayNames`, 1.30).
MESH_GATEWAY = "mesh"
UNPINNED: list[dict[str, Any]] = [{"withoutHeaders": {SUBSET_HEADER: {}}}]


class TrafficError(MlopsError, ValueError):
    """A split that Istio would reject or that names what does not exist."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class Route(NamedTuple):
    """One entry of the first HTTP route, resolved to the version its subset labels."""

    subset: str
    version: str
    weight: int


def nested(doc: Any, *keys: str) -> Any:
    """`doc[k1][k2]...` of a parsed manifest, or None where a level is missing or not a
    mapping (hand-edited YAML may hold anything)."""
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def check_split(stable_weight: int, canary_weight: int) -> None:
    """Two weights Istio accepts: non-negative integers summing to 100."""
    for name, value in (("stable_weight", stable_weight), ("canary_weight", canary_weight)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TrafficError(
                "virtualservice.yaml",
                f"route weights must be non-negative integers summing to 100, "
                f"got {name}={value!r} (stable={stable_weight!r}, canary={canary_weight!r})")
    if stable_weight + canary_weight != 100:
        raise TrafficError(
            "virtualservice.yaml",
            f"route weights must sum to 100, got stable={stable_weight} + "
            f"canary={canary_weight} = {stable_weight + canary_weight}")


def build_route(destination: Callable[[str], dict[str, Any]], stable_weight: int,
                canary_weight: int, *, canary: bool) -> list[dict[str, Any]]:
    """The first HTTP route for a new VirtualService (`destination(subset)` says where)."""
    check_split(stable_weight, canary_weight)
    if not canary and canary_weight != 0:
        raise TrafficError("virtualservice.yaml",
                           f"canary_weight={canary_weight} but there is no canary subset; "
                           "pass canary=True or weights 100/0")
    route = [{"destination": destination(STABLE), "weight": stable_weight}]
    if canary:
        route.append({"destination": destination(CANARY), "weight": canary_weight})
    return route


def pinned_routes(destination: Callable[[str], dict[str, Any]],
                  subsets: list[str]) -> list[dict[str, Any]]:
    """The routes after `spec.http[0]` sending `SUBSET_HEADER: <subset>` to that subset,
    for callers in the mesh only (the match's `gateways: [mesh]` overrides the
    VirtualService's own list): with a Gateway added to `spec.gateways`, a caller from
    outside cannot pin the canary; its request with the header matches no route."""
    return [{"name": f"pinned-{subset}",
             "match": [{"headers": {SUBSET_HEADER: {"exact": subset}},
                        "gateways": [MESH_GATEWAY]}],
             "route": [{"destination": destination(subset)}]} for subset in subsets]


def _pinned_subset(http_route: Any) -> str | None:
    """The subset a route after `spec.http[0]` pins (`pinned_routes`'s shape), else None."""
    match = nested(http_route, "match")
    if not isinstance(match, list) or len(match) != 1:
        return None
    value = nested(match[0], "headers", SUBSET_HEADER, "exact")
    return value if isinstance(value, str) else None


def _sync_pinned(vs: dict[str, Any], with_canary: bool) -> None:
    """Keep the canary's pinned route iff there is a canary, in a VirtualService that pins
    (its `spec.http[0]` has the `UNPINNED` match); one written without pinning stays so."""
    http = vs["spec"]["http"]
    if http[0].get("match") != UNPINNED:
        return
    route = http[0]["route"]
    by_subset = {nested(r, "destination", "subset"): r for r in route}
    pinned = {_pinned_subset(r) for r in http[1:]}
    kept = [r for r in http[1:] if with_canary or _pinned_subset(r) != CANARY]
    for subset in (STABLE, CANARY):
        if subset not in pinned and subset in by_subset:
            destination = copy.deepcopy(by_subset[subset]["destination"])
            kept += pinned_routes(lambda _s: destination, [subset])
    http[1:] = kept


def _subsets(destination_rule: Any, *, strict: bool, path: str) -> dict[str, str]:
    subsets: dict[str, str] = {}
    for subset in nested(destination_rule, "spec", "subsets") or []:
        name, version = nested(subset, "name"), nested(subset, "labels", "version")
        if isinstance(name, str) and isinstance(version, str):
            subsets[name] = version
        elif strict:
            raise TrafficError(path, f"{path}: every subset needs a name and labels.version")
    return subsets


def read_routes(destination_rule: Any, virtual_service: Any, *,
                dr_path: str = "destinationrule.yaml",
                vs_path: str = "virtualservice.yaml") -> list[Route]:
    """The first HTTP route, every entry checked; `TrafficError` names file and field."""
    subsets = _subsets(destination_rule, strict=True, path=dr_path)
    http = nested(virtual_service, "spec", "http")
    first = http[0] if isinstance(http, list) and http else None
    route = first.get("route") if isinstance(first, dict) else None
    if not isinstance(route, list) or not route:
        raise TrafficError(vs_path, f"{vs_path}: spec.http[0].route is missing or empty")
    out = []
    for entry in route:
        subset = nested(entry, "destination", "subset")
        weight = nested(entry, "weight")
        if weight is None and len(route) == 1:
            weight = 100  # a single destination without a weight takes all traffic
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise TrafficError(vs_path, f"{vs_path}: route weight {weight!r} must be an integer "
                                        "0-100")
        if subset not in subsets:
            raise TrafficError(vs_path, f"{vs_path}: route to subset {subset!r}, which {dr_path} "
                                        f"does not define (subsets: {sorted(subsets)})")
        out.append(Route(subset, subsets[subset], weight))
    return out


def weights_by_version(destination_rule: Any, virtual_service: Any) -> dict[str, int]:
    """Weight per version from what can be read (lenient: see the module docstring)."""
    subsets = _subsets(destination_rule, strict=False, path="")
    http = nested(virtual_service, "spec", "http")
    first = http[0] if isinstance(http, list) and http else None
    route = first.get("route") if isinstance(first, dict) else None
    route = route if isinstance(route, list) else []
    out: dict[str, int] = {}
    for entry in route:
        version = subsets.get(nested(entry, "destination", "subset"))
        weight = nested(entry, "weight")
        if version is not None:
            usable = isinstance(weight, int) and not isinstance(weight, bool)
            out[version] = out.get(version, 0) + (weight if usable else 0)
    if len(out) == 1 and len(route) == 1:
        out = {version: 100 for version in out}  # a single destination takes everything
    return out


def _first_route(vs: dict[str, Any]) -> list[dict[str, Any]]:
    http = vs.setdefault("spec", {}).setdefault("http", [])
    if not http:
        http.append({"name": "primary", "route": []})
    return http[0].setdefault("route", [])


def set_weights(vs: dict[str, Any], canary_weight: int, *, with_canary: bool) -> dict[str, Any]:
    """A copy of VirtualService `vs` with stable `100-w` and canary `w` (or stable alone);
    other entries and fields stay as written."""
    out = copy.deepcopy(vs)
    route = _first_route(out)
    stable = next((r for r in route if nested(r, "destination", "subset") == STABLE), None)
    if stable is None:
        raise TrafficError("virtualservice.yaml",
                           f"VirtualService {nested(vs, 'metadata', 'name')!r} has no route to "
                           f"subset {STABLE!r}")
    canary = next((r for r in route if nested(r, "destination", "subset") == CANARY), None)
    if with_canary and canary is None:
        canary = {"destination": {**copy.deepcopy(stable["destination"]), "subset": CANARY}}
    stable["weight"] = 100 - canary_weight if with_canary else 100
    new_route = [stable]
    if with_canary and canary is not None:
        canary["weight"] = canary_weight
        new_route.append(canary)
    new_route += [r for r in route if nested(r, "destination", "subset") not in (STABLE, CANARY)]
    route[:] = new_route
    _sync_pinned(out, with_canary)
    return out


def set_subsets(dr: dict[str, Any], stable: str, canary: str | None) -> dict[str, Any]:
    """A copy of DestinationRule `dr` with subsets `stable` (and `canary` when given);
    other subsets and each subset's other labels stay."""
    out = copy.deepcopy(dr)
    subsets = out.setdefault("spec", {}).setdefault("subsets", [])
    old = {s.get("name"): s for s in subsets}
    wanted = [(STABLE, stable)] + ([(CANARY, canary)] if canary else [])
    new = []
    for name, version in wanted:
        subset = copy.deepcopy(old.get(name) or {"name": name})
        subset["labels"] = {**(subset.get("labels") or {}), "version": version}
        new.append(subset)
    new += [s for s in subsets if s.get("name") not in (STABLE, CANARY)]
    subsets[:] = new
    return out
