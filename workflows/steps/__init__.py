"""Pipeline step entrypoints, by the name the DAG and `mlops step` use."""

STEPS = {
    "smoke-train": "workflows.steps.smoke_train",
    "train": "workflows.steps.train",
    "evaluate": "workflows.steps.evaluate",
    "gate": "workflows.steps.gate",
    "publish": "workflows.steps.publish",
}
