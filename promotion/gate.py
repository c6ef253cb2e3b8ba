"""The quality gate: is the candidate good enough to propose? A pure function.

Two checks, both stated in plain words in the result: an absolute floor
(`gate.min`) and a regression bound against the model in production
(`gate.max_regression`). With no production model the second check is
skipped and says so, rather than passing silently.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GateMetric = Literal["map50", "map"]


class GateConfig(BaseModel):
    """The `gate:` section of `mlops.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: GateMetric = "map50"
    min: float = Field(default=0.5, ge=0.0, le=1.0)
    max_regression: float = Field(default=0.01, ge=0.0, le=1.0)


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
