"""What one push runs: the push Workflow, and the pipeline Workflow of the pushed commit (pure).

The push WorkflowTemplate `<model>-push` checks the commit out, then its
`submit-pipeline` step renders that commit's own pipeline (`child_workflow`) and
creates it with the spec inline (docs/inside-workflows.md, "One push, two stages").
"""

import copy
import json
from typing import Any

from contracts.names import SHA_CHARS
from workflows.binding import PlatformBinding, applied, binding_arg, binding_for
from workflows.config import LoadedConfig
from workflows.jobplan import PLAN_ANNOTATIONS
from workflows.pipeline import build_workflow_template, workflow_name
from workflows.pod_paths import LOCAL_ANNOTATION, PATH_ENV
from workflows.settings import PipelineSettings

PUSH_ENTRYPOINT = "push"
SUBMIT_STEP = "submit-pipeline"
#: What the Sensor sets on the pipeline Workflow (and now on the push Workflow): copied.
UI_ANNOTATIONS = ("workflows.argoproj.io/title", "workflows.argoproj.io/description")
#: The parameters the Sensor fills per push, in its order (`workflows.argo_events`).
PUSH_PARAMETERS = ("repo", "revision", "ref")
PUSH_LABEL = "mlops.dev/push"  # not `mlops.dev/model`: `mlops` lists pipeline runs by that
WORKSPACE_SIZE = "1Gi"  # one checkout of a model repo (the data and outputs are elsewhere)


def push_template_name(model: str) -> str:
    """The static WorkflowTemplate every push of `model` runs first."""
    return f"{model}-push"


def push_workflow_name(model: str, sha: str) -> str:
    """The push Workflow of one commit: a duplicate delivery collides here already."""
    return f"{model}-push-{sha[:SHA_CHARS].lower()}"


def settings_arg(settings: PipelineSettings) -> str:
    """The settings as the submit step's `--settings` argument (JSON, every field)."""
    return json.dumps(settings.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def build_push_template(loaded: LoadedConfig, settings: PipelineSettings,
                        binding: PlatformBinding | None = None) -> dict[str, Any]:
    """The `<model>-push` WorkflowTemplate: checkout, then render and create the pipeline.

    It depends on `mlops.yaml` only through what the platform binds (`binding`, by
    default read from `loaded`, the platform's own copy: the model's name, the GitOps
    repo, its branch and forge; `workflows.binding`) and the pipeline's checkout
    template (image, git credentials): what a commit trains is read at run time, so a
    push that changes training needs no re-render of this. The binding goes to the
    submit step as `--platform`, which refuses a commit that names others."""
    binding = binding or binding_for(loaded)
    loaded = applied(loaded, binding)
    model = loaded.config.model
    spec = build_workflow_template(loaded, settings).to_dict()["spec"]
    checkout = next(t for t in spec["templates"] if t["name"] == "checkout")
    return copy.deepcopy({  # shared sub-objects would dump as YAML anchors
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {
            "name": push_template_name(model),
            "namespace": settings.namespace,
            "labels": {"app.kubernetes.io/part-of": "mlops", PUSH_LABEL: model},
        },
        "spec": _push_spec(spec, checkout, _submit_template(settings, binding, checkout),
                           settings),
    })


def _submit_template(settings: PipelineSettings, binding: PlatformBinding,
                     checkout: dict[str, Any]) -> dict[str, Any]:
    """`submit-pipeline`: render the checkout's pipeline with the platform's settings and
    binding (baked into its args), and create it (`workflows.steps.submit_pipeline`)."""
    submit = {
        "name": SUBMIT_STEP,
        "metadata": {"annotations": {LOCAL_ANNOTATION: SUBMIT_STEP}},
        # The one pod of a push that holds a token: its own account's, which may create
        # Workflows and nothing else (workflows/rbac.py). Argo passes only a `false`
        # automount to the pod (workflowpod.go setupServiceAccount, v3.7.9), so `true`
        # here lifts the workflow's `false` and the account's default mounts the token.
        "serviceAccountName": settings.submitter_service_account,
        "automountServiceAccountToken": True,
        "activeDeadlineSeconds": settings.step_deadline_seconds,
        "retryStrategy": checkout.get("retryStrategy"),
        "container": {
            "name": "",
            "image": settings.tool_image,
            "command": ["mlops"],
            "args": [
                "step", SUBMIT_STEP,
                "--repo", "$(MLOPS_REPO)", "--out", "$(MLOPS_OUT)",
                "--outputs", "$(MLOPS_OUTPUTS)",
                "--repo-url", "{{workflow.parameters.repo}}",
                "--revision", "{{workflow.parameters.revision}}",
                "--ref", "{{workflow.parameters.ref}}",
                # Every annotation of this Workflow as JSON (operator.go setGlobalParameters,
                # v3.7.9): the title and description the Sensor wrote, for the pipeline's.
                "--annotations", "{{workflow.annotations.json}}",
                "--settings", settings_arg(settings),
                "--platform", binding_arg(binding),
            ],
            "env": [*({"name": k, "value": v} for k, v in PATH_ENV.items()),
                    {"name": "HOME", "value": "/tmp"}],
            "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"},
                             {"name": "tmp", "mountPath": "/tmp"}],
            "securityContext": checkout["container"].get("securityContext"),
            "resources": settings.resources_for(SUBMIT_STEP),
            # A broken mlops.yaml's one-line error becomes the container's termination
            # message, which Argo shows as the step's message in the UI (operator.go
            # inferFailedReason appends `terminated.message`, v3.7.9).
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
        "outputs": {"parameters": [
            {"name": "workflow", "valueFrom": {"path": f"{PATH_ENV['MLOPS_OUTPUTS']}/workflow"}},
        ]},
    }
    return {k: v for k, v in submit.items() if v is not None}


