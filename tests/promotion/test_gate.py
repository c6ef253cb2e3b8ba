"""The gate: a pure function; its reason reads as a sentence."""

import pytest

from promotion.decision.gate import GateConfig, evaluate_gate

CFG = GateConfig(metric="map50", min=0.85, max_regression=0.01)


@pytest.mark.parametrize(
    "value, production, passed, words",
    [
        (0.90, None, True, ["meets the minimum", "no production model"]),
        (0.80, None, False, ["below the minimum"]),
        (0.90, 0.905, True, ["within 0.0100 of production"]),
        (0.90, 0.95, False, ["regresses from production's 0.9500 by 0.0500"]),
        (0.84, 0.80, False, ["below the minimum"]),
        (0.85, None, True, ["meets the minimum"]),  # the floor is inclusive
    ],
)
def test_verdicts(value, production, passed, words):
    prod = None if production is None else {"map50": production}
    result = evaluate_gate(CFG, {"map50": value, "map": 0.5}, prod)
    assert result.passed is passed
    assert result.reason.startswith("PASS" if passed else "FAIL")
    for w in words:
        assert w in result.reason
    assert result.as_outputs()["passed"] == ("true" if passed else "false")


def test_gate_on_other_metric():
    cfg = GateConfig(metric="map", min=0.4)
    assert evaluate_gate(cfg, {"map50": 0.99, "map": 0.3}).passed is False


def test_missing_metric_is_an_error():
    with pytest.raises(KeyError):
        evaluate_gate(CFG, {"map": 0.9})
