"""The pipeline's step-template builders: each one's template stands alone, and the DAG
runs every template built (`workflows.pipeline._STEP_TEMPLATES`, `_pipeline_dag`).

The rendered whole is pinned by the golden files and the schema tests
(test_workflows_render.py); these check the parts the assembly is made of.
"""

import pathlib

import pytest
from hera.workflows import WorkflowTemplate

from tests.manifest_validation import validate_manifest
from workflows.config import load_config
from workflows.pipeline import (
    _STEP_TEMPLATES,
    ENTRYPOINT,
    EXIT_HANDLER,
    _Render,
    build_workflow_template,
)
from workflows.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"
# Every optional claim and Secret set: each builder's conditional parts appear.
EVERY_OPTION = dict(base_pull_secret="base-pull", build_cache_claim="build-cache",
                    data_claim="datasets", data_cache_claim="data-cache",
                    image_pull_secrets=["pull"], workspace_storage_class="fast")
# No data pins, no warm start, and a full job no bigger than the smoke job: the three
# builders that may return None (prepare-data, find-production, smoke-train) do.
LEAN = (
    "model: lean-model\ntraining:\n  command: [python, train.py]\n"
    "  smoke: {template: training-small, overrides: {args: {max-steps: 20}}}\n"
    "  full: {template: training-medium, overrides: {args: {max-steps: 5}}}\n"
    "evaluation: {annotations: val.json}\n"
)


def _lean(tmp_path):
    (tmp_path / "mlops.yaml").write_text(LEAN)
    return load_config(tmp_path)


@pytest.mark.parametrize("options", [{}, EVERY_OPTION], ids=["defaults", "every-option"])
def test_each_builder_alone_gives_a_template_argo_accepts(options):
    loaded, settings = load_config(EXAMPLE), load_settings(**options)
    rendered = {t["name"]: t for t in
                build_workflow_template(loaded, settings).to_dict()["spec"]["templates"]}
    for build in _STEP_TEMPLATES:
        template = build(_Render(loaded, settings))
        assert template is not None, f"{build.__name__}: the example has every step"
        alone = WorkflowTemplate(name="one-step", entrypoint=template.name,
                                 templates=[template]).to_dict()
        validate_manifest(alone)  # the Argo Workflows schema, through the one template
        # The assembly adds nothing to a step's template: what its builder gives is rendered.
        assert alone["spec"]["templates"] == [rendered[template.name]], build.__name__


def test_the_dag_runs_every_template_built_and_only_those(tmp_path):
    for loaded in (load_config(EXAMPLE), _lean(tmp_path)):
        settings = load_settings()
        built = [t.name for t in (b(_Render(loaded, settings)) for b in _STEP_TEMPLATES) if t]
        spec = build_workflow_template(loaded, settings).to_dict()["spec"]
        names = [t["name"] for t in spec["templates"]]
        assert names == [*built, ENTRYPOINT]  # in the table's order, the DAG last
        tasks = next(t for t in spec["templates"] if t["name"] == ENTRYPOINT)["dag"]["tasks"]
        assert sorted(t["template"] for t in tasks) == sorted(set(built) - {EXIT_HANDLER})
        assert spec["onExit"] == EXIT_HANDLER


def test_the_optional_steps_are_absent_from_a_lean_repo(tmp_path):
    loaded, settings = _lean(tmp_path), load_settings()
    absent = [b.__name__ for b in _STEP_TEMPLATES if b(_Render(loaded, settings)) is None]
    assert absent == ["_prepare_data_template", "_smoke_train_template",
                      "_find_production_template"]
    tasks = {t["name"]: t for t in next(
        t for t in build_workflow_template(loaded, settings).to_dict()["spec"]["templates"]
        if t["name"] == ENTRYPOINT)["dag"]["tasks"]}
    # train waits on what smoke-train would have: the pushed image only.
    assert tasks["train"]["depends"] == "push-image"