def _push_spec(pipeline: dict[str, Any], checkout: dict[str, Any], submit: dict[str, Any],
               settings: PipelineSettings) -> dict[str, Any]:
    """The push Workflow's spec: the pipeline's accounts and pod settings, its own small
    workspace, and the DAG checkout -> submit-pipeline."""
    pvc: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                           "resources": {"requests": {"storage": WORKSPACE_SIZE}}}
    if settings.workspace_storage_class:
        pvc["storageClassName"] = settings.workspace_storage_class
    push_spec: dict[str, Any] = {
        "entrypoint": PUSH_ENTRYPOINT,
        "serviceAccountName": pipeline["serviceAccountName"],
        "automountServiceAccountToken": False,
        "executor": pipeline["executor"],
        # The Sensor sets all three; these defaults are for a push Workflow submitted by hand.
        "arguments": {"parameters": [
            {"name": "repo", "value": ""}, {"name": "revision", "value": ""},
            {"name": "ref", "value": f"refs/heads/{settings.branch}"}]},
        "activeDeadlineSeconds": 2 * settings.step_deadline_seconds,
        "podGC": pipeline.get("podGC"),
        "volumeClaimGC": {"strategy": "OnWorkflowCompletion"},
        "ttlStrategy": pipeline.get("ttlStrategy"),
        "securityContext": pipeline.get("securityContext"),
        "imagePullSecrets": pipeline.get("imagePullSecrets"),
        "volumeClaimTemplates": [{"metadata": {"name": "workspace"}, "spec": pvc}],
        "volumes": [v for v in pipeline.get("volumes") or [] if v["name"] == "tmp"],
        "templates": [
            {"name": PUSH_ENTRYPOINT, "dag": {"tasks": [
                {"name": "checkout", "template": "checkout"},
                {"name": SUBMIT_STEP, "template": SUBMIT_STEP, "depends": "checkout"},
            ]}},
            checkout,
            submit,
        ],
    }
    return {k: v for k, v in push_spec.items() if v is not None}


def child_workflow(loaded: LoadedConfig, settings: PipelineSettings, *, repo: str,
                   revision: str, ref: str, annotations: dict[str, str]) -> dict[str, Any]:
    """The pipeline Workflow of one commit, rendered from that commit's `mlops.yaml`.

    Name, labels, UI annotations and parameters as the Sensor set them when it
    submitted the pipeline itself; the spec is the pipeline's, inline."""
    model = loaded.config.model
    rendered = build_workflow_template(loaded, settings).to_dict()
    spec = rendered["spec"]
    # The GitOps repo as well: the bound one (`workflows.binding.bind`), never the
    # parameter's default, which a commit's own render would have chosen.
    given = {"repo": repo, "revision": revision, "ref": ref,
             "gitops-repo": loaded.config.promotion.gitops.repo}
    params = [{**p, "value": given[p["name"]]} if p["name"] in given else p
              for p in spec.get("arguments", {}).get("parameters", [])]
    meta: dict[str, Any] = {
        "name": workflow_name(model, revision),
        "namespace": settings.namespace,
        "labels": {"mlops.dev/model": model, "mlops.dev/trigger": "push"},
    }
    shown = {k: annotations[k] for k in UI_ANNOTATIONS if annotations.get(k)}
    # why this commit's DAG has no smoke job or fewer workers (`workflows.jobplan`): on the
    # Workflow, where the Argo UI and the local runner show it
    rendered_annotations = rendered["metadata"].get("annotations") or {}
    shown |= {k: rendered_annotations[k] for k in PLAN_ANNOTATIONS if k in rendered_annotations}
    if shown:
        meta["annotations"] = shown
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": meta,
            "spec": {**spec, "arguments": {**spec.get("arguments", {}), "parameters": params}}}
