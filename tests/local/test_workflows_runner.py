"""The local runner acts out the same Hera DAG: order, parameters, `when`, failures.

Uses the fake model repo (tests/fixtures/workflows.py): its train.py writes
a stub export at once, so these tests check orchestration; evaluation and
the gate that follow are the real steps.
"""

import hashlib
import importlib.metadata
import json
import pathlib
import platform
import subprocess

import pytest
import yaml
from hera.workflows import DAG, Container, Env, Parameter, Task
from hera.workflows import models as m

from cogs.containers import expand_refs
from local.argo.runner import dag_tasks, environment_digest, run_workflow
from mlops.cli import main as cli
from tests.fixtures.workflows import make_fake_model_repo
from workflows import run_events
from workflows.config import load_config
from workflows.errors import StepError
from workflows.expressions import (
    ExpressionError,
    depends_on,
    eval_depends,
    eval_when,
    substitute,
)
from workflows.pipeline import build_workflow_template
from workflows.pod_paths import PATH_ENV
from workflows.settings import load_settings

PIPELINE = ["checkout", "build-image", "push-image", "smoke-train", "train", "evaluate", "gate",
            "publish-model", "propose"]


def _wt(repo):
    return build_workflow_template(load_config(repo), load_settings())


def _quiet(_line):
    pass


def test_runs_the_dag_in_order_passing_parameters(fake_model_repo, tmp_path):
    out = tmp_path / "run"
    result = run_workflow(_wt(fake_model_repo), fake_model_repo, out, echo=_quiet)
    assert [t.name for t in result.tasks] == [*PIPELINE, "record-outcome"]
    phases = {t.name: t.phase for t in result.tasks}
    assert all(phases[n] == "Succeeded" for n in PIPELINE[:7] + ["record-outcome"]), phases
    # The gate passed, but no GitOps repo is configured: `when` ends the run at the gate.
    assert phases["publish-model"] == phases["propose"] == "Skipped"
    assert "gitops-repo" in result.task("propose").message
    assert not any((out / "models").iterdir())  # nothing published for no proposal
    assert result.status == "Succeeded"
    sha = result.task("checkout").outputs["revision"]
    assert result.workflow == f"fake-detector-{sha[:12]}"
    assert (
        result.task("build-image").outputs["image"].startswith("local/fake-detector-train@sha256:")
    )
    # no registry: push-image passes the built image on, and the jobs are given that
    assert result.task("push-image").outputs["image"] == result.task("build-image").outputs["image"]
    assert result.task("evaluate").outputs["map50"] == "1.000000"
    assert result.task("gate").outputs["passed"] == "true"
    assert result.task("train").outputs["job"] == f"{result.workflow}-full"
    # The PaddleJob only ran the repo's command; evaluate is what checks the export.
    assert result.task("evaluate").outputs["model_dir"] == str(out / "full" / "model")
    assert result.task("evaluate").artifacts["report"] == str(out / "full" / "metrics.json")
    # Lineage: the training saw the commit and the workflow id.
    text = (out / "full" / "model" / "model.yaml").read_text()
    assert f"training_commit: {sha}" in text and f"workflow_id: {result.workflow}" in text, text
    # Records a user can find.
    run = json.loads((out / "run.json").read_text())
    assert [t["name"] for t in run["tasks"]][:9] == PIPELINE
    assert all((out / "logs" / f"{n}.log").is_file() for n in PIPELINE[:7])
    assert "'--max-steps', '20'" in (out / "logs" / "smoke-train.log").read_text()
    assert "PASS" in (out / "report.md").read_text()
    # run.json is the one record: the exit handler's outcome is folded in, its file gone.
    assert run["status"] == "Succeeded" and run["gate"]["passed"] is True and run["finished_at"]
    assert not (out / "outcome.json").exists()
    prom = (out / "metrics.prom").read_text()
    assert ('argo_workflows_mlops_gate_outcomes_total{model="fake-detector",passed="true",'
            'outcome="pass"} 1' in prom)
    assert 'argo_workflows_mlops_candidate_map50{model="fake-detector"} 1.000000' in prom
    assert (out / "environment.txt").read_text().startswith("python ")



