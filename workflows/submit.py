"""Submit a commit of a model repo to an Argo Server, through Hera's WorkflowsService.

One call: the commit's pipeline Workflow, rendered from the checkout's
`mlops.yaml` with the whole spec inline, exactly as a push's `submit-pipeline`
step creates it (`workflows.push.child_workflow`), labelled `trigger: cli`. No
shared WorkflowTemplate is written: two submits of different commits in flight
would race on it, and a run would read whichever was written last. The
Workflow's name is `<model>-<sha[:12]>` (as a push names it), so a second
submit of the same commit is refused by the server and reported as "already
submitted" instead of training twice.

The token comes from the environment (`ARGO_TOKEN`, what `argo auth token`
prints), never from a flag that would land in shell history.
"""

import os
import pathlib
import subprocess
from dataclasses import dataclass
from typing import Any

from hera.exceptions import AlreadyExists, HeraException
from hera.workflows import WorkflowsService
from hera.workflows import models as m

from contracts.errors import ExitCode, MlopsError
from workflows.config import LoadedConfig
from workflows.errors import ConfigError
from workflows.push import child_workflow
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
) -> dict[str, Any]:
    """The commit's pipeline Workflow, inline, as a push creates it (labelled `trigger: cli`)."""
    workflow = child_workflow(loaded, settings, repo=params["repo"], revision=params["revision"],
                              ref=params["ref"], annotations={})
    workflow["metadata"]["labels"]["mlops.dev/trigger"] = "cli"
    return workflow


def submit(
    loaded: LoadedConfig,
    settings: PipelineSettings,
    server: str,
    params: dict[str, str],
    *,
    token: str | None = None,
    verify_ssl: bool = True,
) -> Submission:
    """Create the commit's pipeline Workflow (inline; already there: not created again)."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    service = WorkflowsService(
        host=server.rstrip("/") + "/",
        token=token or None,
        namespace=settings.namespace,
        verify_ssl=verify_ssl,
    )
    workflow = build_submission(loaded, settings, params)
    try:
        try:
            service.create_workflow(
                m.WorkflowCreateRequest(workflow=m.Workflow.model_validate(workflow)),
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
        workflow=workflow["metadata"]["name"],
        namespace=settings.namespace,
        created=created,
        parameters=params,
    )
