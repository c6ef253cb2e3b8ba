"""What every step container of the pipeline shares: image, env, mounts, limits, retries.

The pipeline's templates (`workflows.pipeline`) and the data snapshot's CronWorkflow
(`workflows.data_snapshot`) build their containers from these: the tool container with
its path env, workspace and /tmp, the restricted security context, the retry on
infrastructure errors, the git token with where it may go, and the data source's
credentials and mounts.
"""

from collections.abc import Sequence
from typing import Any

from hera.workflows import Container, Env, RetryStrategy, SecretEnv
from hera.workflows import models as m

from cogs.pods import container_security
from gitops import git as gitcli
from workflows.pod_paths import PATH_ENV, WORKSPACE
from workflows.settings import PipelineSettings

# boto3 reads these (its environment credential provider); `datapins.sources` the endpoint.
S3_ENV = {"AWS_ACCESS_KEY_ID": "access-key-id", "AWS_SECRET_ACCESS_KEY": "secret-access-key"}

# git's own: the transports it may use, colon-separated (git(1) ENVIRONMENT). Set in
# every step that holds the git token, to the platform's schemes (`workflows.binding`).
ALLOW_PROTOCOL_ENV = "GIT_ALLOW_PROTOCOL"


def _workspace_mount() -> m.VolumeMount:
    return m.VolumeMount(name="workspace", mount_path=WORKSPACE)


def restricted() -> m.SecurityContext:
    # A read-only root: steps write only to the workspace and to /tmp (an emptyDir:
    # HOME, the outputs folder), so a compromised step cannot alter its own image.
    return m.SecurityContext.model_validate(container_security())


def infra_retry(settings: PipelineSettings) -> RetryStrategy:
    # OnError = infrastructure errors (pod evicted, node lost, image pull);
    # a step that ran and failed (exit code != 0) is not retried, and the
    # gate has no retry at all: its verdict is an output, not an error.
    return RetryStrategy(
        limit=settings.retry_limit,
        retry_policy="OnError",
        backoff=m.Backoff(duration="30s", factor=m.IntOrString(2), max_duration="30m"),
    )


def git_credentials(settings: PipelineSettings, *, helper: bool,
                     scope: dict[str, Any]) -> list[Env | SecretEnv]:
    """The git token from the settings' Secret as MLOPS_GIT_TOKEN (optional: public repos
    need none), the servers it may go to and the transports git may use there (`scope`,
    `workflows.binding.git_scope`: the platform's, never a URL a step is handed).
    `helper`: also point plain git at the credential helper through env (the checkout
    pod runs git itself; `mlops` steps go through `gitops.git`, which adds the helper on
    its own)."""
    env: list[Env | SecretEnv] = [
        SecretEnv(name=gitcli.TOKEN_ENV, secret_name=settings.git_secret,
                  secret_key=settings.git_secret_key, optional=True),
        Env(name=gitcli.USERNAME_ENV, value=settings.git_username),
        Env(name=gitcli.HOSTS_ENV, value=" ".join(scope["hosts"])),
        Env(name=ALLOW_PROTOCOL_ENV, value=":".join(scope["schemes"])),
    ]
    if helper:
        env += [Env(name=k, value=v) for k, v in gitcli.credential_config_env().items()]
    return env


def tool_env(model: str) -> list[Env]:
    """The env of an `mlops` step: the pod paths, the model, the commit and the run."""
    env = [Env(name=k, value=v) for k, v in PATH_ENV.items()]
    env += [
        Env(name="MLOPS_MODEL", value=model),
        Env(name="MLOPS_TRAINING_COMMIT", value="{{workflow.parameters.revision}}"),
        Env(name="MLOPS_WORKFLOW_ID", value="{{workflow.name}}"),
        Env(name="HOME", value="/tmp"),
    ]
    return env


def tool_container(
    name: str,
    args: list[str],
    *,
    settings: PipelineSettings,
    env: Sequence[Env | SecretEnv],
    image: str | None = None,
    command: Sequence[str] = ("mlops",),
    extra_env: Sequence[Env | SecretEnv] = (),
    extra_mounts: Sequence[m.VolumeMount] = (),
    security_context: m.SecurityContext | None = None,
    deadline: int | None = None,
    retry: bool = True,
    **fields: Any,
) -> Container:
    """A step's container template with what every step shares unless told otherwise.

    The tool image running ``mlops ARGS``, the path env (plus ``extra_env``),
    the workspace volume (plus ``extra_mounts``), the restricted security
    context, the settings' CPU and memory for ``name`` (requests and limits),
    the step deadline and retries on infrastructure errors only.
    ``fields`` go to :class:`Container` as they are (outputs, metrics, ...).
    """
    return Container(
        name=name,
        image=image or settings.tool_image,
        command=list(command),
        args=args,
        env=[*env, *extra_env],
        volume_mounts=[_workspace_mount(), m.VolumeMount(name="tmp", mount_path="/tmp"),
                       *extra_mounts],
        security_context=security_context or restricted(),
        resources=m.ResourceRequirements.model_validate(settings.resources_for(name)),
        active_deadline_seconds=settings.step_deadline_seconds if deadline is None else deadline,
        retry_strategy=infra_retry(settings) if retry else None,
        **fields,
    )


def step_args(name: str, *extra: str) -> list[str]:
    """`mlops step NAME` told where the checkout, its output and the step's outputs are."""
    return [
        "step",
        name,
        "--repo",
        "$(MLOPS_REPO)",
        "--out",
        "$(MLOPS_OUT)",
        "--outputs",
        "$(MLOPS_OUTPUTS)",
        *extra,
    ]


def data_source_env(settings: PipelineSettings) -> list[Env | SecretEnv]:
    """S3 credentials from the data Secret (optional: a PVC source needs none) and the
    endpoint, as env: boto3 reads them there, so no key is ever in argv."""
    env: list[Env | SecretEnv] = [
        SecretEnv(name=name, secret_name=settings.data_secret, secret_key=key, optional=True)
        for name, key in S3_ENV.items()
    ]
    if settings.data_endpoint_url:
        env.append(Env(name="MLOPS_DATA_ENDPOINT_URL", value=settings.data_endpoint_url))
    return env


def data_mounts(settings: PipelineSettings) -> list[m.VolumeMount]:
    """The datasets' PVC, read-only, where the snapshots found it (`data_mount`)."""
    if not settings.data_claim:
        return []
    return [m.VolumeMount(name="data", mount_path=settings.data_mount, read_only=True)]
