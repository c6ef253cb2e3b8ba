"""The paired gate: a pure function of the floor, the margins and the bootstrap.

The rule (docs/gate.md): the pooled comparison is non-inferior (pass), worse beyond the
margin (fail) or inconclusive (`gate.inconclusive`); each set and each class can only
fail a candidate, on a regression shown beyond their margin.
"""

import pytest

from promotion.decision.gate import (
    GateConfig,
    classify,
    compare_words,
    evaluate_paired_gate,
    plan,
)
from promotion.decision.paired import ClassDifference, Interval, PairedResult
from promotion.errors import PolicyError
from promotion.gitrepo.platform_policy import load_platform_policy

CFG = GateConfig(metric="map50", min=0.85, max_regression=0.01)


def iv(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate=estimate, low=low, high=high)


def result(candidate: float, diff: tuple[float, float, float],
           classes: dict[str, tuple[float, float, float]] | None = None, images: int = 200,
           sd: float = 0.004, undistinguished: tuple[str, ...] = ()) -> PairedResult:
    production = candidate - diff[0]
    return PairedResult(
        images=images, resamples=1000, seed=0, confidence=0.95, class_confidence=0.95,
        class_family=len(classes or {}),
        candidate={"map50": iv(candidate, candidate - 0.02, candidate + 0.02),
                   "map": iv(0.5, 0.48, 0.52)},
        production={"map50": iv(production, production - 0.02, production + 0.02),
                    "map": iv(0.5, 0.48, 0.52)},
        difference={"map50": iv(*diff), "map": iv(0.0, -0.01, 0.01)},
        sd={"map50": sd, "map": 0.005},
        classes=[ClassDifference(category_id=i + 1, name=name, candidate=iv(0.9, 0.8, 1.0),
                                 production=iv(0.9, 0.8, 1.0), difference=iv(*d),
                                 distinguished=name not in undistinguished)
                 for i, (name, d) in enumerate((classes or {}).items())],
    )


def gate_of(cfg: GateConfig, paired: PairedResult):
    return evaluate_paired_gate(cfg, paired, {"val": paired})


@pytest.mark.parametrize(
    "candidate, diff, outcome, comparison",
    [
        (0.92, (0.031, 0.012, 0.049), "pass", "non-inferior"),
        (0.92, (0.003, -0.009, 0.017), "pass", "non-inferior"),
        # worse on the point and the interval, but a regression beyond the margin ruled out
        (0.92, (-0.004, -0.008, -0.001), "pass", "non-inferior"),
        # a gain with a wide interval: a real drop beyond the margin cannot be ruled out
        (0.92, (0.0029, -0.021, 0.027), "review", "inconclusive"),
        # a drop shown, but not shown beyond the margin: still a human's call
        (0.92, (-0.012, -0.02, -0.004), "review", "inconclusive"),
        (0.92, (-0.03, -0.05, -0.011), "fail", "worse"),
        (0.80, (0.031, 0.012, 0.049), "fail", "non-inferior"),  # below the floor
        (0.85, (0.0, -0.01, 0.01), "pass", "non-inferior"),  # both bounds inclusive
    ],
)
def test_outcomes(candidate, diff, outcome, comparison):
    gate = gate_of(CFG, result(candidate, diff))
    assert (gate.outcome, gate.comparison) == (outcome, comparison)
    assert gate.passed is (outcome != "fail")
    assert gate.reason.startswith({"pass": "PASS: ", "review": "REVIEW: ", "fail": "FAIL: "}[
        outcome])
    assert gate.verdict in gate.reason and "on the same 200 images" in gate.reason
    assert gate.as_outputs()["passed"] == ("true" if outcome != "fail" else "false")
    assert gate.worse_classes == []


@pytest.mark.parametrize("policy, outcome", [("review", "review"), ("fail", "fail"),
                                             ("pass", "pass")])
def test_gate_inconclusive_says_what_an_inconclusive_comparison_becomes(policy, outcome):
    cfg = CFG.model_copy(update={"inconclusive": policy})
    gate = gate_of(cfg, result(0.92, (0.0, -0.015, 0.015)))
    assert gate.comparison == "inconclusive" and gate.outcome == outcome
    assert f"gate.inconclusive is {policy}" in gate.reason
    # and it names what would settle it
    assert f"about {gate.plan.images_needed} would give 95%" in gate.reason


def test_words_say_the_rule_not_another_question():
    """"same within noise" was printed for candidates that failed: the words now say
    which non-inferiority statement the interval supports."""
    assert compare_words(iv(0.003, -0.009, 0.017), 0.01).startswith(
        "non-inferior by margin 0.0100: shown")
    assert compare_words(iv(-0.03, -0.05, -0.011), 0.01).startswith(
        "worse beyond the margin 0.0100: shown")
    assert compare_words(iv(0.0, -0.02, 0.02), 0.01).startswith("inconclusive")
    assert classify(iv(0.0, -0.01, 0.0), 0.01) == "non-inferior"  # the end at -margin passes
    assert classify(iv(-0.02, -0.03, -0.01), 0.01) == "inconclusive"  # ... and is not "worse"


