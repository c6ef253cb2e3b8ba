"""Pipeline step entrypoints, by the name the DAG and `mlops step` use.

Each module has `build_parser()` (its arguments), `main(argv)` (what a
container runs as `mlops step NAME ...`, and what the local runner calls in
process) and, where the step does work, a typed `run(...)`. The Argo
templates build these argv with `workflows.step_container.step_args`; a test parses
every rendered argv with the real parsers (tests/workflows/test_rendered_argv.py).
"""

# The doors: the table, and each step a container runs by name (`mlops step NAME`, the
# local runner); `common`, `data_lineage` and `training_job` are the steps' own parts.
__all__ = [
    "STEPS", "evaluate", "gate", "prepare_data", "production", "propose", "publish",
    "record_outcome", "smoke_train", "submit_pipeline", "train",
]

STEPS = {
    "prepare-data": "workflows.steps.prepare_data",
    "smoke-train": "workflows.steps.smoke_train",
    "train": "workflows.steps.train",
    "find-production": "workflows.steps.production",
    "evaluate": "workflows.steps.evaluate",
    "gate": "workflows.steps.gate",
    "publish": "workflows.steps.publish",
    "propose": "workflows.steps.propose",
    "record-outcome": "workflows.steps.record_outcome",
    "submit-pipeline": "workflows.steps.submit_pipeline",
}
