"""The PaddleJob a training step applies: one job's workers, as paddle-operator runs them.

Collective mode, one worker pod per replica running the model repo's own training
command from the checkout, in the image built for the commit. The pipeline's training
templates apply it in a cluster; `workflows.paddlejob_local` runs the same manifest
on this machine.
"""

from typing import Any

from cogs.pods import container_security, pod_security
from serving.manifests import MODELS_MOUNT
from workflows.config import LoadedConfig
from workflows.pod_paths import DATA_DIR, PATH_ENV
from workflows.resources import ResourceTemplate
from workflows.settings import PipelineSettings
from workflows.worker_command import worker_command

PADDLEJOB_API = "batch.paddlepaddle.org/v1"


def paddlejob_manifest(
    loaded: LoadedConfig, job: ResourceTemplate, which: str, settings: PipelineSettings,
    *, deadline: int | None = None,
) -> dict[str, Any]:
    """The PaddleJob for one training job (`which` is `smoke` or `full`).

    Collective mode (workers only, no parameter servers). Each worker pod
    runs the model repo's own command from the checkout on the shared
    workspace, in the image built for this commit (`_worker_pod_spec`).
    """
    return {
        "apiVersion": PADDLEJOB_API,
        "kind": "PaddleJob",
        "metadata": {
            "name": f"{{{{workflow.name}}}}-{which}",
            "labels": {
                "app.kubernetes.io/part-of": "mlops",
                "mlops.dev/model": loaded.config.model,
                "mlops.dev/job": which,
                "workflows.argoproj.io/workflow": "{{workflow.name}}",
            },
        },
        "spec": {
            # Pods of a finished job are removed; a failed job keeps its pods
            # (and logs) until the workflow, their owner, is deleted.
            "cleanPodPolicy": "OnCompletion",
            "intranet": "PodIP",
            "worker": {
                "replicas": job.workers,
                "template": {"spec": _worker_pod_spec(loaded, job, which, settings, deadline)},
            },
        },
    }


def _worker_pod_spec(
    loaded: LoadedConfig, job: ResourceTemplate, which: str, settings: PipelineSettings,
    deadline: int | None,
) -> dict[str, Any]:
    """A PaddleJob worker's pod spec.

    `/dev/shm` is a memory emptyDir because NCCL/Gloo and Paddle's DataLoader use shared
    memory and the container default (64 MiB) makes collective jobs crash. `deadline`:
    the step's `activeDeadlineSeconds`, on the worker pods too: when Argo stops the step
    at its deadline it stops only its own pod, and the job's pods would train on until
    the Workflow is deleted (their owner); the kubelet ends each worker at the same
    deadline.
    """
    warm = warm_start(loaded, which)
    return {
        **({"imagePullSecrets": _pull_secrets(settings)}
           if settings.image_pull_secrets else {}),
        "restartPolicy": "Never",
        **({"activeDeadlineSeconds": deadline} if deadline else {}),
        "automountServiceAccountToken": False,  # training needs no API
        "securityContext": pod_security(settings.run_as_user),
        "containers": [_worker_container(loaded, job, which)],
        "volumes": [
            {
                "name": "workspace",
                "persistentVolumeClaim": {
                    "claimName": "{{workflow.name}}-workspace"
                },
            },
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": job.shm},
            },
            *([{"name": "models", "persistentVolumeClaim": {
                "claimName": settings.models_claim, "readOnly": True}}]
              if warm else []),
        ],
    }


def _worker_container(loaded: LoadedConfig, job: ResourceTemplate, which: str) -> dict[str, Any]:
    """A PaddleJob worker's one container: the model repo's training command."""
    model = loaded.config.model
    command, args = worker_command(
        loaded.config.training.command, job, f"$(MLOPS_OUT)/{which}",
        source=f"{loaded.path.name}: training.command",
        data_dir=DATA_DIR if loaded.config.data else None,
    )
    warm = warm_start(loaded, which)
    if warm:  # production's export, found by find-production, read from the models volume
        # Before the template's args, so a job's own `init-from: ""` (from scratch) wins.
        at = args.index("--checkpoint-dir") + 2
        args = [*args[:at], "--init-from", "{{inputs.parameters.init-from}}", *args[at:]]
    resources: dict[str, Any] = {
        "requests": {"cpu": job.cpu, "memory": job.memory},
        "limits": {"cpu": job.cpu, "memory": job.memory},
    }
    if job.gpus:
        resources["limits"]["nvidia.com/gpu"] = str(job.gpus)
    env = [{"name": k, "value": v} for k, v in PATH_ENV.items()]
    env += [
        {"name": "MLOPS_TRAINING_COMMIT", "value": "{{workflow.parameters.revision}}"},
        {"name": "MLOPS_WORKFLOW_ID", "value": "{{workflow.name}}"},
        {"name": "HOME", "value": "/tmp"},
    ]
    return {
        "name": "paddle",
        "image": "{{inputs.parameters.image}}",
        "workingDir": PATH_ENV["MLOPS_REPO"],
        "command": command,
        "args": args,
        "env": env,
        "resources": resources,
        "securityContext": container_security(read_only_root=False),
        "volumeMounts": [
            *_training_mounts(loaded, which),
            {"name": "dshm", "mountPath": "/dev/shm"},
            # Its own model's exports only, not every team's: production's is under it.
            *([{"name": "models", "mountPath": f"{MODELS_MOUNT}/{model}",
                "subPath": model, "readOnly": True}] if warm else []),
        ],
    }


def _training_mounts(loaded: LoadedConfig, which: str) -> list[dict[str, Any]]:
    """The workspace as the training pods see it: the pushed repo's code runs there.

    Its own output folder writable; the checkout (the `mlops.yaml` and lock files later
    steps read) and the prepared data (what evaluation judges) read-only, through
    subPaths of the same claim: with the whole workspace writable, a training job could
    replace the verified val annotations and a failing candidate pass the gate. The
    local runner honours the same `readOnly` (`workflows.paddlejob_local`).
    """
    out = PATH_ENV["MLOPS_OUT"]
    mounts: list[dict[str, Any]] = [
        {"name": "workspace", "mountPath": PATH_ENV["MLOPS_REPO"], "subPath": "repo",
         "readOnly": True},
        {"name": "workspace", "mountPath": f"{out}/{which}", "subPath": f"out/{which}"},
    ]
    if loaded.config.data:
        mounts.append({"name": "workspace", "mountPath": f"{out}/data", "subPath": "out/data",
                       "readOnly": True})
    return mounts


def warm_start(loaded: LoadedConfig, which: str) -> bool:
    """Whether this job starts from production's weights (`training.init_from`)."""
    return which == "full" and loaded.config.training.init_from == "production"


def _pull_secrets(settings: PipelineSettings) -> list[dict[str, str]]:
    return [{"name": name} for name in settings.image_pull_secrets]
