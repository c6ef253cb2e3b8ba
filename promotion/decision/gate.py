"""The quality gate: is the candidate good enough to propose? A pure function.

`evaluate_gate`: an absolute floor (`gate.min`) and a regression bound against
production (`gate.max_regression`), skipped and said so without a production model.
`evaluate_paired_gate`: the same gate on a paired bootstrap (`promotion.decision.paired`),
a non-inferiority test with three outcomes (non-inferior, worse, inconclusive) and
per-set and per-class safety checks. The rule and its error rates: docs/gate.md.
"""

import math
from statistics import NormalDist
from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from promotion.decision.paired import Interval, PairedResult

GateMetric = Literal["map50", "map"]
Comparison = Literal["non-inferior", "worse", "inconclusive"]
Outcome = Literal["pass", "review", "fail"]

#: The power sample-size planning aims at: an equally good candidate shown non-inferior
#: this often.
PLAN_POWER = 0.95


class GateConfig(BaseModel):
    """The `gate:` section of `mlops.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: GateMetric = "map50"
    min: float = Field(default=0.5, ge=0.0, le=1.0)
    max_regression: float = Field(default=0.01, ge=0.0, le=1.0)
    # A class whose AP@0.5 is shown worse than production's by more than
    # `class_max_regression` on the same images (paired gate only): `fail` stops the
    # candidate, `report` only names it. A gain on the other classes can hide a class
    # the new labels broke (the demo's bad-labels week).
    class_max_regression: float = Field(default=0.02, ge=0.0, le=1.0)
    worse_classes: Literal["fail", "report"] = "fail"
    # Neither non-inferiority nor a regression beyond the margin shown (paired gate only):
    # `review` opens the PR marked for a human's judgement, `fail` refuses the candidate,
    # `pass` proposes it as if it had passed.
    inconclusive: Literal["review", "fail", "pass"] = "review"


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


class Plan(BaseModel):
    """What the evaluation images can tell, for the margin, at the interval's level.

    From the bootstrap standard deviation `sd` of the difference on `images` images
    (it shrinks as one over the square root of the images), for a candidate exactly as
    good as production: how often it is shown non-inferior (`power`), the smallest
    margin shown with `PLAN_POWER` (`margin_for_power`), and how many images that margin
    needs (`images_needed`). `rules_out` is what this run's interval rules out: a
    regression larger than it.
    """

    model_config = ConfigDict(frozen=True)

    images: int
    sd: float
    margin: float
    rules_out: float
    power: float
    margin_for_power: float
    images_needed: int
    enough: bool


def plan(difference: Interval, sd: float, images: int, margin: float,
         confidence: float = 0.95, power: float = PLAN_POWER) -> Plan:
    """Sample-size planning from one run's paired differences (normal approximation)."""
    normal = NormalDist()
    z_level = normal.inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    z_power = normal.inv_cdf(power)
    if sd > 0:
        reach = margin / sd - z_level
        now = normal.cdf(reach)
        needed = math.ceil(images * ((z_level + z_power) * sd / margin) ** 2) if margin > 0 \
            else 0
    else:  # no resample tells the models apart: the interval is a point
        now, needed = (1.0 if difference.low >= -margin else 0.0), images
    return Plan(images=images, sd=sd, margin=margin, rules_out=max(0.0, -difference.low),
                power=now, margin_for_power=(z_level + z_power) * sd,
                images_needed=max(needed, 1) if margin > 0 else 0,
                enough=now >= power)


def classify(difference: Interval, margin: float) -> Comparison:
    """The comparison's outcome: non-inferior by `margin`, worse beyond it, or neither."""
    if difference.low >= -margin:
        return "non-inferior"
    if difference.high < -margin:
        return "worse"
    return "inconclusive"


def _signed(interval: Interval) -> str:
    return f"{interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"


def compare_words(interval: Interval, margin: float) -> str:
    """The comparison in words, with the difference and its interval."""
    word = {"non-inferior": f"non-inferior by margin {margin:.4f}: shown",
            "worse": f"worse beyond the margin {margin:.4f}: shown",
            "inconclusive": f"inconclusive: neither non-inferiority by {margin:.4f} nor a "
                            "regression beyond it is shown"}[classify(interval, margin)]
    return f"{word} ({_signed(interval)})"


class SetVerdict(BaseModel):
    """One evaluation set on its own: a safety check (it fails only a shown regression)."""

    model_config = ConfigDict(frozen=True)

    name: str
    images: int
    value: float
    production: float
    difference: Interval
    comparison: Comparison
    worse_classes: list[str]
    undistinguished: list[str]
    plan: Plan


class PairedGateResult(GateResult):
    """The paired gate's verdict: the pooled comparison, each set's, the worse classes."""

    outcome: Outcome
    comparison: Comparison
    difference: Interval
    verdict: str
    worse_classes: list[str]
    class_max_regression: float
    sets: list[SetVerdict]
    plan: Plan


