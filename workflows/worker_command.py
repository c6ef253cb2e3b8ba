"""How a model repo's training command becomes a PaddleJob worker's command line.

The pipeline appends `--output-dir`, `--checkpoint-dir` and the resource
template's args to the user's command; each worker runs it under Paddle's
launcher (`worker_command`). The same rendered PaddleJob runs in a cluster
(paddle-operator) and locally (`workflows.paddlejob_local`).
"""

from typing import Any

from workflows.errors import StepError
from workflows.resources import ResourceTemplate


def arg_flags(args: dict[str, Any]) -> list[str]:
    """Template args as CLI flags: `{max-steps: 20}` -> `--max-steps 20`."""
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            if value:
                flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, *[str(v) for v in value]]
        else:
            flags += [flag, str(value)]
    return flags


def training_args(job: ResourceTemplate, output_dir: str, checkpoint_dir: str,
                  data_dir: str | None = None) -> list[str]:
    """The arguments the pipeline appends to the user's training command (`--data-dir`:
    the dataset prepare-data laid out from the repo's pins, when it has pins)."""
    data = ["--data-dir", data_dir] if data_dir else []
    return ["--output-dir", output_dir, "--checkpoint-dir", checkpoint_dir, *data,
            *arg_flags(job.args)]


def worker_command(
    command: list[str], job: ResourceTemplate, output_dir: str, *, source: str = "training.command",
    data_dir: str | None = None,
) -> tuple[list[str], list[str]]:
    """A PaddleJob worker container's `command` and `args` for the user's training command.

    paddle-operator starts every worker with the pod's command as written and
    only sets `POD_IP`, `PADDLE_TRAINER_ID` and the job's endpoint list
    (`workflows.paddlejob_local` cites where); the rank's own endpoint, which
    `paddle.distributed.init_parallel_env()` needs, comes from Paddle's
    launcher. So a Python entrypoint runs as
    `python -m paddle.distributed.launch --log_dir OUT/launch-logs SCRIPT ...`,
    as the operator's examples do, whatever the number of workers. Another
    entrypoint can only be a single worker. The workers share the workspace
    volume, so each launcher logs into its own folder, named after the rank
    the operator gave its pod (`$(PADDLE_TRAINER_ID)`, expanded by the
    kubelet from the container's env).
    """
    args = training_args(job, output_dir, f"{output_dir}/checkpoints", data_dir)
    if command[0] in ("python", "python3") and len(command) > 1:
        log_dir = f"{output_dir}/launch-logs/worker-$(PADDLE_TRAINER_ID)"
        launch = ["-m", "paddle.distributed.launch", "--log_dir", log_dir]
        return [command[0]], [*launch, *command[1:], *args]
    if job.workers > 1:
        raise StepError(
            f"{source}: {command!r} cannot run as a {job.workers}-worker PaddleJob; distributed "
            "training needs a Python entrypoint run under paddle.distributed.launch: write "
            "training.command as [python, your_script.py]"
        )
    return list(command), args
