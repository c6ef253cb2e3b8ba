"""Argo Events: a push to the model repo submits the pipeline for that commit.

An EventSource receives push webhooks (GitHub, and a generic webhook that
accepts the same GitHub-style push payload, as Gitea/Forgejo send it or a
script can post it), and a Sensor turns one push into one push Workflow from
the WorkflowTemplate `<model>-push` with parameters `repo`, `revision` and
`ref`; that Workflow checks the commit out and creates the pipeline Workflow
rendered from the commit's own `mlops.yaml` (`workflows.push`).

Three rules keep the trigger honest:

* Only pushes of the configured branch that are not deletions start a run.
* Commits authored by our own bot identity never start training: its
  write-back commits would otherwise re-trigger the pipeline forever (the
  loop Argo Events users report).
* Duplicate deliveries do not start duplicate runs. Argo Events gives every
  delivery a fresh event id, so dedup cannot rely on it; instead the Workflow
  names are derived from the model and the commit sha
  (`workflows.push.push_workflow_name`, `workflows.pipeline.workflow_name`),
  and the API server refuses a second Workflow with the same name: the push
  Workflow's, and should two push Workflows of one sha exist, the pipeline's.
"""

import re
from dataclasses import dataclass
from typing import Any

from contracts.kubeapi import ApiCall
from gitops.git import BOT_IDENTITY
from workflows.config import LoadedConfig
from workflows.push import PUSH_ENTRYPOINT, PUSH_LABEL, push_template_name
from workflows.settings import PipelineSettings

EVENTS_API = "argoproj.io/v1alpha1"
# What the Sensor pod asks the API server, with its own token, per push. Argo Events'
# argo-workflow trigger runs `argo -n NS submit FILE` and then lists the Workflows it
# labelled (pkg/sensors/triggers/argo-workflow/argo-workflow.go, argo-events v1.9). That
# CLI talks to the API server itself (pkg/apiclient/argo-kube-client.go, argo-workflows
# v3.7.9): three SelfSubjectAccessReviews on clusterworkflowtemplates (util/rbac/rbac.go;
# Kubernetes grants every account those reviews), a GET of the WorkflowTemplate the
# Workflow refers to (its validation) and the create (server/workflow/workflow_server.go).
SENSOR_API_CALLS = (
    ApiCall("create", "selfsubjectaccessreviews", "authorization.k8s.io", namespace=""),
    ApiCall("get", "workflowtemplates", "argoproj.io", name="{model}"),
    ApiCall("create", "workflows", "argoproj.io"),
    ApiCall("list", "workflows", "argoproj.io"),
)
GITHUB_EVENT = "github"
WEBHOOK_EVENT = "webhook"


def eventsource_name(model: str) -> str:
    """The EventSource of one model repo."""
    return f"{model}-push"


