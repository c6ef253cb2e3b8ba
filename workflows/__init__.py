"""The pipeline room: a model repo's `mlops.yaml`, the Hera DAG, its step entrypoints.

The same definition renders for a cluster (Argo Workflows, Argo Events, PaddleJob)
and is acted out by the local runtime (`local.argo`, design §2). The doors below are
what the face and the local runtime may import; the rest is the pipeline's own.
"""

__all__ = [
    "binding",          # what a push may not choose: the platform's settings for a repo
    "config",           # ModelRepoConfig: mlops.yaml, checked once
    "errors",           # ConfigError, StepError
    "expressions",      # Argo's expression languages, for the local runner (pure)
    "jobplan",          # which training jobs a push needs (the plan's annotations)
    "lint",             # rendered manifests against the official schemas, offline
    "paddlejob_local",  # a rendered PaddleJob run on this machine as paddle-operator would
    "pipeline",         # the pipeline's WorkflowTemplate and the names it sets
    "pod_paths",        # where the pods find things; the local runner maps the same names
    "preconditions",    # what a cluster must allow before the manifests can run (pure)
    "push",             # what one push runs: the push Workflow, then the pipeline's
    "render",           # every manifest of a model repo's pipeline, as YAML files
    "run_compare",      # runs side by side (`mlops runs compare`, the UI)
    "run_events",       # a local run's typed events and its run.json
    "settings",         # PipelineSettings: the cluster-side settings of the pipeline
    "step_container",   # what every step container shares (the runner reads its env names)
    "steps",            # the step entrypoints, by name (STEPS)
    "submit",           # submit a commit to an Argo Server
]
