"""Every push runs the pipeline rendered from its own commit (workflows/push.py).

The Sensor submits the static push Workflow `<model>-push-<sha12>` (Argo Events'
argoWorkflow trigger, operation `submit`: pkg/sensors/triggers/argo-workflow/
argo-workflow.go, argo-events); its `submit-pipeline` step renders the pipeline from
the checked-out `mlops.yaml` and creates `<model>-<sha12>` with the full spec inline.
A Workflow created through the API runs its pods as its spec's `serviceAccountName`
and mounts the executor's token into argoexec (workflow/controller/workflowpod.go
setupServiceAccount, argo-workflows v3.7.9), which `workflows.identity` models.

No Kubernetes API server can run on this machine: a recording stand-in on a loopback
port answers the official client (201 Created, then 409 AlreadyExists for a name it
has seen, as the API server does) and keeps each request's body.
"""

import json
import pathlib
import shutil

import pytest
import yaml

from contracts.kubeapi import request_call
from local.argo.runner import run_workflow
from tests.fixtures.kubeapi import api_stand_in
from tests.fixtures.workflows import git, make_fake_model_repo
from tests.manifest_validation import validate_manifest
from workflows.argo_events import build_sensor
from workflows.config import load_config
from workflows.identity import allowed, pod_identities
from workflows.push import build_push_template, child_workflow, push_workflow_name, settings_arg
from workflows.render import render_documents
from workflows.settings import load_settings
from workflows.steps import submit_pipeline

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"


def _create(method, path, body, before):
    """201 Created, or 409 AlreadyExists for a Workflow name already created."""
    if body["metadata"]["name"] in [b["metadata"]["name"] for _, _, b in before]:
        return 409, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "reason": "AlreadyExists", "code": 409}
    return 201, body


@pytest.fixture
def api_server():
    """Records (method, path, body); answers 201, or 409 for a Workflow name it has seen."""
    with api_stand_in(_create) as served:
        yield served


@pytest.fixture
def example_repo(tmp_path):
    """The shapes example's mlops.yaml as a git repo (rendering needs nothing else)."""
    repo = tmp_path / "shapes-detector"
    repo.mkdir()
    shutil.copy(EXAMPLE / "mlops.yaml", repo / "mlops.yaml")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "week 1")
    return repo


def _step_argv(push: dict, repo: pathlib.Path, out: pathlib.Path, sha: str,
               annotations: dict | None = None, api: str = "") -> list[str]:
    """The submit step's args as Argo resolves them (`{{...}}`; `$(VAR)` as the kubelet)."""
    (submit,) = [t for t in push["spec"]["templates"] if t["name"] == "submit-pipeline"]
    values = {"{{workflow.parameters.repo}}": "https://git.example.com/shapes-detector.git",
              "{{workflow.parameters.revision}}": sha,
              "{{workflow.parameters.ref}}": "refs/heads/main",
              "{{workflow.annotations.json}}": json.dumps(annotations or {}),
              "$(MLOPS_REPO)": str(repo), "$(MLOPS_OUT)": str(out),
              "$(MLOPS_OUTPUTS)": str(out / "outputs")}
    args = [values.get(a, a) for a in submit["container"]["args"]]
    assert args[:2] == ["step", "submit-pipeline"]
    return [*args[2:], *(["--api-server", api] if api else [])]


def _paddlejob_args(workflow: dict, template: str) -> list[str]:
    (tmpl,) = [t for t in workflow["spec"]["templates"] if t["name"] == template]
    job = yaml.safe_load(tmpl["resource"]["manifest"])
    return job["spec"]["worker"]["template"]["spec"]["containers"][0]["args"]