def test_the_environment_digest_lists_what_importlib_metadata_reads():
    """The build-image stand-in reads each distribution's headers once; the list is the one
    `Distribution.metadata` and `.version` give (CPython 3.11 Lib/importlib/metadata/
    __init__.py: METADATA, else PKG-INFO, parsed by email.message_from_string), on this
    very environment."""
    dists = importlib.metadata.distributions()
    listed = sorted({f"{d.metadata['Name']}=={d.version}" for d in dists if d.metadata["Name"]},
                    key=str.lower)
    digest, text = environment_digest()
    assert text == (f"python {platform.python_version()} {platform.machine()}\n"
                    + "\n".join(listed) + "\n")
    assert len(listed) > 20 and digest == hashlib.sha256(text.encode()).hexdigest()

def test_propose_runs_mlops_promote_when_the_gate_passes(fake_model_repo, tmp_path, capsys):
    """The whole DAG, propose included, against a real GitOps bare repo."""
    gitops = tmp_path / "gitops.git"
    assert cli(["gitops", "init", str(gitops)]) == 0
    out = tmp_path / "run"
    code = cli(["run", str(fake_model_repo), "--out", str(out), "--param", f"gitops-repo={gitops}"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    run = json.loads((out / "run.json").read_text())
    phases = {t["name"]: t["phase"] for t in run["tasks"]}
    assert phases["propose"] == "Succeeded", (out / "logs" / "propose.log").read_text()
    # The Workflow's global output (Argo's status.outputs) is the PR (issue 25, defect 5).
    pr_url = next(t for t in run["tasks"] if t["name"] == "propose")["outputs"]["pr-url"]
    assert pr_url and run["global_outputs"] == {"pr-url": pr_url}
    log = (out / "logs" / "propose.log").read_text()
    assert "fake-detector" in log

    branches = subprocess.run(["git", "--git-dir", str(gitops), "branch", "--list"],
                              capture_output=True, text=True, check=True).stdout
    assert len(branches.split()) >= 1
    # The model was published to the models volume's stand-in, and the
    # proposed Deployment points there, not at the run's workspace.
    version = yaml.safe_load((out / "full" / "model" / "model.yaml").read_text())["version"]
    published = out / "models" / "fake-detector" / str(version)
    assert (published / "model.yaml").is_file()
    outputs = {t["name"]: t.get("outputs", {}) for t in run["tasks"]}
    assert outputs["publish-model"]["model-dir"] == str(published)
    branch = branches.split()[-1]
    manifests = subprocess.run(["git", "--git-dir", str(gitops), "grep", "-h", "model-uri",
                                branch], capture_output=True, text=True).stdout
    assert published.as_uri() in manifests, manifests


def test_failed_gate_skips_propose_by_its_when(tmp_path, monkeypatch):
    repo = make_fake_model_repo(tmp_path / "repo", gate_min=0.9)
    monkeypatch.setenv("FAKE_BOX_SHIFT", "12")  # IoU 0.25: mAP 0
    gitops = tmp_path / "gitops.git"
    assert cli(["gitops", "init", str(gitops)]) == 0  # the gate reads production from it
    result = run_workflow(
        _wt(repo), repo, tmp_path / "run", parameters={"gitops-repo": str(gitops)}, echo=_quiet,
    )
    assert result.task("gate").phase == "Succeeded"  # a FAIL verdict is an output, not a crash
    assert result.task("gate").outputs["passed"] == "false"
    assert result.task("propose").phase == "Skipped"
    assert "when" in result.task("propose").message
    assert result.status == "Succeeded"
    # The exit handler exports the PR link even so (issue 25, defect 5): as in Argo, only
    # an output with a globalName reaches the Workflow's status.outputs.
    assert list(result.global_outputs) == ["pr-url"]


def test_stops_at_a_failing_step_with_its_log(tmp_path, monkeypatch):
    repo = make_fake_model_repo(tmp_path / "repo")
    monkeypatch.setenv("FAKE_TRAIN_FAIL", "full")
    lines = []
    result = run_workflow(_wt(repo), repo, tmp_path / "run", echo=lines.append)
    phases = {t.name: t.phase for t in result.tasks}
    assert phases["smoke-train"] == "Succeeded"
    assert phases["train"] == "Failed"
    assert [phases[n] for n in ("evaluate", "gate", "propose")] == ["Omitted"] * 3
    assert phases["record-outcome"] == "Succeeded"  # the exit handler still records
    assert result.status == "Failed"
    printed = "\n".join(lines)
    assert "FAILED at train" in printed and "crashes on purpose" in printed
    assert str(tmp_path / "run" / "logs" / "train.log") in printed
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "Failed" and run["failures"][0]["displayName"] == "train"
    assert list(run["global_outputs"]) == ["pr-url"]  # set by the exit handler on every run
    # The same story as typed events, in the order it happened, for readers that follow it.
    events = run_events.read(tmp_path / "run")
    started = [e.task for e in events if e.kind == "task_started"]
    finished_ = {e.task: e.phase for e in events if e.kind == "task_finished"}
    assert started == ["checkout", "build-image", "push-image", "smoke-train", "train",
                       "record-outcome"]
    assert finished_ == phases
    assert [e.kind for e in (events[0], events[-1])] == ["run_started", "run_finished"]
    assert run_events.finished(events).phase == "Failed"
    assert run_events.finished(events).message.startswith("train: PaddleJob ")
    assert next(e for e in events if e.task == "train" and e.kind == "task_started").log \
        == str(tmp_path / "run" / "logs" / "train.log")


def test_adding_a_task_to_the_hera_dag_makes_the_runner_run_it(fake_model_repo, tmp_path):
    """One definition: a new task in the Hera object runs locally with no second edit."""
    wt = _wt(fake_model_repo)
    card = Container(
        name="report-card",
        image="python:3.11",
        command=["python", "-c"],
        args=[
            (
                "import os, pathlib, sys; "
                "pathlib.Path(os.environ['MLOPS_OUTPUTS'], 'card')"
                ".write_text('map50=' + sys.argv[1])"
            ),
            "{{inputs.parameters.map50}}",
        ],
        env=[Env(name=k, value=v) for k, v in PATH_ENV.items()],
        inputs=[Parameter(name="map50")],
        outputs=[
            Parameter(name="card", value_from=m.ValueFrom(path=f"{PATH_ENV['MLOPS_OUTPUTS']}/card"))
        ],
    )
    wt.templates.append(card)
    dag = next(t for t in wt.templates if isinstance(t, DAG))
    dag.tasks.append(
        Task(
            name="report-card",
            template=card,
            depends="evaluate",
            arguments=[
                Parameter(name="map50", value="{{tasks.evaluate.outputs.parameters.map50}}")
            ],
        )
    )
    result = run_workflow(wt, fake_model_repo, tmp_path / "run", echo=_quiet)
    assert result.task("report-card").phase == "Succeeded"
    assert result.task("report-card").outputs["card"] == "map50=1.000000"
    names = [t.name for t in result.tasks]
    assert names.index("evaluate") < names.index("report-card")


def test_a_command_that_cannot_start_fails_the_run_with_its_error(fake_model_repo, tmp_path):
    """Issue 12: `mlops GROUP --help` failing made the task *Skipped* (a broken import
    became a green run). Now the task runs as its pod would and fails with the CLI's error.

    The DAG keeps only checkout, which the broken task depends on: the pipeline's other
    tasks (two PaddleJobs, each a `paddle.distributed.launch`) have no part in this."""
    wt = _wt(fake_model_repo)
    broken = Container(name="broken", image="python:3.11", command=["mlops"],
                       args=["no-such-group", "--flag"])
    wt.templates.append(broken)
    dag = next(t for t in wt.templates if isinstance(t, DAG))
    dag.tasks = [t for t in dag.tasks if t.name == "checkout"]
    dag.tasks.append(Task(name="broken", template=broken, depends="checkout"))
    result = run_workflow(wt, fake_model_repo, tmp_path / "run", echo=_quiet)
    task = result.task("broken")
    assert task.phase == "Failed" and "exited with code 2" in task.message
    assert "invalid choice: 'no-such-group'" in pathlib.Path(task.log).read_text()
    assert result.status == "Failed"


def test_dag_order_follows_depends_not_definition_order(fake_model_repo):
    doc = _wt(fake_model_repo).to_dict()
    dag = next(t for t in doc["spec"]["templates"] if t["name"] == "pipeline")
    dag["dag"]["tasks"].reverse()
    assert [t["name"] for t in dag_tasks(doc)] == PIPELINE


def test_cycles_and_unknown_dependencies_are_errors(fake_model_repo):
    doc = _wt(fake_model_repo).to_dict()
    dag = next(t for t in doc["spec"]["templates"] if t["name"] == "pipeline")
    dag["dag"]["tasks"][0]["depends"] = "propose"
    with pytest.raises(StepError, match="cycle"):
        dag_tasks(doc)
    dag["dag"]["tasks"][0]["depends"] = "nope"
    with pytest.raises(StepError, match="unknown task"):
        dag_tasks(doc)


def test_cli_run(fake_model_repo, tmp_path, capsys):
    out = tmp_path / "cli-run"
    code = cli(["run", str(fake_model_repo), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "mAP@0.5: 1.000000" in printed and "PASSED" in printed
    assert str(out / "report.md") in printed and str(out / "run.json") in printed


def test_cli_run_broken_config(tmp_path, capsys):
    (tmp_path / "mlops.yaml").write_text("model: Bad_Name\n")
    assert cli(["run", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "mlops.yaml" in err and "model" in err


@pytest.mark.parametrize(
    "text, expected",
    [
        ("true == true", True),
        ("false == true", False),
        ("0.91 >= 0.9 && 'a' != \"b\"", True),
        ("!(1 < 2) || false", False),
        ("(true)", True),
    ],
)
def test_when_expressions(text, expected):
    assert eval_when(text) is expected


def test_depends_expressions():
    status = {"a": "Succeeded", "b": "Failed", "c": "Skipped"}
    assert depends_on("a && (b.Failed || c)") == ["a", "b", "c"]
    assert eval_depends("a && c", status)  # bare name: Succeeded or Skipped
    assert not eval_depends("b", status)
    assert eval_depends("b.Failed", status)
    assert not eval_depends("c.Succeeded", status)
    with pytest.raises(ExpressionError):
        eval_depends("a.Finished", status)


def test_substitution_and_env_expansion():
    assert substitute("x={{ a.b }}", {"a.b": "1"}) == "x=1"
    with pytest.raises(ExpressionError, match="unresolved"):
        substitute("{{tasks.nope.outputs.parameters.x}}", {}, "task t")
    assert expand_refs("$(MLOPS_OUT)/full $(OTHER)", {"MLOPS_OUT": "/o"}) == "/o/full $(OTHER)"


def test_cli_run_rejects_unknown_parameters(fake_model_repo, tmp_path, capsys):
    assert (
        cli(["run", str(fake_model_repo), "--out", str(tmp_path / "o"), "--param", "gitops=x"]) == 2
    )
    assert "NAME one of repo, revision, ref, gitops-repo" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_export_naming_another_model_is_neither_judged_nor_published(tmp_path, empty_gitops):
    """Issue 41, finding 10: the pushed training code writes the export's `model.yaml`,
    and its `name` chose where publish put the weights and which `apps/<name>/` propose
    changed. The repo's model is `shapes-a`; its train.py records `fake-detector`."""
    repo = make_fake_model_repo(tmp_path / "a", model="shapes-a")
    result = run_workflow(_wt(repo), repo, tmp_path / "run", echo=_quiet,
                          parameters={"gitops-repo": str(empty_gitops)})
    assert result.status == "Failed"
    evaluate = result.task("evaluate")
    assert evaluate.phase == "Failed"
    assert "name 'fake-detector' is not this repo's model ('shapes-a')" in \
        pathlib.Path(evaluate.log).read_text()
    assert not (tmp_path / "run" / "models" / "fake-detector").exists()
    assert subprocess.run(["git", "-C", str(empty_gitops), "for-each-ref", "--format=%(refname)",
                           "refs/heads/mlops/"], capture_output=True, text=True).stdout == ""
    # publish's own check, should an export get past evaluate
    from workflows.steps import publish
    (tmp_path / "models").mkdir()
    with pytest.raises(StepError, match="a repo publishes only under its own name"):
        publish.run(str(tmp_path / "run"), str(tmp_path / "models"), repo=str(repo))
    assert not any((tmp_path / "models").iterdir())
