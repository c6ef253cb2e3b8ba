"""The canary policy: what a model's `mlops.yaml` says about `promotion.canary`.

Checked once at the boundary: everything below `decide()` sees a frozen, valid
`CanaryPolicy`, never a raw dict. Durations are seconds or Prometheus-style strings
(`30s`, `1m30s`). Why these defaults: docs/inside-promotion.md; `alpha`: docs/canary.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from promotion.errors import PolicyError
from promotion.metrics.presets import PRESET_NAMES, QueryPreset

__all__ = ["AnswersCheck", "Budget", "CanaryPolicy", "ClassMixCheck", "MetricsSpec",
           "QualityCheck", "QualitySpec", "load_policy", "parse_duration"]


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NUM = r"\d+(?:\.\d+)?"
_DURATION = re.compile(rf"^(?:(?P<h>{_NUM})h)?(?:(?P<m>{_NUM})m)?(?:(?P<s>{_NUM})s)?$")
#: What a duration field accepts, for its JSON Schema (the validators below parse it):
#: seconds, or a string such as `30s`, `1m30s`, `1h` (the schema's regex, unnamed groups).
DurationInput = (Annotated[float, Field(gt=0)]
                 | Annotated[str, Field(min_length=2, pattern=r"^(\d+(\.\d+)?h)?(\d+(\.\d+)?m)?"
                                                              r"(\d+(\.\d+)?s)?$")])


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as `30s`, `1m`, `1h30m`."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30s'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value.strip())
        if not value.strip() or match is None:
            raise ValueError(f"bad duration {value!r}: write seconds or e.g. '30s', '1m', '1h30m'")
        seconds = sum(float(match.group(k) or 0) * f for k, f in (("h", 3600), ("m", 60), ("s", 1)))
    else:
        raise ValueError("a duration is a number of seconds or a string like '30s'")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Frozen):
    """How long a condition may last before the policy acts (`action`).

    The budget is spent when either limit is reached: `max_intervals`
    consecutive analysis intervals, or `max_seconds` since the condition began.
    """

    max_intervals: int | None = Field(default=20, ge=1)
    max_seconds: float | None = None
    action: Literal["pause", "rollback"] = "pause"

    @field_validator("max_seconds", mode="before",
                     json_schema_input_type=DurationInput | None)
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.max_intervals is None and self.max_seconds is None:
            raise ValueError("a budget needs max_intervals or max_seconds")
        return self


class MetricsSpec(_Frozen):
    """Where the observations come from: a preset name, or custom query templates.

    `queries` (for `preset: custom`) has the keys `requests`, `errors` and
    optionally `latency` and `latency_unit`, written like the preset files in
    `promotion/metrics/presets/`.
    """

    preset: str | None = None
    """A preset name, `custom`, or unset: the runtime's router view, what clients see
    (`haproxy` on the local platform, `istio` in a cluster; `mlops controller run`
    picks it from where it reads readiness). `model` reads only the server's own
    histograms, blind to the time a request waits before the server reads it."""
    queries: dict[str, str] | None = None
    namespace: str | None = None
    """The models' namespace in the queries' `$namespace`. Unset (the norm): the GitOps
    repo's namespace (`mlops-gitops.yaml`), where Argo CD deploys the models; a
    different value matches no series, and `mlops gitops lint` refuses it. A
    Kubernetes namespace name (RFC 1123 label): it becomes a PromQL label value, and
    a quote in it could rewrite the query; the platform's to set
    (`promotion.gitrepo.platform_policy`)."""

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not _NAMESPACE.fullmatch(value):
            raise ValueError(f"namespace {value!r}: a Kubernetes namespace name (lowercase "
                             "letters, digits and '-', at most 63, starting and ending with "
                             "a letter or digit)")
        return value

    @model_validator(mode="after")
    def _known(self) -> MetricsSpec:
        if self.preset == "custom":
            if not self.queries:
                raise ValueError("preset 'custom' needs 'queries' (requests, errors, latency)")
            QueryPreset.from_mapping("custom", self.queries)
        elif self.preset is None:
            if self.queries:
                raise ValueError("'queries' is only read with preset: custom")
        elif self.preset not in PRESET_NAMES:
            raise ValueError(
                f"unknown metrics preset {self.preset!r}; choose one of "
                f"{', '.join(sorted(PRESET_NAMES))} or 'custom'"
            )
        elif self.queries:
            raise ValueError("'queries' is only read with preset: custom")
        return self


class QualityCheck(_Frozen):
    """One model-quality check: the canary's share of *poor* answers vs stable's.

    An answer is poor when the signal's value is at most `at_most` (a bucket
    bound of the signal's histogram, e.g. 0 confident detections). One image is
    one trial. The check fails when the sequential test says the canary's poor
    share is above `min_ratio` x stable's *and* the canary's share is at least
    `min_difference` above stable's: the harm it is there to see. Both margins
    let a retrain's harmless drift pass.

    Default (`no_detections`): harm is "1.5x as many images answered with nothing
    a user would draw, and at least 2 points more" (a model going blind on part
    of the traffic: the YOLOv3 example's skew, 1.5 % -> 11 %). The former second
    default, `low_confidence` (best score <= 0.5), was the same event at the
    model's usual `draw_threshold` of 0.5, so it split the budget over one
    question twice; the answers' distribution (`DistributionCheck`) judges the
    scores now.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    signal: str
    at_most: float
    what: str = ""
    """How a poor answer reads in a verdict ("images with no detection")."""
    min_ratio: float = Field(default=2.0, ge=1)
    min_difference: float = Field(default=0.03, ge=0, lt=1)