def test_each_push_creates_the_pipeline_of_its_own_commit(example_repo, tmp_path, api_server):
    """The live defect: the cluster ran every push with the args of the last render. A push
    changing `training.full.overrides.args` now gets a child Workflow whose PaddleJob
    carries the new value; the static push template does not change between commits."""
    url, seen = api_server
    settings = load_settings()
    week1 = git(example_repo, "rev-parse", "HEAD")
    push1 = build_push_template(load_config(example_repo), settings)
    argv1 = _step_argv(push1, example_repo, tmp_path / "o1", week1, api=url)
    assert submit_pipeline.main(argv1) == 0

    text = (example_repo / "mlops.yaml").read_text()
    changed = text.replace("      workers: 2\n", "      workers: 2\n      args: {epochs: 7}\n")
    assert changed != text
    (example_repo / "mlops.yaml").write_text(changed)
    git(example_repo, "commit", "-q", "-am", "week 2: fine-tune 7 epochs")
    week2 = git(example_repo, "rev-parse", "HEAD")
    push2 = build_push_template(load_config(example_repo), settings)
    assert push2 == push1  # what the Sensor submits is the same for every commit
    assert submit_pipeline.main(_step_argv(push2, example_repo, tmp_path / "o2", week2,
                                           api=url)) == 0

    (one, two) = [body for _, _, body in seen]
    assert [one["metadata"]["name"], two["metadata"]["name"]] == [
        f"shapes-detector-{week1[:12]}", f"shapes-detector-{week2[:12]}"]
    train1, train2 = _paddlejob_args(one, "train"), _paddlejob_args(two, "train")
    assert "--epochs" not in " ".join(train1)
    assert "--epochs 7" in " ".join(train2)
    assert one["spec"] != two["spec"]
    assert (tmp_path / "o2" / "outputs" / "workflow").read_text() == two["metadata"]["name"]


def test_the_child_keeps_the_name_labels_annotations_and_parameters_the_sensor_set(
        example_repo, tmp_path, api_server):
    url, seen = api_server
    sha = git(example_repo, "rev-parse", "HEAD")
    push = build_push_template(load_config(example_repo), load_settings())
    ui = {"workflows.argoproj.io/title": "**shapes-detector** @ `abc`",
          "workflows.argoproj.io/description": 'Dev pushed `refs/heads/main`: "quotes" {{x}}',
          "other": "not copied"}
    assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path, sha, ui, url)) == 0
    ((method, path, child),) = seen
    assert request_call(method, path) in {c.bind({"namespace": "mlops"})
                                          for c in submit_pipeline.API_CALLS}
    assert child["metadata"] == {
        "name": f"shapes-detector-{sha[:12]}", "namespace": "mlops",
        "labels": {"mlops.dev/model": "shapes-detector", "mlops.dev/trigger": "push"},
        "annotations": {k: v for k, v in ui.items() if k != "other"}}
    params = {p["name"]: p.get("value") for p in child["spec"]["arguments"]["parameters"]}
    assert params == {"repo": "https://git.example.com/shapes-detector.git", "revision": sha,
                      "ref": "refs/heads/main", "gitops-repo": ""}
    assert "workflowTemplateRef" not in child["spec"]  # inline: no template to race on
    validate_manifest(child)


def test_a_duplicate_delivery_creates_nothing_twice(example_repo, tmp_path, api_server):
    url, seen = api_server
    sha = git(example_repo, "rev-parse", "HEAD")
    push = build_push_template(load_config(example_repo), load_settings())
    for n in (1, 2):
        assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path / str(n), sha,
                                               api=url)) == 0
    assert [b["metadata"]["name"] for _, _, b in seen] == [f"shapes-detector-{sha[:12]}"] * 2
    assert (tmp_path / "2" / "outputs" / "created").read_text() == "false"


