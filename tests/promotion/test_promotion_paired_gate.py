"""The paired gate: a pure function of the floor, the allowed regression and the bootstrap."""

import pytest

from promotion.decision.gate import GateConfig, compare_words, evaluate_paired_gate
from promotion.decision.paired import ClassDifference, Interval, PairedResult
from promotion.gitrepo.platform_policy import PolicyError, load_platform_policy

CFG = GateConfig(metric="map50", min=0.85, max_regression=0.01)


def iv(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate=estimate, low=low, high=high)


def result(candidate: float, diff: tuple[float, float, float],
           classes: dict[str, tuple[float, float, float]] | None = None) -> PairedResult:
    production = candidate - diff[0]
    return PairedResult(
        images=200, resamples=1000, seed=0, confidence=0.95,
        class_confidence=1 - 0.05 / max(1, len(classes or {})),
        candidate={"map50": iv(candidate, candidate - 0.02, candidate + 0.02),
                   "map": iv(0.5, 0.48, 0.52)},
        production={"map50": iv(production, production - 0.02, production + 0.02),
                    "map": iv(0.5, 0.48, 0.52)},
        difference={"map50": iv(*diff), "map": iv(0.0, -0.01, 0.01)},
        classes=[ClassDifference(category_id=i + 1, name=name, candidate=iv(0.9, 0.8, 1.0),
                                 production=iv(0.9, 0.8, 1.0), difference=iv(*d))
                 for i, (name, d) in enumerate((classes or {}).items())],
    )


@pytest.mark.parametrize(
    "candidate, diff, passed, verdict, words",
    [
        (0.92, (0.031, 0.012, 0.049), True, "better: +0.0310 [+0.0120, +0.0490]",
         ["meets the minimum", "rules out a regression of more than 0.0100"]),
        (0.92, (0.003, -0.009, 0.017), True, "same within noise: +0.0030 [-0.0090, +0.0170]",
         ["rules out"]),
        # a gain the size of the demo's good push (+0.0029) with a wide interval: the
        # point difference passes the old gate, the interval cannot rule out a real drop
        (0.92, (0.0029, -0.021, 0.027), False, "same within noise: +0.0029 [-0.0210, +0.0270]",
         ["reaches -0.0210", "cannot be ruled out"]),
        (0.92, (-0.004, -0.008, -0.001), True, "worse: -0.0040 [-0.0080, -0.0010]",
         ["rules out"]),  # worse, but surely within the allowed regression
        (0.92, (-0.03, -0.05, -0.01), False, "worse: -0.0300 [-0.0500, -0.0100]",
         ["cannot be ruled out"]),
        (0.80, (0.031, 0.012, 0.049), False, "better", ["below the minimum 0.8500"]),
        (0.85, (0.0, -0.01, 0.01), True, "same within noise", ["meets the minimum"]),
        (0.85, (0.0, 0.0, 0.0), True, "same within noise", ["rules out"]),  # bounds inclusive
    ],
)
def test_verdicts(candidate, diff, passed, verdict, words):
    gate = evaluate_paired_gate(CFG, result(candidate, diff))
    assert gate.passed is passed
    assert gate.verdict.startswith(verdict)
    assert gate.reason.startswith("PASS: " if passed else "FAIL: ")
    assert gate.verdict in gate.reason and "on the same 200 images" in gate.reason
    for w in words:
        assert w in gate.reason
    assert gate.as_outputs()["passed"] == ("true" if passed else "false")
    assert gate.worse_classes == []


def test_identical_models_pass_with_no_allowed_regression():
    cfg = GateConfig(metric="map50", min=0.5, max_regression=0.0)
    assert evaluate_paired_gate(cfg, result(0.9, (0.0, 0.0, 0.0))).passed is True
    assert evaluate_paired_gate(cfg, result(0.9, (0.0, -0.001, 0.001))).passed is False


def test_classes_significantly_worse_are_named_and_fail_the_gate_unless_reported_only():
    paired = result(0.92, (0.01, 0.001, 0.02), {
        "circle": (0.05, 0.01, 0.09),
        "square": (-0.06, -0.11, -0.01),
        "triangle": (-0.02, -0.07, 0.03),  # worse on the point, not beyond the noise
    })
    failed = evaluate_paired_gate(CFG, paired)  # default: worse_classes: fail
    assert failed.passed is False and failed.verdict.startswith("better")  # overall better
    assert failed.worse_classes == ["square"]
    assert "fails the gate (gate.worse_classes: fail)" in failed.reason
    gate = evaluate_paired_gate(CFG.model_copy(update={"worse_classes": "report"}), paired)
    assert gate.passed is True
    assert gate.worse_classes == ["square"]
    assert "significantly worse for square -0.0600 [-0.1100, -0.0100]" in gate.reason
    assert "Bonferroni over 3 classes: 98.3% intervals" in gate.reason
    assert "triangle" not in gate.reason


def test_gate_on_map_reads_the_map_interval():
    gate = evaluate_paired_gate(GateConfig(metric="map", min=0.4), result(0.92, (0.1, 0.05, 0.2)))
    assert gate.verdict == "same within noise: +0.0000 [-0.0100, +0.0100]"
    assert gate.value == 0.5


@pytest.mark.parametrize("interval, word", [
    (iv(0.01, 0.0, 0.02), "same within noise"),  # an end at 0 is not beyond the noise
    (iv(0.01, 1e-9, 0.02), "better"),
    (iv(-0.01, -0.02, -1e-9), "worse"),
])
def test_compare_words_edges(interval, word):
    assert compare_words(interval).startswith(word + ":")


def test_a_platform_that_fails_worse_classes_refuses_a_model_that_only_reports_them():
    policy = load_platform_policy({"gate": {"worse_classes": "fail"}})
    with pytest.raises(PolicyError, match="worse_classes report"):
        policy.gate_for(GateConfig(worse_classes="report"), "mlops.yaml: gate")
    assert policy.gate_for(GateConfig(), "m").worse_classes == "fail"
    silent = load_platform_policy({"gate": {"min": 0.6}})  # an unset bound is not a bound
    assert silent.gate_for(GateConfig(min=0.7, worse_classes="report"),
                           "m").worse_classes == "report"
