"""The pipeline as one Hera WorkflowTemplate: the single definition of the DAG.

One builder per step template (`_STEP_TEMPLATES`), the DAG over them, and the
WorkflowTemplate that holds both. Argo runs the rendered object; the local runner
(`local.argo.runner`) walks the same one, guided by what each template carries for it:
the `$(MLOPS_*)` paths and the `mlops.dev/local` annotation (docs/pipeline-internals.md).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from hera.workflows import (
    DAG,
    Artifact,
    Container,
    Counter,
    Env,
    Gauge,
    Label,
    NoneArchiveStrategy,
    Parameter,
    Resource,
    SecretEnv,
    Task,
    WorkflowTemplate,
)
from hera.workflows import models as m

from cogs.pods import pod_security
from contracts.names import SHA_CHARS
from serving.manifests import MODELS_MOUNT
from workflows.binding import git_scope
from workflows.config import LoadedConfig
from workflows.jobplan import full_job, plan_annotations, smoke_needed
from workflows.paddlejob import paddlejob_manifest, warm_start
from workflows.pod_paths import (
    DATA_CACHE_ENV,
    DATA_CACHE_MOUNT,
    LOCAL_ANNOTATION,
    MODELS_ENV,
    PATH_ENV,
    WORKSPACE,
)
from workflows.resources import ResourceTemplate
from workflows.settings import PipelineSettings
from workflows.step_container import (
    data_mounts,
    data_source_env,
    git_credentials,
    infra_retry,
    step_args,
    tool_container,
    tool_env,
)

# `mlops step propose --outputs`: on the workspace, so the exit handler's report reads it.
PROPOSAL_OUTPUTS = "$(MLOPS_OUT)/full/proposal"
PROPOSAL_OUTPUTS_PATH = f"{WORKSPACE}/out/full/proposal"
ENTRYPOINT = "pipeline"
BUILD_TASK = "build-image"
EXIT_HANDLER = "record-outcome"
# What the Argo UI shows as the workflow's outputs (the entrypoint DAG's outputs):
# name -> the task output it reads. A task that did not run (propose after a failed
# gate) leaves the default: Argo's getTemplateOutputsFromScope uses
# `valueFrom.default` when the reference cannot be resolved (operator.go, v3.7.9).
WORKFLOW_OUTPUTS = {
    "map50": "tasks.evaluate.outputs.parameters.map50",
    "gate-passed": "tasks.gate.outputs.parameters.passed",
    "gate-outcome": "tasks.gate.outputs.parameters.outcome",
    "gate-reason": "tasks.gate.outputs.parameters.reason",
    "version": "tasks.propose.outputs.parameters.version",
    "pr-url": "tasks.propose.outputs.parameters.pr-url",
}
REPORT_PATH = f"{WORKSPACE}/out/report.md"
# The exit handler's link to the run's PR (or the GitOps repo's PRs), a global output.
PR_LINK_OUTPUT = "pr-url"
PR_LINK_PATH = f"{WORKSPACE}/out/pr-link"
# Workflow parameters: what a trigger passes for one commit.
PARAMETERS = ("repo", "revision", "ref", "gitops-repo")

# Argo Workflows 3.6+ emits custom metrics through OpenTelemetry and prefixes every
# name with `argo_workflows_` (docs/metrics.md "The metric names emitted by this
# mechanism are prefixed with `argo_workflows_`", v3.7.9; docs/upgrading.md 3.5 -> 3.6).
# Templates declare the bare name; Prometheus stores `ARGO_METRIC_PREFIX + name`,
# and that is the name the local runner writes and the docs query.
ARGO_METRIC_PREFIX = "argo_workflows_"

# The env var each forge client reads its API token from (gitops/forges/*).
FORGE_TOKEN_ENV = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}

# Clone the pushed commit into the workspace; fresh on every (re)try. The URL and the
# sha come from the webhook's payload: `--` keeps a URL from being read as an option
# (`--upload-pack=...`), and the revision must be a commit id. The training jobs' output
# folders are made here, as the steps' user: the PaddleJob mounts them as subPaths
# (`workflows.paddlejob`), and a missing subPath is made by the kubelet, as root, with the
# volume root's mode (kubernetes pkg/kubelet/kubelet_pods.go makeMounts, SafeMakeDir).
CHECKOUT_SCRIPT = (
    "set -eu\n"
    'case "$REVISION" in ""|*[!0-9a-f]*) echo "revision $REVISION: not a commit id" >&2; '
    "exit 2;; esac\n"
    'rm -rf "$MLOPS_REPO" "$MLOPS_OUT"\n'
    'mkdir -p "$MLOPS_OUT/smoke" "$MLOPS_OUT/full" "$MLOPS_OUTPUTS"\n'
    'git clone --no-checkout -- "$REPO_URL" "$MLOPS_REPO"\n'
    'git -C "$MLOPS_REPO" checkout --detach "$REVISION"\n'
    'git -C "$MLOPS_REPO" rev-parse HEAD > "$MLOPS_OUTPUTS/revision"\n'
)
# Build the training image for the commit from the checkout, into a docker-format tarball on
# the workspace: no registry credential in this container, whose Dockerfile is the pusher's.
# BuildKit's layer cache, where a claim is configured, is one folder of this model's (its
# subPath), exported beside the one read and swapped in after.
BUILD_SCRIPT = (
    "set -eu\n"
    'mkdir -p "$MLOPS_OUTPUTS" "$(dirname "$IMAGE_TAR")"\n'
    'if [ -d "$BUILD_CACHE" ]; then\n'
    '  if [ -f "$BUILD_CACHE/current/index.json" ]; then\n'
    '    set -- --import-cache type=local,src="$BUILD_CACHE/current"; fi\n'
    '  set -- "$@" --export-cache type=local,dest="$BUILD_CACHE/next",mode=max\n'
    "fi\n"
    "buildctl-daemonless.sh build --frontend dockerfile.v0 "
    '--local context="$MLOPS_REPO" --local dockerfile="$MLOPS_REPO" '
    '--opt build-arg:BASE_IMAGE="$BASE_IMAGE" '
    '--output type=docker,name="$IMAGE",dest="$IMAGE_TAR" "$@"\n'
    'if [ -d "$BUILD_CACHE/next" ]; then\n'
    '  rm -rf "$BUILD_CACHE/current" && mv "$BUILD_CACHE/next" "$BUILD_CACHE/current"; fi\n'
)
# Where build-image leaves the image and push-image reads it (on the run's workspace).
IMAGE_TAR = f"{WORKSPACE}/out/image/image.tar"
BUILD_CACHE_MOUNT = "/build-cache"
REGISTRY_AUTH = "/var/run/mlops/registry"  # push-image's DOCKER_CONFIG (the push credential)
BASE_PULL_AUTH = "/var/run/mlops/base-pull"  # build-image's, when `base_pull_secret` is set
# crane pushes the tarball and writes the pushed reference, `<repository>@sha256:...`
# (go-containerregistry cmd/crane/doc/crane_push.md: `--image-refs`); Argo trims the one
# trailing newline of an output file (workflow/executor/executor.go SaveParameters, v3.7.9).
# No shell: the kubelet expands $(VAR) from the container's env; `crane` is found on the
# image's PATH (ko, which builds it, adds /ko-app, where the binary is, to PATH).
PUSH_ARGS = ["push", "$(IMAGE_TAR)", "$(IMAGE)", "--image-refs", "$(MLOPS_OUTPUTS)/image"]


def workflow_name(model: str, sha: str) -> str:
    """Deterministic Workflow name for a commit: duplicate deliveries collide."""
    return f"{model}-{sha[:SHA_CHARS].lower()}"


def _out(path: str) -> str:
    return f"{PATH_ENV['MLOPS_OUTPUTS']}/{path}"


def _models_read_only() -> m.VolumeMount:
    """The models volume where serving reads it, read-only: the steps that read production's
    export or record through its `file://` model-uri (find-production, evaluate, gate,
    propose)."""
    return m.VolumeMount(name="models", mount_path=MODELS_MOUNT, read_only=True)


def _training_template(
    loaded: LoadedConfig,
    job: ResourceTemplate,
    name: str,
    which: str,
    deadline: int,
    settings: PipelineSettings,
) -> Resource:
    manifest = paddlejob_manifest(loaded, job, which, settings, deadline=deadline)
    return Resource(
        name=name,
        # `apply` with a fixed name is idempotent: a retried step adopts the
        # job it already created instead of failing on AlreadyExists.
        action="apply",
        manifest=yaml.safe_dump(manifest, sort_keys=False),
        success_condition="status.phase == Completed",
        failure_condition="status.phase == Failed",
        # Argo adds the Workflow as owner, so deleting the workflow (or its
        # TTL expiring) garbage-collects the PaddleJob and its pods. Writing
        # the ownerReference by hand as well would duplicate it.
        set_owner_reference=True,
        inputs=[Parameter(name="image"),
                *([Parameter(name="init-from")] if warm_start(loaded, which) else [])],
        outputs=[
            Parameter(name="job", value_from=m.ValueFrom(json_path="{.metadata.name}")),
        ],
        annotations={LOCAL_ANNOTATION: "paddlejob"},
        # argoexec is this pod's main container and runs kubectl with the *executor's*
        # token: Argo mounts it over the pod's own (workflow/controller/workflowpod.go
        # newExecContainer; operator.go executeResource, v3.7.9). So the PaddleJob rights
        # go to this template's executor account; the pod's account stays the steps'
        # (no token), and every other pod's argoexec keeps the plain executor's.
        executor=m.ExecutorConfig(service_account_name=settings.paddlejob_service_account),
        active_deadline_seconds=deadline,
        retry_strategy=infra_retry(settings),
    )


def _data_volumes(loaded: LoadedConfig, settings: PipelineSettings) -> list[m.Volume]:
    """The datasets' PVC and the data cache's, when the repo has pins and settings name them."""
    if loaded.config.data is None:
        return []
    out = []
    if settings.data_claim:
        out.append(m.Volume(name="data", persistent_volume_claim=(
            m.PersistentVolumeClaimVolumeSource(claim_name=settings.data_claim, read_only=True))))
    if settings.data_cache_claim:
        out.append(m.Volume(name="data-cache", persistent_volume_claim=(
            m.PersistentVolumeClaimVolumeSource(claim_name=settings.data_cache_claim))))
    return out


@dataclass(frozen=True)
class _Render:
    """One rendering: a model repo's config under the platform's settings. What every
    step template's builder reads, and the step-container defaults they share."""

    loaded: LoadedConfig
    settings: PipelineSettings

    @property
    def model(self) -> str:
        return self.loaded.config.model

    @property
    def model_label(self) -> Label:
        return Label(key="model", value=self.model)

    def container(self, name: str, args: list[str], **options: Any) -> Container:
        """A step's container template (`tool_container`, with this model's tool env)."""
        return tool_container(name, args, settings=self.settings, env=tool_env(self.model),
                               **options)

    def git_env(self, *, helper: bool) -> list[Env | SecretEnv]:
        """The git token with where it may go (`workflows.binding`): the platform's servers."""
        return git_credentials(self.settings, helper=helper,
                                scope=git_scope(self.loaded, self.settings))

    def production_args(self, step: str) -> list[str]:
        """`mlops step STEP` told where production is: the GitOps repo and its branch."""
        return step_args(step, "--production-from-gitops", "{{workflow.parameters.gitops-repo}}",
                          "--gitops-branch", self.loaded.config.promotion.gitops.branch)

    def image(self) -> str:
        """The per-commit training image, as build-image names it and push-image pushes it."""
        return f"{self.settings.training_image(self.model)}:{{{{workflow.parameters.revision}}}}"