def test_a_broken_mlops_yaml_fails_the_step_naming_file_and_field(example_repo, tmp_path,
                                                                    api_server, capsys):
    url, seen = api_server
    push = build_push_template(load_config(example_repo), load_settings())
    text = (example_repo / "mlops.yaml").read_text()
    (example_repo / "mlops.yaml").write_text(text.replace("workers: 2", "workers: two"))
    sha = git(example_repo, "rev-parse", "HEAD")
    capsys.readouterr()
    assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path, sha, api=url)) != 0
    err = capsys.readouterr().err
    assert "mlops.yaml" in err and "training.full.overrides" in err and "workers" in err
    assert "Traceback" not in err
    assert seen == []
    # ...and Argo shows that line as the step's message (its termination message)
    (submit,) = [t for t in push["spec"]["templates"] if t["name"] == "submit-pipeline"]
    assert submit["container"]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_sensor_submits_the_static_push_workflow():
    loaded, settings = load_config(EXAMPLE), load_settings()
    for trigger in build_sensor(loaded, settings)["spec"]["triggers"]:
        argo = trigger["template"]["argoWorkflow"]
        source = argo["source"]["resource"]
        validate_manifest(source)
        assert source["spec"]["workflowTemplateRef"] == {"name": "shapes-detector-push"}
        name = next(p["src"]["dataTemplate"] for p in argo["parameters"]
                    if p["dest"] == "metadata.name")
        assert name.startswith("shapes-detector-push-{{ .Input.body.after | substr 0 12")
    assert push_workflow_name("shapes-detector", "ABCDEF0123456789") == \
        "shapes-detector-push-abcdef012345"
    validate_manifest(build_push_template(loaded, settings))


def test_only_the_submitter_step_may_create_workflows():
    """Of every workflow pod, only the push Workflow's submit step holds a token that may
    create Workflows (the Sensor's pod may too: it submits the push Workflow)."""
    docs = [d for file_docs in render_documents(load_config(EXAMPLE), load_settings()).values()
            for d in file_docs]
    roles = [d for d in docs if d["kind"] == "Role"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    create = submit_pipeline.API_CALLS[0].bind({"namespace": "mlops"})
    pods = pod_identities(docs)
    may = {p.component for p in pods
           if p.token_mounted and allowed(roles, bindings, ("mlops", p.service_account), create)}
    assert may == {"WorkflowTemplate mlops/shapes-detector-push: submit-pipeline (main)",
                   "Sensor mlops/shapes-detector-train"}
    (submitter,) = [p for p in pods if p.component.endswith("submit-pipeline (main)")]
    assert submitter.service_account == "mlops-submitter" and submitter.calls == (create,)
    # Nothing cluster-wide: the submitter's grants are one Role in its namespace.
    assert not [d for d in docs if d["kind"].startswith("Cluster")]


def test_the_local_run_executes_the_very_workflow_the_cluster_step_creates(
        example_repo, tmp_path, api_server):
    """The local runner's `submit-pipeline` stand-in parses the same args and hands over
    the same object the cluster's step POSTs to the API server."""
    url, seen = api_server
    sha = git(example_repo, "rev-parse", "HEAD")
    push = build_push_template(load_config(example_repo), load_settings())
    handed: list[dict] = []
    result = run_workflow(push, example_repo, tmp_path / "push", echo=lambda _: None,
                          parameters={"repo": "https://git.example.com/shapes-detector.git",
                                      "ref": "refs/heads/main"},
                          submit=handed.append)
    assert result.status == "Succeeded", [(t.name, t.message) for t in result.tasks]
    assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path / "k", sha,
                                           api=url)) == 0
    ((_, _, created),) = seen
    assert handed == [created]
    assert created == child_workflow(
        load_config(example_repo), load_settings(), repo="https://git.example.com/"
        "shapes-detector.git", revision=sha, ref="refs/heads/main", annotations={})


def test_the_settings_reach_the_step_whole():
    settings = load_settings(namespace="ml", tool_image="r.example/mlops:9")
    push = build_push_template(load_config(EXAMPLE), settings)
    (submit,) = [t for t in push["spec"]["templates"] if t["name"] == "submit-pipeline"]
    args = submit["container"]["args"]
    assert args[args.index("--settings") + 1] == settings_arg(settings)
    assert json.loads(settings_arg(settings))["namespace"] == "ml"


def test_mlops_run_runs_the_push_then_the_commit_s_pipeline(tmp_path):
    """`mlops run` (and so the post-receive hook) goes through the push Workflow: its
    record under OUT/push, the pipeline's under OUT, named after the commit."""
    from mlops import cli

    repo = make_fake_model_repo(tmp_path / "fake-detector")
    sha = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "out"
    assert cli.main(["run", str(repo), "--out", str(out)]) == 0
    push = json.loads((out / "push" / "run.json").read_text())
    assert [t["name"] for t in push["tasks"]] == ["checkout", "submit-pipeline"]
    run = json.loads((out / "run.json").read_text())
    assert run["workflow"] == f"fake-detector-{sha[:12]}" and run["status"] == "Succeeded"