DEFAULT_QUALITY_CHECKS = (
    QualityCheck(name="no_detections", signal="detections_per_image", at_most=0,
                 what="images answered with no detection"),
)


class DistributionCheck(_Frozen):
    """The answers' distribution, canary vs stable (`promotion/decision/distribution.py`):
    per image, the confident detections and the best score, compared at every bound
    in `bounds` (bucket bounds of the server's histograms) as "the canary's share of
    images at or below it is beyond `min_ratio` x stable's and `min_difference`
    above it", the bounds judged together as one sequential two-sample test.

    Harm it is there to see: answers systematically poorer than stable's, 1.25x as many
    images at or below some bound and 5 points more, e.g. every score one logit lower
    (boxes right, 21 % fewer confident boxes per image: 23 points more images at or
    below a best score of 0.9), which moves every quantile and no single "poor answer"
    share by much. A retrain's
    calibration drift of a fifth of a logit moves these shares by about 1.1x and
    passes. It judges one direction, fewer and less confident answers; a canary
    that finds *more* boxes than stable is the class mix's and the paired answers'."""

    bounds: dict[str, tuple[float, ...]] = {
        "detections_per_image": (1.0, 2.0, 3.0, 5.0),
        "top_score": (0.6, 0.7, 0.8, 0.9, 0.95),
    }
    """Where the shares are compared. They start above "nothing confident" (no detection;
    a best score at most the usual `draw_threshold` of 0.5, the same event): that share is
    the `no_detections` check's, with its own, wider margins."""
    min_ratio: float = Field(default=1.25, ge=1)
    min_difference: float = Field(default=0.05, ge=0, lt=1)
    """In share points of images. The bounds sit in the body of the distribution, where
    the shares are large (a third of the images at or below one confident box), so a
    few points there are a retrain's drift: 1.5x as many images with nothing confident
    (8 % -> 12 %) moves the share at or below one box by about 4 points."""