def _prepare_data_template(r: _Render) -> Container | None:
    """`mlops step prepare-data`: the pins fetched, verified and validated into OUT/data.

    Retried on infrastructure errors only: a bad dataset exits non-zero with the file
    and entry named, and that is not retried.
    """
    if r.loaded.config.data is None:
        return None
    settings = r.settings
    cache_mounts = [m.VolumeMount(name="data-cache", mount_path=DATA_CACHE_MOUNT)]
    return r.container(
        "prepare-data",
        step_args("prepare-data", "--cache", f"$({DATA_CACHE_ENV})"),
        extra_env=[
            Env(name=DATA_CACHE_ENV, value=DATA_CACHE_MOUNT if settings.data_cache_claim
                else f"{WORKSPACE}/data-cache"),
            *data_source_env(settings),
        ],
        extra_mounts=[*data_mounts(settings),
                      *(cache_mounts if settings.data_cache_claim else [])],
        outputs=[
            Parameter(name="digest", value_from=m.ValueFrom(path=_out("digest"))),
            Parameter(name="images", value_from=m.ValueFrom(path=_out("images"))),
        ],
    )


def _checkout_template(r: _Render) -> Container:
    """`checkout`: the pushed commit cloned into the workspace (`CHECKOUT_SCRIPT`)."""
    return r.container(
        "checkout",
        [CHECKOUT_SCRIPT],
        image=r.settings.git_image,
        command=["sh", "-c"],
        extra_env=[
            Env(name="REPO_URL", value="{{workflow.parameters.repo}}"),
            Env(name="REVISION", value="{{workflow.parameters.revision}}"),
            *r.git_env(helper=True),
        ],
        outputs=[Parameter(name="revision", value_from=m.ValueFrom(path=_out("revision")))],
        annotations={LOCAL_ANNOTATION: "checkout"},
    )