#: What an inconclusive comparison becomes, by `gate.inconclusive`.
_INCONCLUSIVE: dict[str, Outcome] = {"review": "review", "fail": "fail", "pass": "pass"}


def _set_verdict(config: GateConfig, name: str, paired: PairedResult) -> SetVerdict:
    diff = paired.difference[config.metric]
    worse = [c.name for c in paired.classes
             if c.distinguished and c.difference.high < -config.class_max_regression]
    return SetVerdict(
        name=name, images=paired.images, value=paired.candidate[config.metric].estimate,
        production=paired.production[config.metric].estimate, difference=diff,
        comparison=classify(diff, config.max_regression), worse_classes=worse,
        undistinguished=[c.name for c in paired.classes if not c.distinguished],
        plan=plan(diff, paired.sd.get(config.metric, 0.0), paired.images,
                  config.max_regression, paired.confidence),
    )


def evaluate_paired_gate(config: GateConfig, pooled: PairedResult,
                         sets: Mapping[str, PairedResult]) -> PairedGateResult:
    """Judge the candidate against production on the same images (every evaluation set).

    Fails when the pooled value is below the floor, when the pooled comparison or any set
    shows a regression beyond `max_regression`, or when a class of any set is shown worse
    beyond `class_max_regression` (unless `worse_classes: report`). Passes when the pooled
    comparison shows non-inferiority; otherwise it is inconclusive and `inconclusive`
    decides. `passed` is true when the candidate goes on to a PR (pass or review).
    """
    value = pooled.candidate[config.metric].estimate
    prod = pooled.production[config.metric].estimate
    diff = pooled.difference[config.metric]
    comparison = classify(diff, config.max_regression)
    verdicts = [_set_verdict(config, name, paired) for name, paired in sets.items()]
    failed = []
    reasons = []
    if value >= config.min:
        reasons.append(f"{config.metric} {value:.4f} meets the minimum {config.min:.4f}")
    else:
        failed.append("floor")
        reasons.append(f"{config.metric} {value:.4f} is below the minimum {config.min:.4f}")
    names = " + ".join(f"{v.name} {v.images}" for v in verdicts)
    reasons.append(
        f"against production ({prod:.4f}) on the same {pooled.images} images ({names}) it is "
        f"{compare_words(diff, config.max_regression)} ({pooled.confidence:.0%} paired "
        f"bootstrap interval, {pooled.resamples} resamples)")
    if comparison == "worse":
        failed.append("worse")
    if len(verdicts) > 1:
        for v in verdicts:
            if v.comparison == "worse":
                failed.append(f"worse on {v.name}")
                reasons.append(f"on {v.name} alone it is worse beyond the margin "
                               f"{config.max_regression:.4f}: {_signed(v.difference)}")
    worse = sorted({c for v in verdicts for c in v.worse_classes})
    if worse:
        shown = [f"{c.name} on {v.name} {_signed(c.difference)}"
                 for v, paired in zip(verdicts, sets.values()) for c in paired.classes
                 if c.name in v.worse_classes]
        reasons.append(
            f"AP@0.5 worse beyond the class margin {config.class_max_regression:.4f} for "
            + ", ".join(shown)
            + f" ({pooled.class_confidence:.0%} simultaneous band over "
            f"{pooled.class_family} class differences)"
            + ("" if config.worse_classes == "report" else "; a class shown worse beyond "
               "its margin fails the gate (gate.worse_classes: fail)"))
        if config.worse_classes == "fail":
            failed.append("classes")
    the_plan = plan(diff, pooled.sd.get(config.metric, 0.0), pooled.images,
                    config.max_regression, pooled.confidence)
    outcome: Outcome
    if failed:
        outcome = "fail"
    elif comparison == "non-inferior":
        outcome = "pass"
    else:
        outcome = _INCONCLUSIVE[config.inconclusive]
        reasons.append(
            f"the {pooled.images} images cannot tell (an equally good candidate is shown "
            f"non-inferior {the_plan.power:.0%} of the time; about {the_plan.images_needed} "
            f"would give {PLAN_POWER:.0%}): gate.inconclusive is {config.inconclusive}")
    word = {"pass": "PASS", "review": "REVIEW", "fail": "FAIL"}[outcome]
    return PairedGateResult(
        passed=outcome != "fail",
        metric=config.metric,
        value=value,
        minimum=config.min,
        production=prod,
        max_regression=config.max_regression,
        reason=f"{word}: " + "; ".join(reasons),
        outcome=outcome,
        comparison=comparison,
        difference=diff,
        verdict=compare_words(diff, config.max_regression),
        worse_classes=worse,
        class_max_regression=config.class_max_regression,
        sets=verdicts,
        plan=the_plan,
    )
