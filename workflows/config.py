"""`mlops.yaml`: a model repo's configuration, checked once at the boundary.

The file becomes one frozen pydantic model at load time; nothing deeper ever
sees a raw dict. Errors name the file, the field and what was expected, and
never show a traceback (the CLI prints `ConfigError` as one message).
"""

import pathlib
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contracts.names import valid_model_name
from promotion.decision.gate import GateConfig
from workflows.errors import ConfigError
from workflows.resources import ResourceTemplate, apply_overrides, load_template

CONFIG_FILE = "mlops.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobSpec(_Strict):
    """A training job: a resource template plus overrides."""

    template: str
    overrides: dict[str, Any] = Field(default_factory=dict)


class TrainingConfig(_Strict):
    """How to train: the user's own command and the two jobs."""

    command: list[str] = Field(min_length=1)
    smoke: JobSpec = JobSpec(template="training-small")
    full: JobSpec = JobSpec(template="training-medium")
    # `production`: the full job starts from the production model's weights (`--init-from
    # DIR` appended to the command; from scratch while nothing is in production).
    init_from: Literal["production"] | None = None


class EvaluationConfig(_Strict):
    """Where the COCO ground truth and the detections (in the output) are.

    `annotations` is a file in the repo; with `data:` pins it may be left out, and the
    evaluate step reads the val annotations prepared from the pin instead.
    """

    annotations: str = ""
    predictions: str = "bbox.json"


class SnapshotConfig(_Strict):
    """A scheduled `mlops data snapshot` of the team's storage (a rendered CronWorkflow):
    a new pin commit only when the data changed, so git stays the one trigger."""

    source: str = Field(min_length=1)  # a directory on the data PVC, or s3://BUCKET/PREFIX
    schedule: str = "0 3 * * 1"  # cron, in the CronWorkflow's time zone (UTC by default)
    name: str = ""  # the pin's name prefix (default: the model); the ISO week is appended


class DataConfig(_Strict):
    """The dataset pins (lock files in the repo, `mlops data snapshot`) each role reads.

    Each role names a lock file and takes the split of the same name from it (`train`
    the lock's `train` split, ...); one lock may serve several roles. `labels` is the
    model's label list: a category outside it is refused at prepare-data.
    """

    train: str = Field(min_length=1)
    val: str = Field(min_length=1)
    holdout: str | None = None
    labels: list[str] | None = None
    snapshot: SnapshotConfig | None = None

    def roles(self) -> dict[str, str]:
        """{role: lock file} for the roles this repo uses."""
        out = {"train": self.train, "val": self.val}
        if self.holdout:
            out["holdout"] = self.holdout
        return out


class ServingConfig(_Strict):
    """How candidates are served."""

    replicas: int = Field(default=1, ge=1)
    image: str = "registry.example.com/mlops/paddle-serve:0.1.0"
    port: int = Field(default=8080, ge=1, le=65535)


class GitOpsConfig(_Strict):
    """Where the serving manifests are proposed."""

    repo: str = ""
    branch: str = "main"
    forge: str = "local"


class PromotionConfig(_Strict):
    """How a candidate that passed the gate reaches production."""

    approval: Literal["pr", "auto"] = "pr"
    gitops: GitOpsConfig = GitOpsConfig()
    # The canary policy is validated by the promotion room's own model when
    # the controller loads it; here it is carried as given.
    canary: dict[str, Any] = Field(default_factory=dict)


class ModelRepoConfig(_Strict):
    """The whole `mlops.yaml`."""

    model: str  # contracts.names: the one rule every derived name fits

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        return valid_model_name(value)  # contracts.names: one rule for every room
    training: TrainingConfig
    evaluation: EvaluationConfig
    data: DataConfig | None = None
    gate: GateConfig = GateConfig()
    serving: ServingConfig = ServingConfig()
    promotion: PromotionConfig = PromotionConfig()


class LoadedConfig(BaseModel):
    """A parsed config with where it came from and its resolved jobs."""

    model_config = ConfigDict(frozen=True)

    path: pathlib.Path
    repo_dir: pathlib.Path
    config: ModelRepoConfig
    smoke: ResourceTemplate
    full: ResourceTemplate


def _describe(exc: ValidationError, path: pathlib.Path) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        if kind == "missing":
            msg = "required field is missing"
        elif kind == "extra_forbidden":
            msg = "unknown field (check the spelling)"
        else:
            msg = err["msg"]
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def load_config(repo: str | pathlib.Path) -> LoadedConfig:
    """Load `mlops.yaml` from a model repo directory (or the file itself)."""
    path = pathlib.Path(repo)
    if path.is_dir():
        path = path / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: not found; a model repo needs an {CONFIG_FILE}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        config = ModelRepoConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from exc
    if config.data is None and not config.evaluation.annotations:
        raise ConfigError(f"{path}: invalid configuration\n  evaluation.annotations: required "
                          "without data pins (name the COCO ground truth, or add a data: section)")
    try:
        smoke = apply_overrides(
            load_template(config.training.smoke.template),
            config.training.smoke.overrides,
            where="training.smoke.overrides",
        )
        full = apply_overrides(
            load_template(config.training.full.template),
            config.training.full.overrides,
            where="training.full.overrides",
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return LoadedConfig(
        path=path.resolve(), repo_dir=path.resolve().parent, config=config, smoke=smoke, full=full
    )