def _build_image_template(r: _Render) -> Container:
    """`build-image`: the commit's training image, built from its Dockerfile into a tarball.

    BuildKit rootless, daemonless (buildctl-daemonless.sh starts a private buildkitd as
    uid 1000 for this one build). Chosen over Kaniko: Google archived Kaniko in 2025
    (only third-party forks are maintained), while BuildKit is the maintained engine
    behind `docker build`, runs without privileges, and caches layers. Rootless BuildKit
    needs seccomp/AppArmor unconfined (user namespaces) and the no-process-sandbox flag
    inside a pod, so the pushed Dockerfile's RUN steps can see buildkitd's processes and
    files: this container gets no registry credential. It writes
    the image as a tarball on the workspace; push-image, a container of its own that runs
    no code of the commit, pushes it with the push credential. Its state (buildkitd's
    root) is under HOME, the /tmp emptyDir.
    """
    settings = r.settings
    return r.container(
        BUILD_TASK,
        [BUILD_SCRIPT],
        image=settings.buildkit_image,
        command=["sh", "-c"],
        extra_env=[
            Env(name="IMAGE", value=r.image()),
            Env(name="IMAGE_TAR", value=IMAGE_TAR),
            Env(name="BASE_IMAGE", value=r.loaded.full.image),
            Env(name="BUILD_CACHE", value=BUILD_CACHE_MOUNT),
            Env(name="BUILDKITD_FLAGS", value="--oci-worker-no-process-sandbox"),
            *([Env(name="DOCKER_CONFIG", value=BASE_PULL_AUTH)]
              if settings.base_pull_secret else []),
        ],
        extra_mounts=[
            *([m.VolumeMount(name="base-pull-auth", mount_path=BASE_PULL_AUTH,
                             read_only=True)] if settings.base_pull_secret else []),
            *([m.VolumeMount(name="build-cache", mount_path=BUILD_CACHE_MOUNT,
                             sub_path=r.model)] if settings.build_cache_claim else []),
        ],
        security_context=m.SecurityContext(
            seccomp_profile=m.SeccompProfile(type="Unconfined"),
            app_armor_profile=m.AppArmorProfile(type="Unconfined"),
            run_as_user=1000,
            run_as_group=1000,
        ),
        annotations={LOCAL_ANNOTATION: "environment-digest"},
    )