def test_identical_models_pass_with_no_allowed_regression():
    cfg = GateConfig(metric="map50", min=0.5, max_regression=0.0, inconclusive="fail")
    assert gate_of(cfg, result(0.9, (0.0, 0.0, 0.0))).outcome == "pass"
    assert gate_of(cfg, result(0.9, (0.0, -0.001, 0.001))).outcome == "fail"


def test_classes_worse_beyond_their_margin_are_named_and_fail_unless_reported_only():
    paired = result(0.92, (0.01, 0.001, 0.02), {
        "circle": (0.05, 0.01, 0.09),
        "square": (-0.06, -0.11, -0.021),  # shown worse beyond the class margin 0.02
        "triangle": (-0.03, -0.07, -0.01),  # shown worse, but not beyond its margin
    })
    failed = gate_of(CFG, paired)  # default: worse_classes: fail
    assert failed.outcome == "fail" and failed.comparison == "non-inferior"
    assert failed.worse_classes == ["square"]
    assert "fails the gate (gate.worse_classes: fail)" in failed.reason
    gate = gate_of(CFG.model_copy(update={"worse_classes": "report"}), paired)
    assert gate.outcome == "pass"
    assert gate.worse_classes == ["square"]
    assert ("worse beyond the class margin 0.0200 for square on val -0.0600 [-0.1100, -0.0210]"
            in gate.reason)
    assert "95% simultaneous band over 3 class differences" in gate.reason
    assert "triangle" not in gate.reason


def test_a_class_no_image_tells_apart_is_not_judged():
    paired = result(0.92, (0.01, 0.001, 0.02), {"circle": (-0.05, -0.05, -0.05)},
                    undistinguished=("circle",))
    gate = gate_of(CFG, paired)
    assert gate.outcome == "pass" and gate.worse_classes == []
    assert gate.sets[0].undistinguished == ["circle"]


def test_one_set_shown_worse_beyond_the_margin_fails_a_pooled_pass():
    """The holdout broke while val improved: the pool passes, the set's safety check fails."""
    val = result(0.93, (0.02, 0.012, 0.03))
    holdout = result(0.90, (-0.03, -0.045, -0.012))
    pooled = result(0.915, (-0.005, -0.009, -0.001), images=400)
    gate = evaluate_paired_gate(CFG, pooled, {"val": val, "holdout": holdout})
    assert gate.comparison == "non-inferior" and gate.outcome == "fail"
    assert "on holdout alone it is worse beyond the margin 0.0100" in gate.reason
    assert [s.comparison for s in gate.sets] == ["non-inferior", "worse"]
    assert "on the same 400 images (val 200 + holdout 200)" in gate.reason


def test_an_inconclusive_set_does_not_fail_a_pooled_pass():
    """Each set alone is a safety check, not a second chance to fail an equal model."""
    val = result(0.92, (0.0, -0.012, 0.011))
    pooled = result(0.92, (0.0, -0.008, 0.008), images=400)
    gate = evaluate_paired_gate(CFG, pooled, {"val": val, "holdout": val})
    assert [s.comparison for s in gate.sets] == ["inconclusive", "inconclusive"]
    assert gate.outcome == "pass"


def test_gate_on_map_reads_the_map_interval():
    gate = gate_of(GateConfig(metric="map", min=0.4), result(0.92, (0.1, 0.05, 0.2)))
    assert gate.verdict.startswith("non-inferior by margin 0.0100: shown (+0.0000 [-0.0100, ")
    assert gate.value == 0.5


def test_the_plan_follows_the_normal_approximation():
    # sd 0.004 at 200 images, margin 0.01: z = 0.01 / 0.004 - 1.96 = 0.54 -> 70.5 % power;
    # 95 % power needs sd = 0.01 / (1.96 + 1.645), i.e. 200 * (3.605 * 0.4) ** 2 = 416 images
    p = plan(iv(0.0, -0.008, 0.008), 0.004, 200, 0.01)
    assert p.power == pytest.approx(0.705, abs=0.002)
    assert p.images_needed == pytest.approx(416, abs=1)
    assert p.margin_for_power == pytest.approx(0.01442, abs=1e-4)
    assert p.rules_out == pytest.approx(0.008) and p.enough is False
    assert plan(iv(0.0, -0.003, 0.003), 0.0015, 1000, 0.01).enough is True


def test_a_platform_bounds_the_class_margin_and_what_an_inconclusive_gate_does():
    policy = load_platform_policy({"gate": {"worse_classes": "fail", "inconclusive": "review",
                                            "class_max_regression": 0.02}})
    with pytest.raises(PolicyError, match="worse_classes report"):
        policy.gate_for(GateConfig(worse_classes="report"), "mlops.yaml: gate")
    with pytest.raises(PolicyError, match="inconclusive pass .the platform's is review"):
        policy.gate_for(GateConfig(inconclusive="pass"), "mlops.yaml: gate")
    with pytest.raises(PolicyError, match="class_max_regression 0.05 is above"):
        policy.gate_for(GateConfig(class_max_regression=0.05), "mlops.yaml: gate")
    assert policy.gate_for(GateConfig(inconclusive="fail"), "m").inconclusive == "fail"
    assert policy.gate_for(GateConfig(), "m").worse_classes == "fail"
    silent = load_platform_policy({"gate": {"min": 0.6}})  # an unset bound is not a bound
    assert silent.gate_for(GateConfig(min=0.7, worse_classes="report"),
                           "m").worse_classes == "report"