class ClassMixCheck(_Frozen):
    """The classes the canary names against stable's (`promotion/decision/class_mix.py`),
    per image: for each class, the share of images whose answer names it. A label map
    off by one, two labels swapped, a class that vanished.

    Two margins, as a sequential test with an indifference zone has them. Rollback: the
    test shows a class's share beyond `min_ratio` x the other version's *and* moved by
    `min_difference` points. Harm it is there to see: a class seen in 1.2x (or 1/1.2) as
    many images as stable sees it; a 5 % <-> 3 % swap of two classes' boxes among ten
    moves their image shares about 1.6x, a vanished class infinitely; the difference
    margin only keeps the rarest classes' noise out (half a point of images), it does
    not hide a class under 3 % the way the old 3 points of detections did. Passing a
    step: every class's share shown within `pass_ratio` x or `pass_difference` points of
    stable's, so a canary with a class off by more than both passes a step with
    probability at most 1 - `quality.pass_confidence`. Between the two margins a canary
    may go either way (the rollback test goes on watching it); a tighter pass margin
    would hold every canary for minutes more: a class in half the images needs about 700
    canary images to be shown within 1.2x, 120 within 1.5x, and a class neither version
    names (`other`) about 700 to be shown under 1 point of images, 200 under 3. What it
    sees at what traffic is in docs/canary.md."""

    min_ratio: float = Field(default=1.2, ge=1)
    min_difference: float = Field(default=0.005, ge=0, lt=1)
    pass_ratio: float = Field(default=1.5, ge=1)
    """At least `min_ratio` (a smaller value is raised to it)."""
    pass_difference: float = Field(default=0.03, ge=0, lt=1)
    """At least `min_difference` (a smaller value is raised to it)."""

    @model_validator(mode="after")
    def _margins(self) -> ClassMixCheck:
        # A pass margin inside the rollback margin would pass canaries the test may still
        # roll back: the indifference zone would be negative. Widen it, do not refuse.
        if self.pass_ratio < self.min_ratio or self.pass_difference < self.min_difference:
            return self.model_copy(update={
                "pass_ratio": max(self.pass_ratio, self.min_ratio),
                "pass_difference": max(self.pass_difference, self.min_difference)})
        return self


class AnswersCheck(_Frozen):
    """The paired answers check (`promotion/decision/answers.py`): the stable's probe images
    answered by both versions, pinned by a header through the router. Boxes are matched
    (IoU >= `min_iou`, both scoring >= `min_score`); per image and stable class, the image
    is *renamed* when more than half of its matched boxes of that class carry another
    label. For
    each stable class (and all images together), the share of renamed images gets an
    exact binomial test against `max_share`, Holm over the classes, at the check's share
    of the policy's `alpha`: a rollback when any is above it.

    Harm it is there to see: a class whose images are mostly named otherwise (a rotated
    map or two swapped labels rename 100 % of their images). Two good models disagree
    on a confusable pair for maybe a fifth of its images; `max_share` 0.35 lets that
    pass. Units are images, not boxes: a crowd image of one class is one trial."""

    max_share: float = Field(default=0.35, gt=0, lt=1)
    """Renamed images of one class a harmless retrain may reach."""
    min_iou: float = Field(default=0.5, gt=0, le=1)
    min_score: float = Field(default=0.5, ge=0, le=1)
    """Boxes below it are left out (PaddleDetection's usual `draw_threshold`)."""
    min_matched: int = Field(default=5, ge=1)
    """Fewer images with a matched box: no verdict (skipped, never a pass on silence)."""

    @model_validator(mode="before")
    @classmethod
    def _gone(cls, data: Any) -> Any:
        if isinstance(data, dict) and "confidence" in data:
            raise ValueError("answers.confidence is gone: the answers check spends its share "
                             "of promotion.canary.alpha, the canary's one false-rollback rate "
                             "(docs/canary.md)")
        return data