def _push_image_template(r: _Render) -> Container:
    """`push-image`: the push credential's one container.

    crane on build-image's tarball, the dockerconfigjson Secret mounted read-only as
    DOCKER_CONFIG, no shell, no code of the commit. Its output is the pushed image by
    digest, which the PaddleJobs run.
    """
    return r.container(
        "push-image",
        PUSH_ARGS,
        image=r.settings.crane_image,
        command=["crane"],
        extra_env=[
            Env(name="IMAGE", value=r.image()),
            Env(name="IMAGE_TAR", value=IMAGE_TAR),
            Env(name="DOCKER_CONFIG", value=REGISTRY_AUTH),
        ],
        extra_mounts=[m.VolumeMount(name="registry-auth", mount_path=REGISTRY_AUTH,
                                    read_only=True)],
        outputs=[Parameter(name="image", value_from=m.ValueFrom(path=_out("image")))],
        annotations={LOCAL_ANNOTATION: "registry-push"},
    )


def _smoke_train_template(r: _Render) -> Resource | None:
    """`smoke-train`: the smoke job, always one worker; none where it cannot catch anything
    (`workflows.jobplan.smoke_needed`)."""
    if not smoke_needed(r.loaded)[0]:
        return None
    job = r.loaded.smoke.model_copy(update={"workers": 1})
    return _training_template(r.loaded, job, "smoke-train", "smoke",
                              r.settings.smoke_deadline_seconds, r.settings)


def _train_template(r: _Render) -> Resource:
    """`train`: the full job, with the workers `workflows.jobplan.full_job` decides."""
    return _training_template(r.loaded, full_job(r.loaded)[0], "train", "full",
                              r.settings.train_deadline_seconds, r.settings)


