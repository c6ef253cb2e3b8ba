"""Submit a commit of a model repo to an Argo Server, through Hera's WorkflowsService.

Two calls, both idempotent: the WorkflowTemplate is created, or updated
when it exists; then a Workflow referencing it is created for the commit.
The Workflow's name is `<model>-<sha[:12]>` (as the Sensor names it), so a
second submit of the same commit is refused by the server and reported as
"already submitted" instead of training twice.

The token comes from the environment (`ARGO_TOKEN`, what `argo auth token`
prints), never from a flag that would land in shell history.
"""

import os
import pathlib
import subprocess
from dataclasses import dataclass
from typing import cast

from hera.exceptions import AlreadyExists, HeraException
from hera.workflows import Parameter, Workflow, WorkflowsService, WorkflowTemplate
from hera.workflows import models as m

from contracts.errors import ExitCode, MlopsError
from workflows.config import LoadedConfig
from workflows.errors import ConfigError
from workflows.pipeline import build_workflow_template, workflow_name
from workflows.settings import PipelineSettings

TOKEN_ENV = "ARGO_TOKEN"


class SubmitError(MlopsError):
    """The Argo Server refused or could not be reached; the message says which."""

    exit_code = ExitCode.FAILED


class ArgoUnavailable(SubmitError):
    """The Argo Server did not answer (refused, DNS, TLS): try again when it is up."""

    exit_code = ExitCode.UNAVAILABLE


@dataclass(frozen=True)
class Submission:
    """What was submitted (or found already submitted)."""

    workflow: str
    namespace: str
    template: str
    template_action: str  # created | updated
    created: bool  # False: the workflow for this commit already existed
    parameters: dict[str, str]


def _git(repo: pathlib.Path, *args: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def commit_parameters(
    repo_dir: pathlib.Path, repo_url: str | None, revision: str | None, ref: str | None
) -> dict[str, str]:
    """`repo`, `revision`, `ref` for a checkout: flags first, then what git says."""
    revision = revision or _git(repo_dir, "rev-parse", "HEAD")
    if not revision:
        raise ConfigError(f"{repo_dir}: not a git checkout with a commit; pass --revision")
    repo_url = repo_url or _git(repo_dir, "remote", "get-url", "origin")
    if not repo_url:
        raise ConfigError(
            f"{repo_dir}: no git remote 'origin' to clone from in the cluster; pass --repo-url"
        )
    ref = ref or _git(repo_dir, "symbolic-ref", "-q", "HEAD") or ""
    return {"repo": repo_url, "revision": revision, "ref": ref}


def build_submission(
    loaded: LoadedConfig, settings: PipelineSettings, params: dict[str, str]
) -> Workflow:
    """The Workflow for one commit, referencing the model's WorkflowTemplate."""
    model = loaded.config.model
    return Workflow(
        name=workflow_name(model, params["revision"]),
        namespace=settings.namespace,
        labels={"mlops.dev/model": model, "mlops.dev/trigger": "cli"},
        workflow_template_ref=m.WorkflowTemplateRef(name=model),
        arguments=[Parameter(name=k, value=v) for k, v in params.items()],
    )


def _built(wt: WorkflowTemplate) -> m.WorkflowTemplate:
    # Hera types build() as any of its workflow kinds; a WorkflowTemplate builds one.
    return cast(m.WorkflowTemplate, wt.build())


def submit(
    loaded: LoadedConfig,
    settings: PipelineSettings,
    server: str,
    params: dict[str, str],
    *,
    token: str | None = None,
    verify_ssl: bool = True,
) -> Submission:
    """Create-or-update the template, then create the commit's Workflow."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    service = WorkflowsService(
        host=server.rstrip("/") + "/",
        token=token or None,
        namespace=settings.namespace,
        verify_ssl=verify_ssl,
    )
    wt = build_workflow_template(loaded, settings)
    name = str(wt.name)
    try:
        try:
            service.create_workflow_template(
                m.WorkflowTemplateCreateRequest(template=_built(wt)), namespace=settings.namespace
            )
            action = "created"
        except AlreadyExists:
            current = service.get_workflow_template(name, namespace=settings.namespace)
            updated = _built(wt)
            updated.metadata.resource_version = current.metadata.resource_version
            service.update_workflow_template(
                name,
                m.WorkflowTemplateUpdateRequest(template=updated),
                namespace=settings.namespace,
            )
            action = "updated"
        wf = build_submission(loaded, settings, params)
        try:
            service.create_workflow(
                m.WorkflowCreateRequest(workflow=cast(m.Workflow, wf.build())),
                namespace=settings.namespace,
            )
            created = True
        except AlreadyExists:
            created = False
    except HeraException as exc:
        raise SubmitError(f"Argo Server {server}: {exc}") from exc
    except OSError as exc:  # connection refused, DNS, TLS
        raise ArgoUnavailable(f"Argo Server {server}: cannot connect ({exc})") from exc
    return Submission(
        workflow=wf.name or "",
        namespace=settings.namespace,
        template=wt.name or "",
        template_action=action,
        created=created,
        parameters=params,
    )