def build_eventsource(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """EventSource: a generic push webhook, plus GitHub's for a repo on GitHub."""
    model = loaded.config.model
    doc = _eventsource(loaded, settings)
    if settings.model_forge == "github":
        doc["spec"]["service"]["ports"].insert(0, {
            "name": "github", "port": settings.github_port, "targetPort": settings.github_port,
        })
        doc["spec"]["github"] = {
            GITHUB_EVENT: {
                "repositories": [
                    {"owner": settings.github_owner,
                     "names": [settings.github_repository or model]}
                ],
                # No apiToken: the platform team registers the webhook in
                # GitHub once; Argo Events only verifies and receives.
                "webhook": {
                    "endpoint": f"/github/{model}",
                    "port": str(settings.github_port),
                    "method": "POST",
                },
                "events": ["push"],
                "contentType": "json",
                "active": True,
                "insecure": False,
                "webhookSecret": {
                    "name": settings.github_secret,
                    "key": settings.github_secret_key,
                },
            }
        }
    return doc


def _eventsource(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    model = loaded.config.model
    return {
        "apiVersion": EVENTS_API,
        "kind": "EventSource",
        "metadata": {
            "name": eventsource_name(model),
            "namespace": settings.namespace,
            "labels": {"app.kubernetes.io/part-of": "mlops", "mlops.dev/model": model},
        },
        "spec": {
            "eventBusName": settings.eventbus,
            # Webhooks in, events out to the bus: no API call, so an account without a token.
            "template": {"serviceAccountName": settings.eventsource_service_account},
            "service": {
                "ports": [
                    {
                        "name": "webhook",
                        "port": settings.webhook_port,
                        "targetPort": settings.webhook_port,
                    },
                ]
            },
            "webhook": {
                WEBHOOK_EVENT: {
                    "endpoint": f"/push/{model}",
                    "port": str(settings.webhook_port),
                    "method": "POST",
                    # Bearer token checked by the EventSource, from a Secret.
                    "authSecret": {
                        "name": settings.webhook_secret,
                        "key": settings.webhook_secret_key,
                    },
                }
            },
        },
    }


@dataclass(frozen=True)
class PushShape:
    """Where one forge's push payload keeps what the trigger reads (gjson paths).

    From each forge's documented push webhook (golden copies, with their
    sources, in tests/golden/events/): GitHub's `push` event; Gitea's
    `PushPayload` (no `deleted` field: a deleted branch has `after` all
    zeros); GitLab's "Push Hook" (`object_kind: push`, `checkout_sha` null and
    `after` all zeros on deletion, commits oldest first so the head commit is
    `project.git_http_url` to clone).
    """

    clone_url: str
    head_author_name: str
    head_author_email: str
    #: The head commit's message, where the payload has one commit to read it from.
    head_message: str | None = None
    #: Extra anchored matches that say "this is a push" (header, object kind).
    kind: tuple[tuple[str, str], ...] = ()
    #: GitHub sends `deleted: true`; the others only a zero `after`.
    deleted_flag: bool = False


SHAPES = {
    "github": PushShape("body.repository.clone_url", "body.head_commit.author.name",
                        "body.head_commit.author.email", "body.head_commit.message",
                        deleted_flag=True),
    "gitea": PushShape("body.repository.clone_url", "body.head_commit.author.name",
                       "body.head_commit.author.email", "body.head_commit.message",
                       kind=(("header.X-Gitea-Event.0", "^push$"),)),
    # GitLab's `commits` order differs between its docs and real deliveries, so the
    # bot check reads every commit's author (`#.`): a push carrying a bot commit.
    "gitlab": PushShape("body.project.git_http_url", "body.user_name",
                        "body.commits.#.author.email",
                        kind=(("header.X-Gitlab-Event.0", "^Push Hook$"),
                              ("body.object_kind", "^push$"))),
}
ZERO_SHA = "^0{40}$"


def _exact(text: str) -> str:
    """An anchored regex that matches `text` only (Argo Events' string filters are unanchored)."""
    return f"^{re.escape(text)}$"


def _filters(forge: str, settings: PipelineSettings) -> dict[str, Any]:
    """The pushes that train: to the branch, not a deletion, not by our bot (all must hold)."""
    shape = SHAPES[forge]
    data: list[dict[str, Any]] = [
        {"path": path, "type": "string", "value": [pattern]} for path, pattern in shape.kind
    ]
    data.append({"path": "body.ref", "type": "string",
                 "value": [_exact(f"refs/heads/{settings.branch}")]})
    if shape.deleted_flag:
        data.append({"path": "body.deleted", "type": "bool", "value": ["false"]})
    data.append({"path": "body.after", "type": "string", "value": [ZERO_SHA], "comparator": "!="})
    # The bot's own commits never train (its write-back would re-trigger forever); a
    # deletion has no head commit, so this path is missing and the push fails here too.
    bot = _exact(BOT_IDENTITY.email)
    if ".#." in shape.head_author_email:  # a JSON list of emails: match one quoted element
        bot = f'"{re.escape(BOT_IDENTITY.email)}"'
    data.append({"path": shape.head_author_email, "type": "string", "value": [bot],
                 "comparator": "!="})
    return {"data": data}


def submitted_workflow(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """The push Workflow the Sensor submits; parameters and name are filled per event.

    Not the pipeline itself: the pipeline is rendered from the pushed commit's
    `mlops.yaml` by the push Workflow's submit step (`workflows.push`)."""
    model = loaded.config.model
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": f"{model}-push-sha",  # replaced per event: <model>-push-<sha[:12]>
            "namespace": settings.namespace,
            "labels": {PUSH_LABEL: model, "mlops.dev/trigger": "push"},
        },
        "spec": {
            "workflowTemplateRef": {"name": push_template_name(model)},
            "entrypoint": PUSH_ENTRYPOINT,
            "arguments": {
                "parameters": [
                    {"name": "repo", "value": ""},
                    {"name": "revision", "value": ""},
                    {"name": "ref", "value": ""},
                ]
            },
        },
    }


# The Argo UI lists a Workflow by these annotations, Markdown allowed (Argo Workflows
# docs/title-and-description.md, v3.4.4+, Markdown v3.6+). workflowMetadata annotations
# are copied without substitution (operator.go updateWorkflowMetadata, v3.7.9), so the
# Sensor writes them per event. `dest` is an sjson path: dots in the key are escaped.
TITLE_ANNOTATION = "workflows.argoproj.io/title"
DESCRIPTION_ANNOTATION = "workflows.argoproj.io/description"


def annotation_dest(key: str) -> str:
    """The sjson path (Argo Events' `dest`) of `metadata.annotations[key]`."""
    return "metadata.annotations." + key.replace(".", "\\.")


def _go(path: str) -> str:
    """A gjson path of the event (`body.a.b`) as a Go template field (`.Input.body.a.b`)."""
    return ".Input." + path


def ui_annotations(model: str, forge: str) -> dict[str, str]:
    """Go templates (Argo Events' dataTemplate) of the Workflow's title and description."""
    shape = SHAPES[forge]
    title = f"**{model}** @ `{{{{ {_go('body.after')} | substr 0 12 }}}}`"
    description = (f"{{{{ {_go(shape.head_author_name)} }}}} pushed "
                   f"`{{{{ {_go('body.ref')} }}}}`")
    if shape.head_message:
        description += f": {{{{ {_go(shape.head_message)} | trunc 200 }}}}"
    return {TITLE_ANNOTATION: title, DESCRIPTION_ANNOTATION: description}


def _trigger(dependency: str, forge: str, loaded: LoadedConfig,
             settings: PipelineSettings) -> dict[str, Any]:
    model = loaded.config.model

    def param(key: str, dest: str) -> dict[str, Any]:
        return {"src": {"dependencyName": dependency, "dataKey": key}, "dest": dest}

    shape = SHAPES[forge]
    return {
        "template": {
            "name": f"train-{dependency}",
            "conditions": dependency,
            "argoWorkflow": {
                "operation": "submit",
                "source": {"resource": submitted_workflow(loaded, settings)},
                "parameters": [
                    param(shape.clone_url, "spec.arguments.parameters.0.value"),
                    param("body.after", "spec.arguments.parameters.1.value"),
                    param("body.ref", "spec.arguments.parameters.2.value"),
                    {
                        "src": {
                            "dependencyName": dependency,
                            "dataTemplate": f"{model}-push-"
                                            f"{{{{ .Input.body.after | substr 0 12 | lower }}}}",
                        },
                        "dest": "metadata.name",
                    },
                    *[
                        {
                            "src": {"dependencyName": dependency, "dataTemplate": template},
                            "dest": annotation_dest(key),
                        }
                        for key, template in ui_annotations(model, forge).items()
                    ],
                ],
            },
        },
        # A refused duplicate (AlreadyExists) is the dedup working, so
        # retries are few and short; they are for API server hiccups.
        "retryStrategy": {"steps": 3, "duration": "10s", "factor": 2},
    }


def _dependencies(settings: PipelineSettings) -> list[tuple[str, str, str]]:
    """(dependency, event name, payload shape): the GitHub source for a GitHub repo (and
    the generic webhook in GitHub's shape, for scripts); the webhook for Gitea/GitLab."""
    if settings.model_forge == "github":
        return [("github-push", GITHUB_EVENT, "github"), ("webhook-push", WEBHOOK_EVENT, "github")]
    return [("webhook-push", WEBHOOK_EVENT, settings.model_forge)]


def build_sensor(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """Sensor: filtered push -> Workflow named after model and commit."""
    model = loaded.config.model
    source = eventsource_name(model)
    deps = _dependencies(settings)
    return {
        "apiVersion": EVENTS_API,
        "kind": "Sensor",
        "metadata": {
            "name": f"{model}-train",
            "namespace": settings.namespace,
            "labels": {"app.kubernetes.io/part-of": "mlops", "mlops.dev/model": model},
        },
        "spec": {
            "eventBusName": settings.eventbus,
            "template": {"serviceAccountName": settings.sensor_service_account},
            "dependencies": [
                {
                    "name": dep,
                    "eventSourceName": source,
                    "eventName": event,
                    "filters": _filters(forge, settings),
                }
                for dep, event, forge in deps
            ],
            "triggers": [_trigger(dep, forge, loaded, settings) for dep, _, forge in deps],
        },
    }