def _find_production_template(r: _Render) -> Container | None:
    """`find-production`: with `training.init_from: production`, the export the full job
    starts from, read from the GitOps repo as the gate reads it (empty: from scratch)."""
    if not warm_start(r.loaded, "full"):
        return None
    return r.container(
        "find-production",
        r.production_args("find-production"),
        extra_env=r.git_env(helper=False),
        # production's export is on the models volume (its `file://` model-uri): without
        # it every full job trained from scratch
        extra_mounts=[_models_read_only()],
        outputs=[
            Parameter(name="model-dir", value_from=m.ValueFrom(path=_out("model-dir"))),
            Parameter(name="version", value_from=m.ValueFrom(path=_out("version"))),
        ],
    )


def _evaluate_template(r: _Render) -> Container:
    """`evaluate`: the candidate's metrics, beside production's on the same images.

    Production runs on the candidate's images too (`workflows.paired_evaluation`): the step
    finds it in the GitOps repo and reads its export from the models volume, read-only.
    The pictures of that comparison go with the report.
    """
    # The data cache's claim, where there is one (a repo with pins), also keeps the
    # exports' served detections between runs (`workflows.served_cache`), as locally.
    served_cache = r.loaded.config.data is not None and bool(r.settings.data_cache_claim)
    return r.container(
        "evaluate",
        r.production_args("evaluate"),
        extra_env=[*r.git_env(helper=False),  # a private GitOps repo
                   *([Env(name=DATA_CACHE_ENV, value=DATA_CACHE_MOUNT)] if served_cache
                     else [])],
        extra_mounts=[_models_read_only(),
                      *([m.VolumeMount(name="data-cache", mount_path=DATA_CACHE_MOUNT)]
                        if served_cache else [])],
        outputs=[
            Parameter(name="map50", value_from=m.ValueFrom(path=_out("map50"))),
            Parameter(name="map", value_from=m.ValueFrom(path=_out("map"))),
            Artifact(
                name="report",
                path=f"{PATH_ENV['MLOPS_OUT']}/full/metrics.json",
                archive=NoneArchiveStrategy(),
            ),
            Artifact(name="model", path=f"{PATH_ENV['MLOPS_OUT']}/full/model"),
        ],
        metrics=[
            Gauge(
                name="mlops_candidate_map50",
                help="COCO mAP@0.5 of the latest candidate",
                labels=[r.model_label],
                realtime=False,
                value="{{outputs.parameters.map50}}",
            ),
            Gauge(
                name="mlops_candidate_map",
                help="COCO mAP@[.5:.95] of the latest candidate",
                labels=[r.model_label],
                realtime=False,
                value="{{outputs.parameters.map}}",
            ),
        ],
    )


def _gate_template(r: _Render) -> Container:
    """`gate`: the verdict on the candidate against the model in production.

    Production is the stable version in the GitOps repo the candidate would be proposed
    to (an empty parameter means none is configured: the gate checks the floor only).
    """
    return r.container(
        "gate",
        r.production_args("gate"),
        retry=False,  # the verdict is an output, not an error to retry
        extra_env=r.git_env(helper=False),  # a private GitOps repo
        # production's model.yaml (metrics, dataset lock) behind its file:// model-uri
        extra_mounts=[_models_read_only()],
        outputs=[
            Parameter(name="passed", value_from=m.ValueFrom(path=_out("passed"))),
            # pass, review (inconclusive, proposed for a human's judgement) or fail
            Parameter(name="outcome", value_from=m.ValueFrom(path=_out("outcome"))),
            Parameter(name="reason", value_from=m.ValueFrom(path=_out("reason"))),
            Parameter(name="value", value_from=m.ValueFrom(path=_out("value"))),
            Artifact(
                name="verdict",
                path=f"{PATH_ENV['MLOPS_OUT']}/full/gate.json",
                archive=NoneArchiveStrategy(),
            ),
        ],
        metrics=[
            Counter(
                name="mlops_gate_outcomes_total",
                help="Gate verdicts on candidates",
                labels=[
                    r.model_label,
                    Label(key="passed", value="{{outputs.parameters.passed}}"),
                    Label(key="outcome", value="{{outputs.parameters.outcome}}"),
                ],
                value="1",
            ),
        ],
    )


