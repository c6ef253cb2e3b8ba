"""Cluster-side settings of the pipeline: images, secrets, storage, limits.

`mlops.yaml` says what the model repo needs (training command, jobs, gate);
these settings say how one platform runs it (which registry, which Secret
holds the push credentials, which artifact repository, which bot identity
writes back to git). They are separate because one platform team serves
many model repos with the same settings. Defaults render a complete,
valid set of manifests; a platform overrides them with a YAML file
(`mlops workflows render --settings FILE`), checked once here.
"""

import pathlib
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serving.manifests import DEFAULT_MODELS_CLAIM
from workflows.errors import ConfigError

_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"


class StepResources(BaseModel):
    """A step container's CPU and memory: requests (what the scheduler and a namespace's
    ResourceQuota count) and limits (a quota on `limits.*` needs them on every container)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str = Field(pattern=_QUANTITY)
    memory: str = Field(pattern=_QUANTITY)
    cpu_limit: str = Field(pattern=_QUANTITY)
    memory_limit: str = Field(pattern=_QUANTITY)

    def manifest(self) -> dict[str, dict[str, str]]:
        """As a container's `resources`."""
        return {"requests": {"cpu": self.cpu, "memory": self.memory},
                "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit}}


#: Every step container's resources by template name; `default` for the others. What a
#: setting names is merged over these (`step_resources: {evaluate: {...}}` keeps the rest).
DEFAULT_STEP_RESOURCES: dict[str, StepResources] = {
    "default": StepResources(cpu="250m", memory="512Mi", cpu_limit="1", memory_limit="1Gi"),
    "checkout": StepResources(cpu="100m", memory="256Mi", cpu_limit="500m", memory_limit="512Mi"),
    # rootless BuildKit: unpacking the base and pip in the model repo's RUN steps
    "build-image": StepResources(cpu="1", memory="2Gi", cpu_limit="2", memory_limit="8Gi"),
    "push-image": StepResources(cpu="250m", memory="256Mi", cpu_limit="1", memory_limit="1Gi"),
    # fetch, hash and decode-check every pinned image
    "prepare-data": StepResources(cpu="500m", memory="1Gi", cpu_limit="2", memory_limit="4Gi"),
    # Paddle inference of the candidate and production on the val and holdout images
    "evaluate": StepResources(cpu="1", memory="2Gi", cpu_limit="2", memory_limit="4Gi"),
    "gate": StepResources(cpu="250m", memory="1Gi", cpu_limit="1", memory_limit="2Gi"),
}


class PipelineSettings(BaseModel):
    """How the WorkflowTemplate, the trigger and the RBAC are rendered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="mlops", pattern=_NAME)
    # Step pods run as `service_account` with no API token mounted; Argo's executor
    # (init/wait containers) reports results as `executor_service_account`; only the
    # PaddleJob resource templates' executor (argoexec running kubectl) runs as
    # `paddlejob_service_account`, which may apply PaddleJobs (workflows/rbac.py).
    service_account: str = Field(default="mlops-pipeline", pattern=_NAME)
    executor_service_account: str = Field(default="mlops-executor", pattern=_NAME)
    paddlejob_service_account: str = Field(default="mlops-paddlejob", pattern=_NAME)
    # Images. The tool image holds this package (`mlops step ...`); the
    # training image is built per commit from the model repo's Dockerfile.
    tool_image: str = "registry.example.com/mlops/mlops:0.1.0"
    git_image: str = "alpine/git:v2.49.1"
    buildkit_image: str = "moby/buildkit:v0.23.2-rootless"
    image_repository: str = ""  # default: registry.example.com/mlops/<model>-train
    # A kubernetes.io/dockerconfigjson Secret with push rights on the registry.
    registry_secret: str = Field(default="mlops-registry", pattern=_NAME)
    # Argo's artifact repository (S3-compatible): a ConfigMap and key holding
    # the `s3:` block, as in Argo's "artifact repository ref" feature.
    artifact_repository_configmap: str = Field(default="artifact-repositories", pattern=_NAME)
    artifact_repository_key: str = "mlops-s3"
    # Shared workspace of one run (checkout, training output, checkpoints).
    # ReadWriteMany because PaddleJob workers on several nodes write to it.
    workspace_size: str = "20Gi"
    workspace_storage_class: str | None = None
    # The models volume serving reads from (`serving.manifests`, read-only
    # there); the pipeline's publish step writes `<model>/<version>` into it.
    models_claim: str = Field(default=DEFAULT_MODELS_CLAIM, pattern=_NAME)
    # Dataset pins (`mlops.yaml` data:). prepare-data reads the pinned files from the
    # lock's source: a directory on `data_claim` (a PVC holding the team's datasets,
    # mounted read-only at `data_mount` in prepare-data and the snapshot CronWorkflow),
    # or S3, with credentials from `data_secret` (keys `access-key-id`,
    # `secret-access-key`) as boto3's env, never in argv. The content-addressed cache is
    # on `data_cache_claim` when set (kept between runs), else in the run's workspace.
    data_claim: str | None = Field(default=None, pattern=_NAME)
    data_mount: str = Field(default="/data", pattern=r"^/")
    data_cache_claim: str | None = Field(default=None, pattern=_NAME)
    data_secret: str = Field(default="mlops-data", pattern=_NAME)
    data_endpoint_url: str = ""  # a MinIO/OSS-style S3 endpoint; empty: AWS
    # Limits.
    workflow_deadline_seconds: int = Field(default=12 * 3600, ge=60)
    smoke_deadline_seconds: int = Field(default=30 * 60, ge=60)
    train_deadline_seconds: int = Field(default=8 * 3600, ge=60)
    step_deadline_seconds: int = Field(default=3600, ge=60)
    retry_limit: int = Field(default=3, ge=0)
    ttl_after_success_seconds: int = Field(default=24 * 3600, ge=0)
    ttl_after_failure_seconds: int = Field(default=7 * 24 * 3600, ge=0)
    run_as_user: int = Field(default=1000, ge=1)
    # Registry credentials (Secrets of type kubernetes.io/dockerconfigjson) for
    # every pod the project renders: step pods, PaddleJob workers, serving
    # Deployments, the promotion controller. Each must exist in the namespace
    # of the pod that names it.
    image_pull_secrets: list[Annotated[str, Field(pattern=_NAME)]] = Field(default_factory=list)
    # Git credentials for private repos: the model repo (checkout), the GitOps
    # repo (gate reads it, propose pushes a branch). A Secret whose key holds a
    # token; pods get it as MLOPS_GIT_TOKEN through a secretKeyRef (never argv,
    # never a log line) and git asks for it through an inline credential helper.
    # Optional in the pod: without the Secret, public repos still work.
    git_secret: str = Field(default="mlops-git", pattern=_NAME)
    git_secret_key: str = "token"
    git_username: str = "x-access-token"  # GitHub's; GitLab and Gitea accept any name with a token
    # Where that token may go (`scheme://host[:port]`, e.g. https://gitea.example.com): the
    # git servers of the model repos. The GitOps repo's server is added from the push
    # template's binding, and GitHub's for `model_forge: github`. The credential helper
    # answers no other server, and git in those steps speaks only these schemes
    # (`workflows.binding.git_scope`). A private model repo on
    # Gitea or GitLab needs its server here.
    git_hosts: list[Annotated[str, Field(pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?$")]] = \
        Field(default_factory=list)
    # Triggers.
    branch: str = "main"
    # Where the model repo lives: which push payload the Sensor reads. GitHub
    # pushes reach the GitHub event source; Gitea and GitLab the generic
    # webhook (with an `Authorization: Bearer` header: Gitea's "Authorization
    # header" field, GitLab's custom webhook headers).
    model_forge: Literal["github", "gitea", "gitlab"] = "github"
    github_secret: str = Field(default="github-webhook", pattern=_NAME)
    github_secret_key: str = "secret"
    webhook_secret: str = Field(default="mlops-webhook", pattern=_NAME)
    webhook_secret_key: str = "token"
    github_owner: str = "example-org"  # GitHub organisation or user of the model repos
    github_repository: str = ""  # repository name; default: the model's name
    github_port: int = Field(default=12000, ge=1, le=65535)
    webhook_port: int = Field(default=12001, ge=1, le=65535)
    # Token for the forge the candidate's PR is opened on (GitHub/GitLab/Gitea),
    # a Secret key exposed to `propose` as the env var the forge client reads.
    forge_secret: str = Field(default="mlops-forge", pattern=_NAME)
    forge_secret_key: str = "token"
    sensor_service_account: str = Field(default="mlops-sensor", pattern=_NAME)
    # The push Workflow's submit step renders the pushed commit's pipeline and creates it
    # (workflows/push.py): the one pod that holds a token allowed to create Workflows.
    submitter_service_account: str = Field(default="mlops-submitter", pattern=_NAME)
    # The EventSource's pods receive webhooks and call no API: an account without a token.
    eventsource_service_account: str = Field(default="mlops-eventsource", pattern=_NAME)
    eventbus: str = "default"
    # CPU and memory of every step container (requests and limits), by template name
    # (`default` for the rest): a namespace with a compute ResourceQuota and no LimitRange
    # refuses a pod without them. Argo's own init/wait containers take theirs from the
    # controller's ConfigMap (`executor.resources`, docs/cluster.md section 1).
    step_resources: dict[str, StepResources] = Field(
        default_factory=lambda: dict(DEFAULT_STEP_RESOURCES))
    # The pushed Dockerfile runs in build-image; the registry's push credential is mounted
    # only in push-image, which runs crane on the built tarball and no code of the commit.
    crane_image: str = "gcr.io/go-containerregistry/crane:v0.22.1"
    # Optional: a kubernetes.io/dockerconfigjson Secret build-image may use to pull the
    # training base image (BASE_IMAGE) from a registry that needs a login. The pushed
    # Dockerfile's RUN steps can read it: give it pull rights on the base only.
    base_pull_secret: str | None = Field(default=None, pattern=_NAME)
    # Optional: a ReadWriteMany claim for BuildKit's layer cache (one folder per model,
    # mounted at its subPath only): without it every build starts from the base image.
    build_cache_claim: str | None = Field(default=None, pattern=_NAME)

    @field_validator("step_resources", mode="before")
    @classmethod
    def _merge_resources(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {**DEFAULT_STEP_RESOURCES, **value}

    def resources_for(self, template: str) -> dict[str, dict[str, str]]:
        """The `resources` of the step container `template`."""
        chosen = self.step_resources.get(template) or self.step_resources["default"]
        return chosen.manifest()

    def git_host_origins(self) -> list[str]:
        """`git_hosts` as the credential helper compares them, GitHub's first where the
        model repos live there."""
        hosts = ["https://github.com"] if self.model_forge == "github" else []
        for host in self.git_hosts:
            scheme, _, rest = host.partition("://")
            value = f"{scheme.lower()}://{rest.lower()}"
            if value not in hosts:
                hosts.append(value)
        return hosts

    def training_image(self, model: str) -> str:
        """The repository the per-commit training image is pushed to."""
        return self.image_repository or f"registry.example.com/mlops/{model}-train"


def load_settings(path: str | pathlib.Path | None = None, **overrides: Any) -> PipelineSettings:
    """Defaults, then the YAML file (if any), then explicit overrides (CLI flags)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = pathlib.Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: settings file not found")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping of setting -> value")
        data.update(loaded)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return PipelineSettings(**data)
    except ValidationError as exc:
        where = str(path) if path else "settings"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: "
            + ("unknown setting" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        )
        raise ConfigError(f"{where}: {problems}") from exc
