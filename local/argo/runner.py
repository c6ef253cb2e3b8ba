"""The local runner: act out the pipeline's Hera DAG on one machine.

It walks the rendered WorkflowTemplate (exactly what Argo would receive), task by task
in `depends` order, running each template's `mlops.dev/local` stand-in or its own
container, and writes the run's logs, events, records, report and metrics under OUT
(docs/pipeline-internals.md, "The local runner").
"""

import contextlib
import email.parser
import hashlib
import importlib
import importlib.metadata
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from hera.workflows import WorkflowTemplate

from cogs.containers import ContainerSpecError, Mounts, local_argv, local_process
from cogs.files import atomic_write_text
from cogs.ports import free_port
from gitops.git import redact
from workflows import paddlejob_local, run_events
from workflows.errors import ConfigError, StepError
from workflows.expressions import (
    ExpressionError,
    depends_on,
    eval_depends,
    eval_when,
    substitute,
)
from workflows.jobplan import PLAN_ANNOTATIONS
from workflows.pipeline import ARGO_METRIC_PREFIX, BUILD_TASK, workflow_name
from workflows.pod_paths import DATA_CACHE_ENV, LOCAL_ANNOTATION, MODELS_ENV, PATH_ENV
from workflows.push import SUBMIT_STEP
from workflows.step_container import ALLOW_PROTOCOL_ENV
from workflows.steps import STEPS, submit_pipeline
from workflows.steps.record_outcome import OUTCOME_FILE

Echo = Callable[[str], None]
ImageBuilder = Callable[[dict[str, str], str, Callable[[str], None]], str]


@dataclass
class TaskRecord:
    """What happened to one task."""

    name: str
    template: str
    phase: str = "Pending"  # Succeeded | Failed | Skipped | Omitted
    seconds: float = 0.0
    log: str = ""
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    """A finished local run."""

    workflow: str
    status: str
    out: pathlib.Path
    seconds: float
    tasks: list[TaskRecord]
    parameters: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)
    """The entrypoint DAG's output parameters: what the Argo UI shows as the workflow's."""
    global_outputs: dict[str, str] = field(default_factory=dict)
    """Output parameters exported with a `globalName`: Argo's `status.outputs`, which the
    Argo UI's `links` read."""

    def task(self, name: str) -> TaskRecord:
        """The record of one task."""
        return next(t for t in self.tasks if t.name == name)

    def output(self, key: str) -> str | None:
        """The last task's value of an output parameter named `key`."""
        for record in reversed(self.tasks):
            if key in record.outputs:
                return record.outputs[key]
        return None


class _TaskFailed(Exception):
    """Internal: a task failed; message says why."""


# --- planning ----------------------------------------------------------------


def dag_tasks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The entrypoint DAG's tasks in a dependency order (stable by definition)."""
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    entry = templates[doc["spec"]["entrypoint"]]
    if "dag" not in entry:
        raise StepError(f"entrypoint template {entry['name']!r} is not a DAG")
    tasks = entry["dag"]["tasks"]
    names = [t["name"] for t in tasks]
    deps = {
        t["name"]: depends_on(t["depends"])
        if t.get("depends")
        else list(t.get("dependencies") or [])
        for t in tasks
    }
    for name, ds in deps.items():
        unknown = [d for d in ds if d not in names]
        if unknown:
            raise StepError(f"task {name!r} depends on unknown task(s) {unknown}")
    ordered: list[dict[str, Any]] = []
    done: set[str] = set()
    while len(ordered) < len(tasks):
        ready = [
            t for t in tasks if t["name"] not in done and all(d in done for d in deps[t["name"]])
        ]
        if not ready:
            cycle = [n for n in names if n not in done]
            raise StepError(f"the DAG has a dependency cycle among {cycle}")
        ordered.append(ready[0])
        done.add(ready[0]["name"])
    return ordered


# --- local stand-ins -----------------------------------------------------------