def _models_env() -> list[Env]:
    """The models volume's mount, where serving pods read `<model>/<version>`."""
    return [Env(name=MODELS_ENV, value=MODELS_MOUNT)]


def _publish_template(r: _Render) -> Container:
    """`publish-model`: a candidate that passed, copied to the models volume before it is
    proposed."""
    return r.container(
        "publish-model",
        step_args("publish", "--models-root", f"$({MODELS_ENV})"),
        extra_env=_models_env(),
        extra_mounts=[m.VolumeMount(name="models", mount_path=MODELS_MOUNT)],
        outputs=[Parameter(name="model-dir", value_from=m.ValueFrom(path=_out("model-dir")))],
    )


def _forge_env(r: _Render) -> list[SecretEnv]:
    """The forge's API token from the settings' Secret, as the env var its client reads."""
    forge = r.loaded.config.promotion.gitops.forge
    if forge not in FORGE_TOKEN_ENV:
        return []
    return [SecretEnv(name=FORGE_TOKEN_ENV[forge], secret_name=r.settings.forge_secret,
                      secret_key=r.settings.forge_secret_key, optional=True)]


def _propose_template(r: _Render) -> Container:
    """`propose`: the candidate's serving manifests on a branch of the GitOps repo, and a PR.

    `mlops step propose` (`promotion.gitrepo.propose` behind it); the PR's body is the
    evaluation report and the gate's verdict. The manifests point at the published copy,
    not at this run's workspace (deleted with the run).
    """
    gitops = r.loaded.config.promotion.gitops
    return r.container(
        "propose",
        [
            "step",
            "propose",
            "{{inputs.parameters.model-dir}}",
            "--gitops",
            "{{workflow.parameters.gitops-repo}}",
            "--config",
            f"$(MLOPS_REPO)/{r.loaded.path.name}",
            "--metrics",
            "$(MLOPS_OUT)/full/metrics.json",
            "--gate",
            "$(MLOPS_OUT)/full/gate.json",
            "--forge",
            gitops.forge,
            "--branch",
            gitops.branch,
            "--model",  # the bound name, not the one the trained export's record says
            r.model,
            "--outputs",
            PROPOSAL_OUTPUTS,
            *[arg for name in r.settings.image_pull_secrets
              for arg in ("--image-pull-secret", name)],
        ],
        inputs=[Parameter(name="model-dir")],
        outputs=[
            Parameter(name="version",
                      value_from=m.ValueFrom(path=f"{PROPOSAL_OUTPUTS_PATH}/version")),
            Parameter(name="pr-url",
                      value_from=m.ValueFrom(path=f"{PROPOSAL_OUTPUTS_PATH}/pr-url")),
        ],
        extra_env=[*_models_env(), *_forge_env(r), *r.git_env(helper=False)],
        extra_mounts=[_models_read_only()],
    )


def _record_outcome_template(r: _Render) -> Container:
    """The exit handler: the run's report and its PR link, whatever the outcome."""
    return r.container(
        EXIT_HANDLER,
        [
            "step",
            EXIT_HANDLER,
            "--status",
            "{{workflow.status}}",
            "--workflow",
            "{{workflow.name}}",
            "--failures",
            "{{workflow.failures}}",
            "--out",
            "$(MLOPS_OUT)",
            "--gitops",
            "{{workflow.parameters.gitops-repo}}",
            "--forge",
            r.loaded.config.promotion.gitops.forge,
            "--repo",
            "{{workflow.parameters.repo}}",
        ],
        deadline=600,
        retry=False,
        outputs=[
            # The run's report (commit, mAP, gate, PR, failures) in the Argo UI's artifacts.
            Artifact(name="report", path=REPORT_PATH, archive=NoneArchiveStrategy(),
                     optional=True),
            # The Workflow's only global output, set on every run (the exit handler always
            # runs), so the Argo UI's link ${status.outputs.parameters.0.value} always
            # resolves (docs/cluster.md, section 6). Only outputs with a globalName reach
            # status.outputs (operator.go addParamToGlobalScope, v3.7.9); the DAG's own
            # outputs (WORKFLOW_OUTPUTS) do not.
            Parameter(name=PR_LINK_OUTPUT, global_name=PR_LINK_OUTPUT,
                      value_from=m.ValueFrom(path=PR_LINK_PATH, default="")),
        ],
    )


