"""The traffic split's one home (`contracts.traffic`): build, read strictly or leniently, edit.

Pure functions on plain documents. Their callers are tested where they act
(the controller's edits in test_promotion_controller_effects.py, the local
sync's refusals in test_platform_desired.py).
"""

import pytest

from contracts.traffic import (
    Route,
    TrafficError,
    build_route,
    check_split,
    read_routes,
    set_subsets,
    set_weights,
    weights_by_version,
)
from serving import manifests

DR = {"spec": {"subsets": [{"name": "stable", "labels": {"version": "v1"}},
                           {"name": "canary", "labels": {"version": "v2"}}]}}


def _vs(*entries):
    return {"spec": {"http": [{"route": [{"destination": {"subset": s}, **({"weight": w}
                                                                        if w is not None else {})}
                                         for s, w in entries]}]}}


def test_what_serving_builds_reads_back_as_the_same_split():
    dr = manifests.destination_rule("shapes", "v1", "v2")
    vs = manifests.virtual_service("shapes", 75, 25)
    assert read_routes(dr, vs) == [Route("stable", "v1", 75), Route("canary", "v2", 25)]
    assert weights_by_version(dr, vs) == {"v1": 75, "v2": 25}
    edited = set_weights(vs, 50, with_canary=True)
    assert weights_by_version(dr, edited) == {"v1": 50, "v2": 50}
    alone = set_weights(edited, 0, with_canary=False)
    assert weights_by_version(set_subsets(dr, "v2", None), alone) == {"v2": 100}


@pytest.mark.parametrize("stable, canary, canary_subset, message", [
    (90, 20, True, "must sum to 100, got stable=90 \\+ canary=20 = 110"),
    (100, -0, True, None),
    (True, 0, True, "non-negative integers summing to 100, got stable_weight=True"),
    (90, 10, False, "canary_weight=10 but there is no canary subset"),
])
def test_built_splits_hold_istios_rules(stable, canary, canary_subset, message):
    def destination(subset):
        return {"host": "m", "subset": subset}

    if message is None:
        assert len(build_route(destination, stable, canary, canary=canary_subset)) == 2
        return
    with pytest.raises(TrafficError, match=message):
        build_route(destination, stable, canary, canary=canary_subset)


def test_edit_errors_stay_value_errors_for_callers_that_catch_those():
    with pytest.raises(ValueError, match="has no route to subset 'stable'"):
        set_weights({"metadata": {"name": "m"}}, 10, with_canary=True)
    with pytest.raises(ValueError, match="must sum to 100"):
        check_split(50, 40)


@pytest.mark.parametrize("vs, message", [
    (_vs(("stable", 90), ("canary", "10")), "route weight '10' must be an integer 0-100"),
    (_vs(("stable", 90), ("blue", 10)), "route to subset 'blue', which dr.yaml does not define"),
    ({"spec": {"http": []}}, "spec.http\\[0\\].route is missing or empty"),
    (_vs(("stable", 101)), "route weight 101 must be an integer 0-100"),
])
def test_strict_reads_name_the_file_and_what_is_wrong(vs, message):
    with pytest.raises(TrafficError, match=message) as raised:
        read_routes(DR, vs, dr_path="dr.yaml", vs_path="vs.yaml")
    assert raised.value.path == "vs.yaml"
    with pytest.raises(TrafficError, match="every subset needs a name and labels.version") as bad:
        read_routes({"spec": {"subsets": [{"name": "stable"}]}}, _vs(("stable", 100)),
                    dr_path="dr.yaml")
    assert bad.value.path == "dr.yaml"


def test_lenient_reads_keep_what_can_be_read():
    assert weights_by_version(DR, _vs(("stable", 90), ("canary", "10"))) == {"v1": 90, "v2": 0}
    assert weights_by_version(DR, _vs(("stable", 90), ("blue", 10))) == {"v1": 90}
    assert weights_by_version(DR, _vs(("stable", None))) == {"v1": 100}  # single destination
    assert weights_by_version(DR, {"spec": {"http": "nonsense"}}) == {}
    assert weights_by_version(None, None) == {}
    assert read_routes(DR, _vs(("canary", None))) == [Route("canary", "v2", 100)]