PLATFORM_GITOPS = "https://git.example.com/ml/gitops.git"
ATTACKER_GITOPS = "https://attacker.example/gitops.git"


def _commit_change(repo: pathlib.Path, old: str, new: str, message: str) -> str:
    text = (repo / "mlops.yaml").read_text()
    assert old in text
    (repo / "mlops.yaml").write_text(text.replace(old, new, 1))
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize("old,new,field", [
    # Issue 41, finding 1: the pushed commit chose the GitOps repo, and with it where the
    # git token went (then a push to its `main` without review).
    ("approval: pr", f"approval: pr\n  gitops: {{repo: '{ATTACKER_GITOPS}'}}",
     "promotion.gitops.repo"),
    ("approval: pr", "approval: pr\n  gitops: {branch: release}", "promotion.gitops.branch"),
    # Finding 10: repo A wrote `model: b` and published under apps/b/.
    ("model: shapes-detector", "model: products-yolov3", "model"),
])
def test_a_commit_naming_what_the_platform_binds_is_refused(example_repo, tmp_path, api_server,
                                                            capsys, old, new, field):
    url, seen = api_server
    push = build_push_template(load_config(example_repo), load_settings())  # the platform's
    sha = _commit_change(example_repo, old, new, "week 2")
    capsys.readouterr()
    assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path, sha, api=url)) == 2
    err = capsys.readouterr().err
    assert "mlops.yaml: refused: it names what the platform owns" in err
    assert f"  {field}: " in err and "Traceback" not in err
    assert seen == []  # no Workflow: nothing ran with the commit's choice


def test_the_pipeline_proposes_where_the_platform_says(example_repo, tmp_path, api_server):
    """The push template is rendered from the platform's copy naming its GitOps repo; a
    commit that leaves `promotion.gitops` out runs a pipeline whose `gitops-repo` is the
    platform's, and whose token-bearing steps send the token only to its server."""
    url, seen = api_server
    platform = tmp_path / "platform"
    platform.mkdir()
    (platform / "mlops.yaml").write_text((example_repo / "mlops.yaml").read_text().replace(
        "approval: pr", f"approval: pr\n  gitops: {{repo: '{PLATFORM_GITOPS}', forge: gitea}}"))
    push = build_push_template(load_config(platform), load_settings())
    sha = git(example_repo, "rev-parse", "HEAD")
    assert submit_pipeline.main(_step_argv(push, example_repo, tmp_path / "o", sha,
                                           api=url)) == 0
    ((_, _, child),) = seen
    params = {p["name"]: p.get("value") for p in child["spec"]["arguments"]["parameters"]}
    assert params["gitops-repo"] == PLATFORM_GITOPS
    templates = {t["name"]: t for t in child["spec"]["templates"]}
    propose = templates["propose"]["container"]["args"]
    assert propose[propose.index("--forge") + 1] == "gitea"
    for name in ("checkout", "find-production", "evaluate", "gate", "propose"):
        env = {e["name"]: e.get("value") for e in templates[name]["container"]["env"]}
        assert "MLOPS_GIT_TOKEN" in env, name
        assert env["MLOPS_GIT_HOSTS"] == "https://github.com https://git.example.com", name
        assert env["GIT_ALLOW_PROTOCOL"] == "https", name


def test_a_local_run_refuses_a_model_the_hook_does_not_bind(example_repo, tmp_path, capsys):
    """The local runtime holds the same binding: `mlops run --model` (the hook passes the
    bare repo's `mlops.model`) refuses a commit naming another model in its submit step."""
    from mlops.cli import main as cli

    code = cli(["run", str(example_repo), "--out", str(tmp_path / "out"),
                "--model", "products-yolov3", "--param", "gitops-repo="])
    out = capsys.readouterr().out
    assert code == 1
    log = (tmp_path / "out" / "push" / "logs" / "submit-pipeline.log").read_text()
    assert "model: 'shapes-detector' is not this repo's model ('products-yolov3'" in log, out