#: The step templates' builders, in the order the templates are rendered. A builder
#: returns None for a step this repo's pipeline does not have.
_STEP_TEMPLATES: tuple[Callable[[_Render], Container | Resource | None], ...] = (
    _checkout_template,
    _build_image_template,
    _push_image_template,
    _prepare_data_template,
    _smoke_train_template,
    _train_template,
    _find_production_template,
    _evaluate_template,
    _gate_template,
    _publish_template,
    _propose_template,
    _record_outcome_template,
)


def _pipeline_dag(steps: dict[str, Container | Resource]) -> DAG:
    """The entrypoint DAG over the step templates this repo's pipeline has."""
    image_arg = Parameter(name="image", value="{{tasks.push-image.outputs.parameters.image}}")
    prepared = "prepare-data" in steps
    warm = "find-production" in steps
    inputs = "push-image && prepare-data" if prepared else "push-image"
    tasks: list[Task | m.DAGTask] = [
        Task(name="checkout", template=steps["checkout"]),
        Task(name=BUILD_TASK, template=steps[BUILD_TASK], depends="checkout"),
        Task(name="push-image", template=steps["push-image"], depends=BUILD_TASK),
    ]
    if prepared:
        tasks.append(Task(name="prepare-data", template=steps["prepare-data"], depends="checkout"))
    if "smoke-train" in steps:
        tasks.append(Task(name="smoke-train", template=steps["smoke-train"],
                          arguments=[image_arg], depends=inputs))
    train_args = [image_arg]
    if warm:
        tasks.append(Task(name="find-production", template=steps["find-production"],
                          depends="checkout"))
        train_args.append(Parameter(
            name="init-from", value="{{tasks.find-production.outputs.parameters.model-dir}}"))
    # Publish and propose only a candidate that passed, and only where
    # a GitOps repo is configured (empty parameter: end at the gate).
    proposing = (
        "{{tasks.gate.outputs.parameters.passed}} == true"
        " && '{{workflow.parameters.gitops-repo}}' != ''"
    )
    tasks += [
        Task(name="train", template=steps["train"], arguments=train_args,
             depends=" && ".join(["smoke-train" if "smoke-train" in steps else inputs,
                                  *(["find-production"] if warm else [])])),
        Task(name="evaluate", template=steps["evaluate"], depends="train"),
        Task(name="gate", template=steps["gate"], depends="evaluate.Succeeded"),
        Task(name="publish-model", template=steps["publish-model"], depends="gate.Succeeded",
             when=proposing),
        Task(
            name="propose",
            template=steps["propose"],
            # The bare name is Argo's "Succeeded or Skipped": a skipped
            # publish leaves propose to its own `when`, which says why.
            depends="publish-model",
            when=proposing,
            arguments=[Parameter(name="model-dir",
                                 value="{{tasks.publish-model.outputs.parameters.model-dir}}")],
        ),
    ]
    outputs = [
        Parameter(name=name, value_from=m.ValueFrom(parameter=f"{{{{{ref}}}}}", default=""))
        for name, ref in WORKFLOW_OUTPUTS.items()
    ]
    return DAG(name=ENTRYPOINT, outputs=outputs, tasks=tasks)


def _workflow_arguments(r: _Render) -> list[Parameter]:
    """The parameters a trigger passes for one commit (`PARAMETERS`), with their defaults."""
    return [
        Parameter(name="repo", description="git URL of the model repo"),
        Parameter(name="revision", description="commit sha to train"),
        Parameter(name="ref", value=f"refs/heads/{r.settings.branch}", description="pushed ref"),
        Parameter(
            name="gitops-repo",
            value=r.loaded.config.promotion.gitops.repo,
            description="GitOps repo the candidate is proposed to (empty: do not propose)",
        ),
    ]


def _workspace_claim(settings: PipelineSettings) -> m.PersistentVolumeClaim:
    """The run's ReadWriteMany workspace, created per workflow and deleted with it."""
    pvc_spec: dict[str, Any] = {
        "access_modes": ["ReadWriteMany"],
        "resources": m.VolumeResourceRequirements(
            requests={"storage": m.Quantity(settings.workspace_size)}
        ),
    }
    if settings.workspace_storage_class:
        pvc_spec["storage_class_name"] = settings.workspace_storage_class
    return m.PersistentVolumeClaim(
        metadata=m.ObjectMeta(name="workspace"),
        spec=m.PersistentVolumeClaimSpec(**pvc_spec),
    )