def _git(repo: pathlib.Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _name_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    """`dist.metadata['Name']` and `dist.version` from one parse of the headers only: each
    of those parses the whole file (long descriptions included) again, three times a
    distribution, for every installed distribution at every push."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    end = text.find("\n\n")  # the blank line that ends the headers: the body is not read
    headers = email.parser.Parser().parsestr(text if end < 0 else text[:end + 1])
    return headers["Name"], headers["Version"]  # what importlib.metadata's parser reads


def environment_digest() -> tuple[str, str]:
    """(sha256, text) of the Python version and installed distributions (`pip freeze`)."""
    dists = sorted(
        {
            f"{name}=={version}"
            for name, version in map(_name_version, importlib.metadata.distributions())
            if name
        },
        key=str.lower,
    )
    text = f"python {platform.python_version()} {platform.machine()}\n" + "\n".join(dists) + "\n"
    return hashlib.sha256(text.encode()).hexdigest(), text


@dataclass
class _Ctx:
    repo: pathlib.Path
    out: pathlib.Path
    model: str
    scope: dict[str, str]
    echo: Echo
    metrics: list[str] = field(default_factory=list)
    submit: Callable[[dict[str, Any]], None] | None = None
    #: Builds the build-image step's image: (the step's env, its script, a log line writer)
    #: -> the image's name. None: the environment digest stands in.
    image_builder: ImageBuilder | None = None


def _standin_checkout(ctx: _Ctx, outputs: pathlib.Path, log: Any, **_: Any) -> None:
    sha = _git(ctx.repo, "rev-parse", "HEAD") or ctx.scope["workflow.parameters.revision"]
    dirty = _git(ctx.repo, "status", "--porcelain", "--", ".")
    log.write(
        f"local checkout: using {ctx.repo} at {sha}"
        + (" (with uncommitted changes)" if dirty else "")
        + "\n"
    )
    (outputs / "revision").write_text(sha)


def _standin_environment(ctx: _Ctx, outputs: pathlib.Path, log: Any, *,
                         env: dict[str, str] | None = None, script: str = "",
                         **_: Any) -> None:
    if ctx.image_builder is not None and env is not None:
        def line(text: str) -> None:
            log.write(text + "\n")
            log.flush()
        try:
            image = ctx.image_builder(env, script, line)
        except Exception as exc:  # the builder's error names the Dockerfile and the failure
            log.write(f"error: {exc}\n")
            raise _TaskFailed(str(exc).splitlines()[0]) from None
        (outputs / "image").write_text(image)
        return
    digest, text = environment_digest()
    (ctx.out / "environment.txt").write_text(text)
    log.write(
        "no image build here (`mlops run` builds the model repo's Dockerfile with podman "
        "when podman is installed; MLOPS_IMAGE_BUILD=record turns that off): recorded the "
        f"environment instead ({ctx.out / 'environment.txt'})\n"
    )
    log.write(f"environment digest sha256:{digest}\n")
    (outputs / "image").write_text(f"local/{ctx.model}-train@sha256:{digest}")


def _standin_push(ctx: _Ctx, outputs: pathlib.Path, log: Any, **_: Any) -> None:
    """push-image: no registry here; the image build-image made stays where it is (the local
    store, or the environment digest's name), and that is the image the jobs are given."""
    built = ctx.scope.get(f"tasks.{BUILD_TASK}.outputs.parameters.image", "")
    log.write(f"no registry here: the image stays in the local store ({built or 'none'}); "
              "the cluster's push-image pushes it with crane and outputs it by digest\n")
    (outputs / "image").write_text(built)


def _standin_submit(ctx: _Ctx, outputs: pathlib.Path, log: Any, argv: list[str]) -> None:
    """The push Workflow's submit step: the same args parsed and the same child Workflow
    rendered as in the cluster (`workflows.steps.submit_pipeline`), handed to this
    runner instead of created through the Kubernetes API."""
    try:
        args = submit_pipeline.build_parser().parse_args(argv[3:])
    except SystemExit:  # argparse said why on stderr
        raise _TaskFailed(f"{' '.join(argv[:3])}: the arguments do not parse") from None
    try:
        child = submit_pipeline.render_child(args)
    except ConfigError as exc:
        log.write(f"error: {exc}\n")
        raise _TaskFailed(str(exc)) from None
    if ctx.submit is None:
        raise _TaskFailed("no local runner to hand the pipeline Workflow to (run_workflow "
                          "without submit=)")
    ctx.submit(child)
    log.write(f"handed Workflow {child['metadata']['name']} to the local runner\n")
    (outputs / "workflow").write_text(child["metadata"]["name"])


STANDINS: dict[str, Callable[..., None]] = {
    "checkout": _standin_checkout,
    "environment-digest": _standin_environment,
    "registry-push": _standin_push,
}


@contextlib.contextmanager
def _captured(log: Any, env: dict[str, str]) -> Iterator[None]:
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield
    finally:
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_step(name: str, argv: list[str], log: Any, env: dict[str, str]) -> None:
    if name not in STEPS:
        raise _TaskFailed(f"unknown step {name!r}; known: {', '.join(sorted(STEPS))}")
    module = importlib.import_module(STEPS[name])
    with _captured(log, env):
        try:
            code = module.main(argv)
        except SystemExit as exc:  # argparse errors
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception:
            traceback.print_exc()
            code = 1
    if code != 0:
        raise _TaskFailed(f"step {name} exited with code {code}")


def _standin_paddlejob(
    log: Any,
    manifest: dict[str, Any],
    local_env: dict[str, str],
    mounts: Mounts,
    deadline: float | None,
) -> None:
    """The PaddleJob as paddle-operator would run it: `workflows.paddlejob_local`."""
    name = manifest["metadata"]["name"]
    # Its `readOnly` mounts (the checkout, the prepared data) read-only here too, each
    # worker in a mount namespace of its own (`paddlejob_local.read_only_argv`).
    read_only = paddlejob_local.read_only_dirs(manifest, mounts)
    problem = paddlejob_local.read_only_problem() if read_only else None
    if problem:
        log.write(f"PaddleJob {name}: its read-only mounts stay writable on this machine "
                  f"({problem}); evaluation verifies the prepared data again\n")
    try:
        specs = paddlejob_local.worker_specs(
            manifest, port=free_port(), mounts=mounts, local_env=local_env,
            read_only=() if problem else read_only)
    except (paddlejob_local.PaddleJobFailed, ValueError) as exc:
        raise _TaskFailed(f"PaddleJob {name}: {exc}") from None
    log.write(
        f"PaddleJob {name}: {len(specs)} worker(s), each a process with the worker pod's "
        f"command, env and workingDir plus paddle-operator's env (POD_IP 127.0.0.1..{len(specs)})\n"
    )
    log.flush()
    try:
        paddlejob_local.run_paddlejob(specs, log.buffer, name=name, timeout=deadline)
    except paddlejob_local.PaddleJobFailed as exc:
        raise _TaskFailed(str(exc)) from None


def _run_container(log: Any, argv: list[str], env: dict[str, str], cwd: pathlib.Path) -> None:
    """Run a container's command locally, as its pod would; `_TaskFailed` if it fails.

    A command that cannot start (an unknown `mlops` group, a broken import)
    fails the task with its own error: it used to be a skip, which hid a
    broken installation behind a green run.
    """
    if argv[:2] == ["mlops", "step"] and len(argv) > 2:
        _run_step(argv[2], argv[3:], log, env)
        return
    argv = local_argv(argv)
    log.write("$ " + redact(" ".join(argv)) + "\n")  # a GitOps URL may carry a token
    log.flush()
    proc = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
    )
    if proc.returncode != 0:
        raise _TaskFailed(f"{argv[0]} exited with code {proc.returncode}")


# --- one task ------------------------------------------------------------------


def _local_argv(container: dict[str, Any], scope: dict[str, str], where: str,
                mounts: Mounts, env: dict[str, str]) -> list[str]:
    """A container's argv as its pod would run it: Argo's `{{...}}`, then the kubelet's."""
    resolved = {**container, **{
        key: [substitute(str(a), scope, where) for a in container.get(key) or []]
        for key in ("command", "args")}}
    try:
        return list(local_process(resolved, source=where, mounts=mounts, env=env).argv)
    except ContainerSpecError as exc:
        raise _TaskFailed(str(exc)) from None


def _mounts(container_env: dict[str, str], local_env: dict[str, str]) -> Mounts:
    """The workspace's container paths -> this run's directories, as the volumes mount them."""
    return Mounts({container_env[k]: local_env[k] for k in PATH_ENV if k in container_env})


def _jsonpath(obj: Any, expr: str) -> str:
    match = re.fullmatch(r"\{\.([A-Za-z0-9_.-]+)\}", expr)
    if not match:
        raise _TaskFailed(f"jsonPath {expr!r}: only {{.a.b}} paths are supported locally")
    for key in match.group(1).split("."):
        obj = obj[key]
    return str(obj)


def _dag_outputs(tmpl: dict[str, Any], scope: dict[str, str]) -> dict[str, str]:
    """Resolve a DAG template's output parameters as Argo does: `valueFrom.parameter`
    from the tasks' outputs, `valueFrom.default` when a task did not produce it."""
    found = {}
    for p in (tmpl.get("outputs") or {}).get("parameters") or []:
        source = p.get("valueFrom") or {}
        try:
            found[p["name"]] = substitute(str(source.get("parameter", "")), scope)
        except ExpressionError:
            if "default" not in source:
                raise
            found[p["name"]] = str(source["default"])
    return found


def _metric_lines(tmpl: dict[str, Any], scope: dict[str, str]) -> list[str]:
    lines = []
    for metric in (tmpl.get("metrics") or {}).get("prometheus") or []:
        labels = ",".join(
            f'{lb["key"]}="{substitute(lb["value"], scope)}"' for lb in metric.get("labels") or []
        )
        kind = "gauge" if "gauge" in metric else "counter" if "counter" in metric else None
        if kind is None:
            continue
        value = substitute(metric[kind]["value"], scope)
        name = ARGO_METRIC_PREFIX + metric["name"]  # as Prometheus stores it (Argo 3.6+)
        lines += [
            f"# HELP {name} {metric.get('help', '')}",
            f"# TYPE {name} {kind}",
            f"{name}{{{labels}}} {value}",
        ]
    return lines


def _task_scope(ctx: _Ctx, task: dict[str, Any], tmpl: dict[str, Any]) -> dict[str, str]:
    """The run's scope plus the task's `inputs.parameters.*`: its arguments, else the
    template's defaults."""
    name = task["name"]
    scope = dict(ctx.scope)
    args = {
        p["name"]: substitute(str(p.get("value", "")), scope, f"task {name}")
        for p in (task.get("arguments") or {}).get("parameters") or []
    }
    for p in (tmpl.get("inputs") or {}).get("parameters") or []:
        value = args.get(p["name"], p.get("value", p.get("default")))
        if value is None:
            raise _TaskFailed(f"input parameter {p['name']!r} has no value")
        scope[f"inputs.parameters.{p['name']}"] = str(value)
    return scope


def _local_paths(ctx: _Ctx, outputs: pathlib.Path) -> dict[str, str]:
    """The env names of the pods' paths (`PATH_ENV` and the volumes') -> this run's
    directories."""
    return {
        "MLOPS_REPO": str(ctx.repo),
        "MLOPS_OUT": str(ctx.out),
        "MLOPS_OUTPUTS": str(outputs),
        # The models volume of the cluster: one folder per run here, where
        # the local platform serves the proposed version from.
        MODELS_ENV: str(ctx.out / "models"),
        # prepare-data's cache: the user's (or $MLOPS_DATA_CACHE), kept between runs, so
        # week 2's run fetches only the images week 1's did not have.
        DATA_CACHE_ENV: os.environ.get(DATA_CACHE_ENV)
        or str(pathlib.Path.home() / ".cache" / "mlops" / "data"),
    }


def _container_env(tmpl: dict[str, Any], scope: dict[str, str]) -> dict[str, str]:
    """The container's own env with Argo's `{{...}}` resolved (just the path env for a
    template without a container)."""
    container = tmpl.get("container") or {}
    if not container:
        env = dict(PATH_ENV)
    else:
        # A valueFrom (a Secret in the cluster) is left out: the local environment's own
        # value stands in for it.
        env = {
            e["name"]: substitute(str(e.get("value", "")), scope, f"template {tmpl['name']}")
            for e in container.get("env") or []
            if "value" in e
        }
    if env.get(ALLOW_PROTOCOL_ENV):
        # The forge's stand-in here is a directory (a bare repo): git reaches it with its
        # `file` transport, as the run's directories stand in for the pod's volumes
        # (`_local_paths`). No token travels over it.
        env[ALLOW_PROTOCOL_ENV] += ":file"
    return env


@dataclass
class _TaskEnv:
    """Where one task runs locally: its scope, env, mounts and outputs folder."""

    scope: dict[str, str]
    env: dict[str, str]
    local_paths: dict[str, str]
    mounts: Mounts
    outputs: pathlib.Path
    where: str

    def mapped(self, path: str) -> pathlib.Path:
        """A container path as this run's file (`_TaskFailed` outside every mount)."""
        try:
            return pathlib.Path(self.mounts.require(path, self.where))
        except ContainerSpecError as exc:
            raise _TaskFailed(str(exc)) from None


def _task_env(ctx: _Ctx, task: dict[str, Any], tmpl: dict[str, Any]) -> _TaskEnv:
    """Resolve the task's inputs and make its empty outputs folder."""
    scope = _task_scope(ctx, task, tmpl)
    outputs = ctx.out / "outputs" / task["name"]
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir(parents=True)
    local_paths = _local_paths(ctx, outputs)
    container_env = _container_env(tmpl, scope)
    return _TaskEnv(scope=scope, env={**container_env, **local_paths}, local_paths=local_paths,
                    mounts=_mounts(container_env, local_paths), outputs=outputs,
                    where=f"template {tmpl['name']}")


def _act(ctx: _Ctx, tmpl: dict[str, Any], te: _TaskEnv, log: Any) -> dict[str, Any] | None:
    """Do what the template says, locally; returns the PaddleJob manifest it ran, if any.

    Its `mlops.dev/local` stand-in where it names one, else its container's command.
    """
    action = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(LOCAL_ANNOTATION, "")
    container = tmpl.get("container") or {}
    scope, where = te.scope, te.where
    if action == "paddlejob":
        manifest_text = (tmpl.get("resource") or {}).get("manifest")
        if not manifest_text:
            raise _TaskFailed(
                f"template {tmpl['name']} is annotated {action} but has no resource manifest"
            )
        manifest = yaml.safe_load(substitute(manifest_text, scope, f"template {tmpl['name']}"))
        deadline = tmpl.get("activeDeadlineSeconds")
        _standin_paddlejob(
            log, manifest, te.local_paths, te.mounts,
            float(deadline) if deadline else None,
        )
        return manifest
    if action == SUBMIT_STEP and container:
        _standin_submit(ctx, te.outputs, log,
                        _local_argv(container, scope, where, te.mounts, te.env))
    elif action:
        if action not in STANDINS:
            raise _TaskFailed(f"unknown local action {action!r} on template {tmpl['name']}")
        script = substitute(" ".join(str(a) for a in container.get("args") or []),
                            scope, where) if container else ""
        STANDINS[action](ctx, te.outputs, log, env=te.env, script=script)
    elif container:
        # Argo's `{{...}}` first (the controller's part), then the kubelet's (cogs.containers)
        resolved = {**container, **{
            key: [substitute(str(a), scope, where) for a in container.get(key) or []]
            for key in ("command", "args")}}
        try:
            process = local_process(resolved, source=where, mounts=te.mounts, env=te.env)
        except ContainerSpecError as exc:
            raise _TaskFailed(str(exc)) from None
        _run_container(log, process.argv, te.env,
                       pathlib.Path(process.cwd) if process.cwd else ctx.repo)
    else:
        raise _TaskFailed(
            f"template {tmpl['name']} has no local action (no container, no {LOCAL_ANNOTATION})"
        )
    return None


def _collect_outputs(tmpl: dict[str, Any], te: _TaskEnv, record: TaskRecord,
                     manifest: dict[str, Any] | None) -> None:
    """Everything the step wrote is kept; the declared outputs must be there."""
    for f in sorted(te.outputs.iterdir()):
        if f.is_file() and not f.name.startswith("."):
            record.outputs[f.name] = f.read_text().strip()
    for p in (tmpl.get("outputs") or {}).get("parameters") or []:
        source = p.get("valueFrom") or {}
        if "path" in source:
            path = te.mapped(source["path"])
            if not path.is_file() and "default" in source:  # Argo's executor does the same
                record.outputs[p["name"]] = str(source["default"])
                continue
            if not path.is_file():
                raise _TaskFailed(f"output parameter {p['name']!r} was not written ({path})")
            record.outputs[p["name"]] = path.read_text().strip()
        elif "jsonPath" in source and manifest is not None:
            record.outputs[p["name"]] = _jsonpath(manifest, source["jsonPath"])
    for a in (tmpl.get("outputs") or {}).get("artifacts") or []:
        path = te.mapped(a["path"])
        if not path.exists() and not a.get("optional"):
            raise _TaskFailed(f"output artifact {a['name']!r} is missing ({path})")
        record.artifacts[a["name"]] = str(path)


def _run_task(ctx: _Ctx, task: dict[str, Any], tmpl: dict[str, Any], record: TaskRecord) -> None:
    """Run one task's template locally: its action, then its outputs and metrics."""
    te = _task_env(ctx, task, tmpl)
    with open(record.log, "w") as log:
        manifest = _act(ctx, tmpl, te, log)
    _collect_outputs(tmpl, te, record, manifest)
    metric_scope = {**te.scope,
                    **{f"outputs.parameters.{k}": v for k, v in record.outputs.items()}}
    ctx.metrics += _metric_lines(tmpl, metric_scope)
    record.phase = "Succeeded"


def _tail(path: str, lines: int = 25) -> str:
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- the run -------------------------------------------------------------------


def workflow_parameters(doc: dict[str, Any]) -> dict[str, str]:
    """The rendered template's parameters and their default values."""
    return {
        p["name"]: str(p.get("value", ""))
        for p in (doc["spec"].get("arguments") or {}).get("parameters") or []
    }


def run_workflow(
    wt: WorkflowTemplate | dict[str, Any],
    repo: pathlib.Path,
    out: pathlib.Path,
    *,
    parameters: dict[str, str] | None = None,
    echo: Echo = print,
    submit: Callable[[dict[str, Any]], None] | None = None,
    image_builder: ImageBuilder | None = None,
) -> RunResult:
    """Run the DAG of `wt` locally on `repo`, writing everything under `out`.

    `submit` receives the Workflows a `submit-pipeline` step creates (the push
    Workflow's), where the cluster's step would create them through the API.
    `image_builder` builds the build-image step's image (`_Ctx.image_builder`); without
    one the environment digest stands in for it."""
    doc = wt.to_dict() if isinstance(wt, WorkflowTemplate) else wt
    repo, out = pathlib.Path(repo).resolve(), pathlib.Path(out).resolve()
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    ordered = dag_tasks(doc)
    model = doc["metadata"].get("labels", {}).get("mlops.dev/model") or doc["metadata"]["name"]
    params = _run_parameters(doc, repo, parameters)
    name = _run_name(model, params["revision"])
    _clear_run_files(out)
    ctx = _Ctx(repo=repo, out=out, model=model, scope=_run_scope(doc, params, name), echo=echo,
               submit=submit, image_builder=image_builder)

    echo(f"local run {name}: {repo} -> {out}")
    for key in PLAN_ANNOTATIONS:  # why this DAG has no smoke job, or fewer workers
        if key in (doc["metadata"].get("annotations") or {}):
            echo(f"  {key.split('/')[-1]}: {doc['metadata']['annotations'][key]}")
    run_events.append(out, "run_started", workflow=name)
    start = time.monotonic()
    global_outputs: dict[str, str] = {}
    records, failed = _run_dag(ctx, ordered, templates, global_outputs)
    outputs = _conclude(ctx, doc, templates, failed, start)
    wf_status = ctx.scope["workflow.status"]
    exit_record = _run_exit_handler(ctx, doc, templates, global_outputs)
    if exit_record is not None:
        records.append(exit_record)
    ctx.scope["workflow.duration"] = f"{time.monotonic() - start:.3f}"
    ctx.metrics += _metric_lines(doc["spec"], ctx.scope)

    result = RunResult(
        workflow=name,
        status=wf_status,
        out=out,
        seconds=round(time.monotonic() - start, 3),
        tasks=records,
        parameters=params,
        outputs=outputs,
        global_outputs=global_outputs,
    )
    _write_records(result, ctx.metrics)
    run_events.append(out, "run_finished", workflow=name, phase=wf_status,
                      seconds=result.seconds,
                      message=f"{failed.name}: {failed.message}" if failed else "")
    if failed:
        echo(
            f"\nFAILED at {failed.name}: {failed.message}\n"
            f"--- {failed.log} (last lines) ---\n{_tail(failed.log)}"
        )
    _print_summary(result, echo)
    return result


def _run_parameters(doc: dict[str, Any], repo: pathlib.Path,
                    given: dict[str, str] | None) -> dict[str, str]:
    """The workflow's parameters for a local run: the template's defaults, the repo dir
    and its HEAD where none is given, then the caller's."""
    params = workflow_parameters(doc)
    sha = _git(repo, "rev-parse", "HEAD")
    params.setdefault("repo", "")
    params["repo"] = params["repo"] or str(repo)
    params["revision"] = params.get("revision") or sha or "local"
    params.update(given or {})
    return params


def _run_name(model: str, revision: str) -> str:
    """The cluster's Workflow name for a commit id; `<model>-local` for anything else."""
    if re.fullmatch(r"[0-9a-fA-F]{7,40}", revision):
        return workflow_name(model, revision)
    return f"{model}-local"


def _clear_run_files(out: pathlib.Path) -> None:
    """OUT ready for a new run: its folders made, the last run's report and events gone."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "report.md").unlink(missing_ok=True)  # the exit handler writes this run's
    (out / run_events.EVENTS_FILE).unlink(missing_ok=True)  # this run's events only
    (out / "models").mkdir(exist_ok=True)  # the models volume's stand-in (publish-model)


def _run_scope(doc: dict[str, Any], params: dict[str, str], name: str) -> dict[str, str]:
    """The `{{workflow.*}}` values known before the first task runs."""
    scope = {f"workflow.parameters.{k}": v for k, v in params.items()}
    scope.update(
        {"workflow.name": name, "workflow.uid": str(uuid.uuid4()), "workflow.namespace": "local",
         # operator.go setGlobalParameters (v3.7.9): every annotation, as JSON
         "workflow.annotations.json": json.dumps(doc["metadata"].get("annotations") or {})}
    )
    return scope


def _not_run(ctx: _Ctx, task: dict[str, Any], status: dict[str, str],
             failed: TaskRecord | None) -> tuple[str, str] | None:
    """(phase, message) of a task Argo would not run here, None for one it runs: omitted
    after a failure (fail-fast) or when its `depends` is false, skipped by its `when`."""
    if failed is not None:
        return "Omitted", f"not run: {failed.name} failed"
    if task.get("depends") and not eval_depends(task["depends"], status):
        return "Omitted", f"depends {task['depends']!r} is false"
    if task.get("when") and not eval_when(
        substitute(task["when"], ctx.scope, f"task {task['name']} when")
    ):
        return "Skipped", f"when {task['when']!r} is false"
    return None


def _attempt(ctx: _Ctx, task: dict[str, Any], tmpl: dict[str, Any], record: TaskRecord) -> None:
    """Run one task, timed; a failure becomes the record's phase and message."""
    run_events.append(ctx.out, "task_started", task=record.name, log=record.log)
    t0 = time.monotonic()
    try:
        _run_task(ctx, task, tmpl, record)
    except (_TaskFailed, StepError, ExpressionError, OSError) as exc:
        record.phase, record.message = "Failed", str(exc)
    record.seconds = round(time.monotonic() - t0, 3)


def _run_dag(ctx: _Ctx, ordered: list[dict[str, Any]], templates: dict[str, dict[str, Any]],
             global_outputs: dict[str, str]) -> tuple[list[TaskRecord], TaskRecord | None]:
    """The entrypoint DAG's tasks in order; the records and the failed task, if any."""
    records: list[TaskRecord] = []
    status: dict[str, str] = {}
    failed: TaskRecord | None = None
    for task in ordered:
        tmpl = templates[task["template"]]
        record = TaskRecord(name=task["name"], template=task["template"],
                            log=str(ctx.out / "logs" / f"{task['name']}.log"))
        records.append(record)
        not_run = _not_run(ctx, task, status, failed)
        if not_run:
            record.phase, record.message = not_run
        else:
            ctx.echo(f"  {record.name:<14} running   (log: {record.log})")
            _attempt(ctx, task, tmpl, record)
            if record.phase == "Failed":
                failed = record
        status[record.name] = record.phase
        _export_globals(tmpl, record, global_outputs)
        _task_finished(ctx.out, record)
        for key, value in record.outputs.items():
            ctx.scope[f"tasks.{record.name}.outputs.parameters.{key}"] = value
        ctx.scope[f"tasks.{record.name}.status"] = record.phase
        if record.phase != "Omitted" or failed is None or failed is record:
            ctx.echo(
                f"  {record.name:<14} {record.phase:<9} {record.seconds:8.2f}s"
                + (f"  {record.message}" if record.message and record.phase != "Succeeded" else "")
            )
    return records, failed


def _conclude(ctx: _Ctx, doc: dict[str, Any], templates: dict[str, dict[str, Any]],
              failed: TaskRecord | None, start: float) -> dict[str, str]:
    """The DAG's outputs, and the `{{workflow.*}}` values the exit handler reads (status,
    failures, duration); returns the outputs."""
    outputs = _dag_outputs(templates.get(doc["spec"].get("entrypoint", "")) or {}, ctx.scope)
    for key, value in outputs.items():
        ctx.scope[f"workflow.outputs.parameters.{key}"] = value
    ctx.scope["workflow.status"] = "Failed" if failed else "Succeeded"
    ctx.scope["workflow.failures"] = json.dumps(
        [
            {
                "displayName": failed.name,
                "templateName": failed.template,
                "phase": "Failed",
                "message": failed.message,
            }
        ]
        if failed
        else []
    )
    ctx.scope["workflow.duration"] = f"{time.monotonic() - start:.3f}"
    return outputs


def _run_exit_handler(ctx: _Ctx, doc: dict[str, Any], templates: dict[str, dict[str, Any]],
                      global_outputs: dict[str, str]) -> TaskRecord | None:
    """The `onExit` template, whatever the DAG's outcome; its record (None: no handler)."""
    exit_name = doc["spec"].get("onExit")
    if not exit_name:
        return None
    record = TaskRecord(
        name=exit_name, template=exit_name, log=str(ctx.out / "logs" / f"{exit_name}.log")
    )
    _attempt(ctx, {"name": exit_name}, templates[exit_name], record)
    _export_globals(templates[exit_name], record, global_outputs)
    _task_finished(ctx.out, record)
    ctx.echo(f"  {record.name:<14} {record.phase:<9} {record.seconds:8.2f}s (exit handler)")
    return record


def _export_globals(tmpl: dict[str, Any], record: TaskRecord, into: dict[str, str]) -> None:
    """Argo's global outputs: a pod's output parameter with a `globalName` is copied to the
    Workflow's `status.outputs`, a later one overwriting (operator.go
    addParamToGlobalScope, workflow/util AddParamToGlobalScope, v3.7.9)."""
    for p in (tmpl.get("outputs") or {}).get("parameters") or []:
        if p.get("globalName") and p["name"] in record.outputs:
            into[p["globalName"]] = record.outputs[p["name"]]


def _task_finished(out: pathlib.Path, record: TaskRecord) -> None:
    run_events.append(out, "task_finished", task=record.name, log=record.log,
                      phase=record.phase, seconds=record.seconds, message=record.message,
                      outputs=dict(record.outputs))


def _exit_outcome(out: pathlib.Path) -> dict[str, Any]:
    try:
        doc = json.loads((out / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        return {}  # no exit handler, or it died mid-write: run.json says what the runner knows
    return doc if isinstance(doc, dict) else {}


def _write_records(result: RunResult, metrics: list[str]) -> None:
    out = result.out
    outcome = _exit_outcome(out)
    data = {
        "workflow": result.workflow,
        "status": result.status,
        "seconds": result.seconds,
        "finished_at": outcome.get("finished_at"),
        "gate": outcome.get("gate"),
        "failures": outcome.get("failures"),
        "parameters": result.parameters,
        "outputs": result.outputs,
        "global_outputs": result.global_outputs,
        "tasks": [asdict(t) for t in result.tasks],
    }
    # Atomic: the demo and `mlops status` read it while runs come and go. Then the exit
    # handler's own file goes: a local run leaves one record of how it ended.
    atomic_write_text(out / "run.json", json.dumps(data, indent=2) + "\n")
    (out / OUTCOME_FILE).unlink(missing_ok=True)
    (out / "metrics.prom").write_text("\n".join(metrics) + ("\n" if metrics else ""))
    # The exit handler's report (as in the cluster) plus what only a local run knows:
    # where the model landed and each task's time.
    written = out / "report.md"
    head = written.read_text() if written.is_file() else (
        f"# Pipeline run `{result.workflow}`: {result.status}\n")
    rows = "\n".join(
        f"| {t.name} | {t.phase} | {t.seconds:.1f} | "
        f"{t.message.splitlines()[0] if t.message else ''} |"
        for t in result.tasks
    )
    lines = [
        head.rstrip("\n"),
        f"- model dir: `{result.output('model_dir') or '-'}` "
        f"(version `{result.output('version') or '-'}`)",
        "",
        "## Tasks (local run)",
        "",
        "| task | phase | seconds | note |",
        "|---|---|---|---|",
        rows,
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))


def _print_summary(result: RunResult, echo: Echo) -> None:
    out = result.out
    echo("")
    echo(f"run {result.workflow}: {result.status} in {result.seconds:.1f}s")
    if result.output("model_dir"):
        echo(f"  model:   {result.output('model_dir')} (version {result.output('version')})")
    if result.output("map50"):
        echo(f"  mAP@0.5: {result.output('map50')}   mAP@[.5:.95]: {result.output('map')}")
    if result.output("passed"):
        word = {"pass": "PASSED", "review": "REVIEW (inconclusive: proposed for a person)",
                "fail": "FAILED"}.get(result.output("outcome") or "",
                                      "PASSED" if result.output("passed") == "true" else "FAILED")
        echo(f"  gate:    {word} - {result.output('reason')}")
    echo(f"  report:  {out / 'report.md'}")
    echo(f"  timings: {out / 'run.json'}   logs: {out / 'logs'}/")
