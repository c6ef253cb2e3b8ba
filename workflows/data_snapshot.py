"""The CronWorkflow that pins the team's newest data: a new lock commit only when it changed.

On its schedule one pod clones the model repo, runs `mlops data snapshot SOURCE
--if-changed` into the lock file `data.train` names, and commits and pushes only when
the dataset digest moved (a new pin name alone is not a change). The push is then the
trigger of the training pipeline like any other commit: git stays the one trigger and
the audit trail. A push rejected because the remote moved is rebased and retried;
nothing is forced. The data PVC is mounted read-only; S3 credentials come from the data
Secret as env (`workflows.step_container.data_source_env`), the git token from the git Secret.
"""

from typing import Any

from hera.workflows import Env

from gitops.git import origin
from workflows.config import LoadedConfig
from workflows.settings import PipelineSettings
from workflows.step_container import data_mounts, data_source_env, git_credentials, restricted

# Sources of the script's variables: env only, so no value is spliced into shell text.
SNAPSHOT_SCRIPT = (
    "set -eu\n"
    'cd "$(mktemp -d)" && git clone -q --branch "$BRANCH" "$REPO_URL" repo && cd repo\n'
    'mlops data snapshot "$SOURCE" --name "$PIN_NAME-$(date -u +%G-w%V)" --out "$LOCK" '
    "--if-changed\n"
    'git add -- "$LOCK"\n'
    'if git diff --cached --quiet; then echo "data unchanged: no new pin"; exit 0; fi\n'
    'git -c user.name="$BOT_NAME" -c user.email="$BOT_EMAIL" commit -q '
    '-m "data($MODEL): new pin of $SOURCE" -m "Mlops-Data-Source: $SOURCE"\n'
    "for attempt in 1 2 3; do\n"
    '  git push origin "HEAD:$BRANCH" && exit 0\n'
    '  git -c user.name="$BOT_NAME" -c user.email="$BOT_EMAIL" pull -q --rebase '
    'origin "$BRANCH"\n'
    "done\n"
    'echo "the remote kept moving: pin not pushed, the next schedule tries again" >&2\n'
    "exit 4\n"
)


def _plain(model: Any) -> dict[str, Any]:
    """A Hera (pydantic) model as the manifest's mapping."""
    return dict(model.model_dump(by_alias=True, exclude_none=True))


def repo_url(loaded: LoadedConfig, settings: PipelineSettings) -> str:
    """The model repo's clone URL (GitHub, from the settings the EventSource uses too)."""
    name = settings.github_repository or loaded.config.model
    return f"https://github.com/{settings.github_owner}/{name}.git"


def build_snapshot_cron(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any] | None:
    """The CronWorkflow, or None when `mlops.yaml` has no `data.snapshot`."""
    data = loaded.config.data
    if data is None or data.snapshot is None:
        return None
    model = loaded.config.model
    snap = data.snapshot
    url = repo_url(loaded, settings)
    env: list[Any] = [
        Env(name="REPO_URL", value=url),
        Env(name="BRANCH", value=settings.branch),
        Env(name="SOURCE", value=snap.source),
        Env(name="PIN_NAME", value=snap.name or model),
        Env(name="LOCK", value=data.train),
        Env(name="MODEL", value=model),
        Env(name="BOT_NAME", value="mlops-data"),
        Env(name="BOT_EMAIL", value="mlops-data@users.noreply.example.com"),
        Env(name="HOME", value="/tmp"),
        *data_source_env(settings),
        # The token goes to the model repo's server only (`workflows.binding`).
        *git_credentials(settings, helper=True,
                         scope={"hosts": [origin(url)], "schemes": ["https"]}),
    ]
    container = {
        "image": settings.tool_image,
        "command": ["sh", "-c"],
        "args": [SNAPSHOT_SCRIPT],
        "env": [_plain(e.build()) for e in env],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                         *[_plain(mnt) for mnt in data_mounts(settings)]],
        "securityContext": _plain(restricted()),
        # it reads every pinned file to hash it (as prepare-data does)
        "resources": settings.resources_for("prepare-data"),
    }
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if settings.data_claim:
        volumes.append({"name": "data", "persistentVolumeClaim": {
            "claimName": settings.data_claim, "readOnly": True}})
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": f"{model}-data-snapshot", "namespace": settings.namespace,
                     "labels": {"app.kubernetes.io/part-of": "mlops", "mlops.dev/model": model}},
        "spec": {
            "schedules": [snap.schedule],
            "concurrencyPolicy": "Forbid",  # one snapshot at a time: two would race to push
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "workflowSpec": {
                "entrypoint": "snapshot",
                "serviceAccountName": settings.service_account,
                "automountServiceAccountToken": False,
                "executor": {"serviceAccountName": settings.executor_service_account},
                **({"imagePullSecrets": [{"name": n} for n in settings.image_pull_secrets]}
                   if settings.image_pull_secrets else {}),
                "securityContext": {"runAsNonRoot": True, "runAsUser": settings.run_as_user,
                                    "runAsGroup": settings.run_as_user,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "activeDeadlineSeconds": settings.step_deadline_seconds,
                "volumes": volumes,
                "templates": [{"name": "snapshot", "container": container}],
            },
        },
    }