def _docker_config(name: str, secret: str) -> m.Volume:
    """A kubernetes.io/dockerconfigjson Secret as a DOCKER_CONFIG directory."""
    return m.Volume(name=name, secret=m.SecretVolumeSource(
        secret_name=secret, items=[m.KeyToPath(key=".dockerconfigjson", path="config.json")]))


def _workflow_volumes(r: _Render) -> list[m.Volume]:
    """The volumes the steps mount (the workspace is a claim template of its own)."""
    settings = r.settings
    return [
        _docker_config("registry-auth", settings.registry_secret),
        *([_docker_config("base-pull-auth", settings.base_pull_secret)]
          if settings.base_pull_secret else []),
        *([m.Volume(name="build-cache", persistent_volume_claim=(
            m.PersistentVolumeClaimVolumeSource(claim_name=settings.build_cache_claim)))]
          if settings.build_cache_claim else []),
        m.Volume(name="tmp", empty_dir=m.EmptyDirVolumeSource()),
        # Where serving reads models (`serving.manifests`): publish writes, propose reads.
        m.Volume(
            name="models",
            persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
                claim_name=settings.models_claim
            ),
        ),
        *_data_volumes(r.loaded, settings),
    ]


def _workflow_metrics(r: _Render) -> list[Counter | Gauge]:
    """The run's own Prometheus metrics: its outcome and its duration."""
    return [
        Counter(
            name="mlops_pipeline_runs_total",
            help="Pipeline runs by outcome",
            labels=[r.model_label, Label(key="status", value="{{workflow.status}}")],
            value="1",
        ),
        Gauge(
            name="mlops_pipeline_duration_seconds",
            help="Duration of the last pipeline run",
            labels=[r.model_label],
            realtime=False,
            value="{{workflow.duration}}",
        ),
    ]


def build_workflow_template(loaded: LoadedConfig, settings: PipelineSettings) -> WorkflowTemplate:
    """The model repo's pipeline as a WorkflowTemplate (named after the model).

    Its step templates, one builder each (`_STEP_TEMPLATES`), then the DAG over them.
    """
    r = _Render(loaded, settings)
    built = (build(r) for build in _STEP_TEMPLATES)
    steps = {str(t.name): t for t in built if t is not None}
    model = r.model
    return WorkflowTemplate(
        name=model,
        namespace=settings.namespace,
        labels={"app.kubernetes.io/part-of": "mlops", "mlops.dev/model": model},
        annotations={"mlops.dev/config": loaded.path.name, **plan_annotations(loaded)},
        entrypoint=ENTRYPOINT,
        on_exit=EXIT_HANDLER,
        service_account_name=settings.service_account,
        automount_service_account_token=False,
        executor=m.ExecutorConfig(service_account_name=settings.executor_service_account),
        image_pull_secrets=[m.LocalObjectReference(name=n) for n in settings.image_pull_secrets]
        or None,
        arguments=_workflow_arguments(r),
        active_deadline_seconds=settings.workflow_deadline_seconds,
        # Pods and the workspace of a successful run go at once; a failed
        # run keeps both for debugging until its TTL deletes the workflow
        # (their owner).
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        volume_claim_gc=m.VolumeClaimGC(strategy="OnWorkflowSuccess"),
        ttl_strategy=m.TTLStrategy(
            seconds_after_success=settings.ttl_after_success_seconds,
            seconds_after_failure=settings.ttl_after_failure_seconds,
        ),
        security_context=m.PodSecurityContext.model_validate(pod_security(settings.run_as_user)),
        artifact_repository_ref=m.ArtifactRepositoryRef(
            config_map=settings.artifact_repository_configmap, key=settings.artifact_repository_key
        ),
        workflow_metadata=m.WorkflowMetadata(
            labels={"mlops.dev/model": model},
            labels_from={
                "mlops.dev/commit": m.LabelValueFrom(expression="workflow.parameters.revision")
            },
        ),
        volume_claim_templates=[_workspace_claim(settings)],
        volumes=_workflow_volumes(r),
        metrics=_workflow_metrics(r),
        templates=[*steps.values(), _pipeline_dag(steps)],
    )


def embedded_manifests(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(template name, parsed manifest) of every resource template in a rendered doc."""
    found = []
    for tmpl in doc.get("spec", {}).get("templates", []):
        manifest = (tmpl.get("resource") or {}).get("manifest")
        if manifest:
            found.append((tmpl["name"], yaml.safe_load(manifest)))
    return found