class QualitySpec(_Frozen):
    """What the model answers, canary vs stable (a model that answers 200, fast and
    wrong: training/serving skew, a label map off by one, live data unlike the
    val set). Read from the model server's own metrics in every preset. Every check
    here spends its share of the policy's one `alpha` (`stats.ALPHA_SHARES`)."""

    checks: tuple[QualityCheck, ...] = DEFAULT_QUALITY_CHECKS
    min_answers: int | None = Field(default=None, ge=1)
    """Canary answers a step needs on each signal before its check can pass
    (default: the policy's `min_requests`)."""
    pass_confidence: float | None = Field(default=0.95, gt=0.5, lt=1)
    """A check passes a step only when the canary's answers are shown within its
    margins by an anytime-valid confidence sequence at this level
    (`stats.confidence_sequence`, checked after every window, so a canary beyond
    the margins passes a step's check with probability at most 1 - this): the
    canary's share of poor answers at most max(min_ratio x stable's, stable's +
    min_difference), with stable's share taken at its lower bound (the two bounds
    share the miss rate, `stats.pass_levels`). Until then the step waits for more answers while the
    test goes on. `null`: pass on `min_answers` alone, which promoted a canary 3x
    as often poor as stable (24 % vs 8 % of images) in a third of simulated
    rollouts (`benchmarks/canary_quality.py` compares both)."""

    distribution: DistributionCheck | None = DistributionCheck()
    """The answers' distribution (on by default; `null`: off)."""
    class_mix: ClassMixCheck | None = ClassMixCheck()
    """The class-mix check (on by default; `null`: off)."""
    answers: AnswersCheck | None = AnswersCheck()
    """The paired answers check (on by default; `null`: off)."""

    @model_validator(mode="before")
    @classmethod
    def _no_own_alpha(cls, data: Any) -> Any:
        if isinstance(data, dict) and "alpha" in data:
            raise ValueError("quality.alpha is gone: the canary has one false-rollback rate, "
                             "promotion.canary.alpha, shared by every check (docs/canary.md)")
        return data

    @model_validator(mode="after")
    def _unique(self) -> QualitySpec:
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError(f"quality check names repeat: {names}")
        return self


class CanaryPolicy(_Frozen):
    """Steps, interval, statistics and limits of one model's canary."""

    steps: tuple[int, ...] = Field(
        default=(10, 25, 50, 100),
        # what `_steps` checks, said to an editor too (the order is `_steps`'s alone)
        json_schema_extra={"items": {"type": "integer", "minimum": 1, "maximum": 100},
                           "minItems": 1})
    interval: float = 60.0  # Flagger's default; >= 2 scrape intervals of a 30s Prometheus
    min_requests: int = Field(default=200, ge=1)
    alpha: float = Field(default=0.01, gt=0, lt=0.5)
    max_error_rate: float = Field(default=0.01, gt=0, lt=1)
    max_p99_ms: float = Field(default=500.0, gt=0)
    max_latency_ratio: float = Field(default=1.5, gt=1)
    min_latency_difference_ms: float = Field(default=5.0, ge=0)
    min_latency_samples: int = Field(default=100, ge=1)
    traffic_tolerance: float = Field(default=5.0, gt=0, lt=100)
    no_traffic_grace: float = 60.0
    ready_timeout: float = 900.0
    """How long a merged candidate may take to be deployed and ready (Argo CD's poll,
    image pull, start-up) before it is rolled back; analysis starts only when it is."""
    mode: Literal["auto", "shadow"] = "auto"
    """`shadow`: analyse every window and record the verdicts (log, report, /metrics)
    but move no weight: people step the canary (by hand in the VirtualService,
    `mlops canary promote|abort`). To try a new analysis before trusting it."""
    approval: Literal["auto", "step"] = "auto"
    """`step`: a step up that passed the analysis waits for `mlops canary approve`;
    the analysis goes on meanwhile, so a canary that turns bad is still rolled back."""
    insufficient_evidence: Budget = Budget(max_intervals=20, action="pause")
    faults: Budget = Budget(max_intervals=10, action="pause")
    metrics: MetricsSpec = MetricsSpec()
    quality: QualitySpec = QualitySpec()

    @field_validator("interval", "no_traffic_grace", "ready_timeout", mode="before",
                     json_schema_input_type=DurationInput)
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: tuple[int, ...]) -> tuple[int, ...]:
        if not steps:
            raise ValueError("at least one step is needed")
        if any(not 0 < s <= 100 for s in steps):
            raise ValueError("each step is a weight in percent, 1..100")
        if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
            raise ValueError("steps must increase strictly")
        if steps[-1] != 100:
            raise ValueError("the last step must be 100 (the candidate takes all traffic)")
        return steps

    def next_step(self, weight: int) -> int | None:
        """The weight after `weight`, or None when `weight` is the last step."""
        for step in self.steps:
            if step > weight:
                return step
        return None


def load_policy(data: Any, source: str = "promotion.canary") -> CanaryPolicy:
    """Validate a mapping into a policy; errors name `source` and the field."""
    if data is None:
        data = {}
    try:
        return CanaryPolicy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{source}.{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise PolicyError(problems) from None
