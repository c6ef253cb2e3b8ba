"""Run a model repo's training command for a job, the way a PaddleJob would.

In a cluster every PaddleJob worker runs `<command> <args>` and the operator
wires the collective. Locally the same command runs under
`python -m paddle.distributed.launch --nproc_per_node N` (N capped at this
machine's cores), with one OpenMP thread per rank: Paddle 3 on two cores
trains about twice as slowly with two threads per process.
"""

import os
import pathlib
import subprocess
import sys
import time
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


def training_args(job: ResourceTemplate, output_dir: str, checkpoint_dir: str) -> list[str]:
    """The arguments the pipeline appends to the user's training command."""
    return ["--output-dir", output_dir, "--checkpoint-dir", checkpoint_dir, *arg_flags(job.args)]


def local_workers(job: ResourceTemplate) -> int:
    """The job's worker count, capped at this machine's cores."""
    return max(1, min(job.workers, os.cpu_count() or 1))


def local_command(
    command: list[str], job: ResourceTemplate, output_dir: pathlib.Path, checkpoint_dir: pathlib.Path
) -> list[str]:
    """The local equivalent of a PaddleJob's workers: one launch of N ranks."""
    argv = list(command)
    workers = local_workers(job)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    if workers > 1:
        if argv[0] != sys.executable:
            raise StepError(
                f"distributed training needs a Python entrypoint (got {command[0]!r}); "
                "write training.command as [python, your_script.py]"
            )
        launch = [
            sys.executable, "-m", "paddle.distributed.launch",
            "--nproc_per_node", str(workers),
            "--log_dir", str(output_dir / "launch-logs"),
        ]
        argv = launch + argv[1:]
    return argv + training_args(job, str(output_dir), str(checkpoint_dir))


def run_training(
    repo_dir: pathlib.Path,
    command: list[str],
    job: ResourceTemplate,
    output_dir: pathlib.Path,
    checkpoint_dir: pathlib.Path,
    *,
    env: dict[str, str] | None = None,
    log_path: pathlib.Path | None = None,
    timeout: float | None = None,
) -> float:
    """Run training to completion, streaming its log; returns seconds taken."""
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    argv = local_command(command, job, output_dir, checkpoint_dir)
    run_env = {**os.environ, **(env or {})}
    run_env["OMP_NUM_THREADS"] = "1"
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    log_path = log_path or output_dir / "train.log"
    start = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            argv, cwd=repo_dir, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
            code = proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    elapsed = time.monotonic() - start
    if code != 0:
        tail = _tail(log_path)
        worker_logs = output_dir / "launch-logs"
        hint = f" (per-rank logs in {worker_logs})" if worker_logs.is_dir() else ""
        raise StepError(
            f"training exited with code {code}; log: {log_path}{hint}\n--- last lines ---\n{tail}"
        )
    return elapsed


def _tail(path: pathlib.Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
