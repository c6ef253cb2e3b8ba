"""Argo Events: a push to the model repo submits the pipeline for that commit.

An EventSource receives push webhooks (GitHub, and a generic webhook that
accepts the same GitHub-style push payload, as Gitea/Forgejo send it or a
script can post it), and a Sensor turns one push into one Workflow from the
WorkflowTemplate with parameters `repo`, `revision` and `ref`.

Three rules keep the trigger honest:

* Only pushes of the configured branch that are not deletions start a run.
* Commits authored by our own bot identity never start training: its
  write-back commits would otherwise re-trigger the pipeline forever (the
  loop Argo Events users report).
* Duplicate deliveries do not start duplicate runs. Argo Events gives every
  delivery a fresh event id, so dedup cannot rely on it; instead the Workflow
  name is derived from the model and the commit sha
  (`workflows.pipeline.workflow_name`), and the API server refuses a second
  Workflow with the same name.
"""

from typing import Any

from workflows.config import LoadedConfig
from workflows.pipeline import ENTRYPOINT
from workflows.settings import PipelineSettings

EVENTS_API = "argoproj.io/v1alpha1"
GITHUB_EVENT = "github"
WEBHOOK_EVENT = "webhook"


def eventsource_name(model: str) -> str:
    """The EventSource of one model repo."""
    return f"{model}-push"


def build_eventsource(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """EventSource with a GitHub push webhook and a generic push webhook."""
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
            "service": {
                "ports": [
                    {
                        "name": "github",
                        "port": settings.github_port,
                        "targetPort": settings.github_port,
                    },
                    {
                        "name": "webhook",
                        "port": settings.webhook_port,
                        "targetPort": settings.webhook_port,
                    },
                ]
            },
            "github": {
                GITHUB_EVENT: {
                    "repositories": [
                        {
                            "owner": settings.github_owner,
                            "names": [settings.github_repository or model],
                        }
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


def _filters(settings: PipelineSettings) -> dict[str, Any]:
    # GitHub wraps the payload in `body`; the generic webhook is posted in
    # the same shape, so one filter set serves both dependencies.
    return {
        "data": [
            {"path": "body.ref", "type": "string", "value": [f"refs/heads/{settings.branch}"]},
            {"path": "body.deleted", "type": "bool", "value": ["false"]},
        ],
        "exprs": [
            {
                "expr": f'author != "{settings.bot_identity}" && email != "{settings.bot_identity}"',
                "fields": [
                    {"name": "author", "path": "body.head_commit.author.name"},
                    {"name": "email", "path": "body.head_commit.author.email"},
                ],
            }
        ],
    }


def submitted_workflow(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """The Workflow the Sensor submits; parameters and name are filled per event."""
    model = loaded.config.model
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": f"{model}-sha",  # replaced per event: <model>-<sha[:12]>
            "namespace": settings.namespace,
            "labels": {"mlops.dev/model": model, "mlops.dev/trigger": "push"},
        },
        "spec": {
            "workflowTemplateRef": {"name": model},
            "entrypoint": ENTRYPOINT,
            "arguments": {
                "parameters": [
                    {"name": "repo", "value": ""},
                    {"name": "revision", "value": ""},
                    {"name": "ref", "value": ""},
                ]
            },
        },
    }


def _trigger(dependency: str, loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    model = loaded.config.model

    def param(key: str, dest: str) -> dict[str, Any]:
        return {"src": {"dependencyName": dependency, "dataKey": key}, "dest": dest}

    return {
        "template": {
            "name": f"train-{dependency}",
            "conditions": dependency,
            "argoWorkflow": {
                "operation": "submit",
                "source": {"resource": submitted_workflow(loaded, settings)},
                "parameters": [
                    param("body.repository.clone_url", "spec.arguments.parameters.0.value"),
                    param("body.after", "spec.arguments.parameters.1.value"),
                    param("body.ref", "spec.arguments.parameters.2.value"),
                    {
                        "src": {
                            "dependencyName": dependency,
                            "dataTemplate": f"{model}-{{{{ .Input.body.after | substr 0 12 | lower }}}}",
                        },
                        "dest": "metadata.name",
                    },
                ],
            },
        },
        # A refused duplicate (AlreadyExists) is the dedup working, so
        # retries are few and short; they are for API server hiccups.
        "retryStrategy": {"steps": 3, "duration": "10s", "factor": 2},
    }


def build_sensor(loaded: LoadedConfig, settings: PipelineSettings) -> dict[str, Any]:
    """Sensor: filtered push -> Workflow named after model and commit."""
    model = loaded.config.model
    source = eventsource_name(model)
    deps = [("github-push", GITHUB_EVENT), ("webhook-push", WEBHOOK_EVENT)]
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
                    "filters": _filters(settings),
                }
                for dep, event in deps
            ],
            "triggers": [_trigger(dep, loaded, settings) for dep, _ in deps],
        },
    }
