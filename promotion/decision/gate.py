"""The quality gate: is the candidate good enough to propose? A pure function.

Two checks, both stated in plain words in the result: an absolute floor
(`gate.min`) and a regression bound against the model in production
(`gate.max_regression`). With no production model the second check is
skipped and says so, rather than passing silently.

`evaluate_paired_gate` is the same gate on a paired bootstrap of both models
on the same images (`promotion.decision.paired`): the regression bound is checked
against the interval's lower end, not the point difference, so a drop that
sampling noise could hide is not waved through, and the verdict says whether
the candidate is better, the same within noise, or worse.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from promotion.decision.paired import Interval, PairedResult

GateMetric = Literal["map50", "map"]


class GateConfig(BaseModel):
    """The `gate:` section of `mlops.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: GateMetric = "map50"
    min: float = Field(default=0.5, ge=0.0, le=1.0)
    max_regression: float = Field(default=0.01, ge=0.0, le=1.0)
    # A class whose AP@0.5 got significantly worse than production's on the same images
    # (paired gate only): `fail` stops the candidate, `report` only names it. A gain on
    # the other classes can hide a class the new labels broke (issue 30's bad-labels).
    worse_classes: Literal["fail", "report"] = "fail"


class GateResult(BaseModel):
    """The verdict with the numbers behind it."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    metric: str
    value: float
    minimum: float
    production: float | None
    max_regression: float
    reason: str

    def as_outputs(self) -> dict[str, str]:
        """Argo output parameters (strings)."""
        return {"passed": "true" if self.passed else "false", "reason": self.reason}


def evaluate_gate(
    config: GateConfig, metrics: dict[str, float], production: dict[str, float] | None = None
) -> GateResult:
    """Judge candidate `metrics` against the floor and the production model's metrics."""
    if config.metric not in metrics:
        raise KeyError(f"candidate metrics have no {config.metric!r} (have: {sorted(metrics)})")
    value = float(metrics[config.metric])
    prod = None if production is None else production.get(config.metric)
    reasons = []
    passed = True
    if value < config.min:
        passed = False
        reasons.append(f"{config.metric} {value:.4f} is below the minimum {config.min:.4f}")
    else:
        reasons.append(f"{config.metric} {value:.4f} meets the minimum {config.min:.4f}")
    if prod is None:
        reasons.append("no production model to compare with")
    else:
        prod = float(prod)
        floor = prod - config.max_regression
        if value < floor:
            passed = False
            reasons.append(
                f"it regresses from production's {prod:.4f} by {prod - value:.4f}, "
                f"more than the allowed {config.max_regression:.4f}"
            )
        else:
            reasons.append(
                f"it is within {config.max_regression:.4f} of production's {prod:.4f} "
                f"(change {value - prod:+.4f})"
            )
    verdict = "PASS" if passed else "FAIL"
    return GateResult(
        passed=passed,
        metric=config.metric,
        value=value,
        minimum=config.min,
        production=prod,
        max_regression=config.max_regression,
        reason=f"{verdict}: " + "; ".join(reasons),
    )


class PairedGateResult(GateResult):
    """The paired gate's verdict: the difference's interval and the classes that got worse."""

    difference: Interval
    verdict: str
    worse_classes: list[str]


def _signed(interval: Interval) -> str:
    return f"{interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"


def compare_words(interval: Interval) -> str:
    """Say "better", "same within noise" or "worse", with the difference and its interval."""
    if interval.low > 0:
        word = "better"
    elif interval.high < 0:
        word = "worse"
    else:
        word = "same within noise"
    return f"{word}: {_signed(interval)}"


def evaluate_paired_gate(config: GateConfig, paired: PairedResult) -> PairedGateResult:
    """Judge the candidate against production on the same images, with intervals.

    Passes when the candidate's value meets the floor and the interval's lower
    end is at least `-max_regression` (at least, so a candidate identical to
    production passes with `max_regression: 0`). Classes whose AP@0.5 got
    significantly worse (Bonferroni interval wholly below 0) are named, and fail
    the gate unless `gate.worse_classes` is `report`.
    """
    value = paired.candidate[config.metric].estimate
    prod = paired.production[config.metric].estimate
    diff = paired.difference[config.metric]
    verdict = compare_words(diff)
    reasons = []
    passed = value >= config.min
    if passed:
        reasons.append(f"{config.metric} {value:.4f} meets the minimum {config.min:.4f}")
    else:
        reasons.append(f"{config.metric} {value:.4f} is below the minimum {config.min:.4f}")
    reasons.append(
        f"against production ({prod:.4f}) on the same {paired.images} images it is {verdict} "
        f"({paired.confidence:.0%} paired bootstrap interval, {paired.resamples} resamples)"
    )
    if diff.low >= -config.max_regression:
        reasons.append(f"the interval rules out a regression of more than "
                       f"{config.max_regression:.4f}")
    else:
        passed = False
        reasons.append(f"the interval reaches {diff.low:+.4f}: a regression of more than the "
                       f"allowed {config.max_regression:.4f} cannot be ruled out")
    worse = [c for c in paired.classes if c.difference.high < 0]
    if worse:
        reasons.append(
            "AP@0.5 significantly worse for "
            + ", ".join(f"{c.name} {_signed(c.difference)}" for c in worse)
            + f" (Bonferroni over {len(paired.classes)} classes: "
            f"{paired.class_confidence:.1%} intervals)"
            + ("" if config.worse_classes == "report" else "; a class worse beyond noise "
               "fails the gate (gate.worse_classes: fail)")
        )
        if config.worse_classes == "fail":
            passed = False
    return PairedGateResult(
        passed=passed,
        metric=config.metric,
        value=value,
        minimum=config.min,
        production=prod,
        max_regression=config.max_regression,
        reason=("PASS" if passed else "FAIL") + ": " + "; ".join(reasons),
        difference=diff,
        verdict=verdict,
        worse_classes=[c.name for c in worse],
    )
