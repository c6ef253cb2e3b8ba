"""What a cluster needs of the rendered pipeline beyond a valid schema.

Private registries (imagePullSecrets on every pod), private git repos (a
token from a Secret, given to git by an inline credential helper, never in
argv), what the Argo UI shows (title/description annotations the Sensor
writes, the DAG's outputs, the report artifact) and the metric names
Prometheus really stores. Real git runs the credential helper; the Argo
behaviour each check relies on is cited where it is asserted.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

import pytest
import yaml

from gitops import git as gitcli
from mlops import cli
from serving.manifests import MODELS_MOUNT
from tests.fixtures.production import fake_model_dir
from workflows.argo_events import (
    DESCRIPTION_ANNOTATION,
    SHAPES,
    TITLE_ANNOTATION,
    build_sensor,
    ui_annotations,
)
from workflows.config import load_config
from workflows.pipeline import ARGO_METRIC_PREFIX, WORKFLOW_OUTPUTS, build_workflow_template
from workflows.sensor_filters import MISSING, gjson_get
from workflows.settings import PipelineSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"
GOLDEN_EVENTS = ROOT / "tests" / "golden" / "events"


def _rendered(**settings) -> dict:
    loaded = load_config(EXAMPLE)
    return build_workflow_template(loaded, PipelineSettings(**settings)).to_dict()


def _templates(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def _paddlejobs(doc: dict) -> list[dict]:
    return [yaml.safe_load(t["resource"]["manifest"]) for t in doc["spec"]["templates"]
            if t.get("resource")]


def test_every_pod_the_pipeline_renders_pulls_with_the_settings_secrets():
    doc = _rendered(image_pull_secrets=["reg-a", "reg-b"])
    wanted = [{"name": "reg-a"}, {"name": "reg-b"}]
    # Step pods: the workflow-level field applies to every pod Argo creates.
    assert doc["spec"]["imagePullSecrets"] == wanted
    jobs = _paddlejobs(doc)
    assert len(jobs) == 2
    for job in jobs:
        assert job["spec"]["worker"]["template"]["spec"]["imagePullSecrets"] == wanted
    # Serving Deployments: propose is told, and writes them (next test).
    args = _templates(doc)["propose"]["container"]["args"]
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--image-pull-secret"]
    assert pairs == ["reg-a", "reg-b"]
    # Without the setting nothing is rendered (an empty list is noise to kubectl diff).
    plain = _rendered()
    assert "imagePullSecrets" not in plain["spec"]
    assert "--image-pull-secret" not in _templates(plain)["propose"]["container"]["args"]


def test_propose_writes_the_pull_secret_into_the_serving_deployment(tmp_path, empty_gitops):
    model_dir = fake_model_dir(tmp_path, "shapes", "v1", {"map50": 0.9, "map": 0.6})
    outputs = tmp_path / "outputs"
    assert cli.main(["promote", "propose", str(model_dir), "--gitops", str(empty_gitops),
                     "--image-pull-secret", "reg-a", "--outputs", str(outputs)]) == 0
    branch = (outputs / "branch").read_text()
    text = subprocess.run(["git", "-C", str(empty_gitops), "show",
                           f"{branch}:apps/shapes/deployment-v1.yaml"],
                          capture_output=True, text=True, check=True).stdout
    deployment = yaml.safe_load(text)
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "reg-a"}]
    # The outputs Argo reads as the propose step's parameters.
    assert (outputs / "version").read_text() == "v1"
    record = json.loads((outputs / "proposal.json").read_text())
    assert record["pr_number"] == int((outputs / "pr-number").read_text())


def test_a_bad_pull_secret_name_is_refused_before_anything_is_written(tmp_path, empty_gitops,
                                                                      capsys):
    model_dir = fake_model_dir(tmp_path, "shapes", "v1", {"map50": 0.9, "map": 0.6})
    before = subprocess.run(["git", "-C", str(empty_gitops), "for-each-ref"],
                            capture_output=True, text=True, check=True).stdout
    assert cli.main(["promote", "propose", str(model_dir), "--gitops", str(empty_gitops),
                     "--image-pull-secret", "Reg_A"]) != 0
    assert "Reg_A" in capsys.readouterr().err
    after = subprocess.run(["git", "-C", str(empty_gitops), "for-each-ref"],
                           capture_output=True, text=True, check=True).stdout
    assert after == before


def _env(template: dict) -> list[dict]:
    return template["container"].get("env") or []


def test_git_token_reaches_checkout_gate_and_propose_from_the_secret_only():
    doc = _rendered(git_secret="model-repo-creds", git_secret_key="pat")
    templates = _templates(doc)
    for name in ("checkout", "gate", "propose"):
        env = {e["name"]: e for e in _env(templates[name])}
        token = env[gitcli.TOKEN_ENV]
        assert token["valueFrom"]["secretKeyRef"] == {
            "name": "model-repo-creds", "key": "pat", "optional": True}, name
        assert "value" not in token
    # No step's argv or literal env mentions a token: it exists only as a secretKeyRef.
    for tmpl in templates.values():
        container = tmpl.get("container") or {}
        text = json.dumps([container.get("command"), container.get("args"),
                           [e for e in container.get("env") or [] if "value" in e]])
        assert "model-repo-creds" not in text and "pat" not in re.findall(r"\w+", text)


def test_the_checkout_pods_git_asks_the_helper_for_the_token(tmp_path):
    """Real git reads GIT_CONFIG_COUNT/KEY/VALUE from the rendered env and runs the helper."""
    rendered = _rendered(git_hosts=["https://git.example.com"])
    env_rendered = {e["name"]: e["value"] for e in _env(_templates(rendered)["checkout"])
                    if "value" in e}
    assert env_rendered["GIT_CONFIG_KEY_0"] == "credential.helper"
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_TERMINAL_PROMPT": "0",
            **{k: v for k, v in env_rendered.items() if k.startswith(("GIT_CONFIG", "MLOPS_GIT"))}}
    query = "protocol=https\nhost=git.example.com\npath=org/model.git\n\n"

    filled = subprocess.run(["git", "credential", "fill"], input=query, text=True,
                            capture_output=True, env={**base, gitcli.TOKEN_ENV: "s3cret"})
    assert filled.returncode == 0, filled.stderr
    assert "username=x-access-token" in filled.stdout and "password=s3cret" in filled.stdout

    # Issue 41, finding 1: the helper answered any host, so a repo URL from the webhook's
    # payload (or a GitOps URL from a pushed mlops.yaml) received the token. Another
    # server, another port or plain http of the same one: no answer.
    for other in ("protocol=https\nhost=attacker.example\n",
                  "protocol=https\nhost=git.example.com:8443\n",
                  "protocol=http\nhost=git.example.com\n",
                  "protocol=https\nhost=git.example.com.attacker.example\n"):
        refused = subprocess.run(["git", "credential", "fill"], input=other + "path=x.git\n\n",
                                 text=True, capture_output=True,
                                 env={**base, gitcli.TOKEN_ENV: "s3cret"})
        assert refused.returncode != 0 and "s3cret" not in refused.stdout, other

    # No Secret mounted (optional): the helper stays silent and git, with no prompt, gives up
    # rather than sending an empty password.
    empty = subprocess.run(["git", "credential", "fill"], input=query, text=True,
                           capture_output=True, env=base)
    assert empty.returncode != 0 and "password=" not in empty.stdout


def test_the_checkout_script_clones_the_pushed_commit(tmp_path):
    """The rendered script itself, under sh, with the pod's env mapped to local paths."""
    origin = tmp_path / "model.git"
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    (origin / "a.txt").write_text("one\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "-C", str(origin), *ident, "add", "a.txt"], check=True)
    subprocess.run(["git", "-C", str(origin), *ident, "commit", "-qm", "one"], check=True)
    sha = subprocess.run(["git", "-C", str(origin), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    checkout = _templates(_rendered())["checkout"]["container"]
    env = {e["name"]: e["value"] for e in checkout["env"] if "value" in e}
    env.update({"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                "MLOPS_REPO": str(tmp_path / "ws" / "repo"), "MLOPS_OUT": str(tmp_path / "ws/out"),
                "MLOPS_OUTPUTS": str(tmp_path / "outputs"), "REPO_URL": str(origin),
                "REVISION": sha})
    assert env["GIT_ALLOW_PROTOCOL"] == "https"
    # The forge here is a directory: git's `file` transport, as the local runner maps it.
    local = {**env, "GIT_ALLOW_PROTOCOL": "https:file"}
    done = subprocess.run([*checkout["command"], *checkout["args"]], env=local,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "outputs" / "revision").read_text().strip() == sha
    assert (tmp_path / "ws" / "repo" / "a.txt").read_text() == "one\n"

    # The URL and the sha come from the webhook's payload (issue 41): a transport that
    # runs commands, an option in the URL's place and an option as the revision all stop
    # the step before anything runs.
    marker = tmp_path / "pwned"
    for url, revision in ((f"ext::sh -c touch% {marker}", sha),
                          (f"--upload-pack=touch {marker}", sha),
                          (str(origin), "--output=x"),
                          (f"file://{origin}", sha)):
        bad = subprocess.run([*checkout["command"], *checkout["args"]],
                             env={**env, "REPO_URL": url, "REVISION": revision},
                             capture_output=True, text=True)
        assert bad.returncode != 0, (url, revision)
        assert not marker.exists(), url


def test_the_argo_ui_shows_the_runs_outputs_and_report():
    doc = _rendered()
    templates = _templates(doc)
    dag = templates[doc["spec"]["entrypoint"]]
    outputs = {p["name"]: p["valueFrom"] for p in dag["outputs"]["parameters"]}
    assert set(outputs) == {"map50", "gate-passed", "gate-outcome", "gate-reason", "version",
                            "pr-url"}
    tasks = {t["name"]: t["template"] for t in dag["dag"]["tasks"]}
    for name, source in outputs.items():
        # Each reads a task that exists and an output its template declares; a task that
        # did not run leaves the default instead of failing the workflow.
        task, _, param = re.fullmatch(r"\{\{tasks\.([\w-]+)\.outputs\.parameters\.([\w-]+)\}\}",
                                      source["parameter"]).group(1, 0, 2)
        declared = [p["name"] for p in templates[tasks[task]]["outputs"]["parameters"]]
        assert param in declared, (name, task, declared)
        assert source["default"] == ""
    assert WORKFLOW_OUTPUTS["pr-url"].endswith("pr-url")
    # The PR link of docs/cluster.md reads status.outputs.parameters.0: pr-url must be the
    # one and only global output (Argo appends globalName outputs to status.outputs).
    globals_ = [p["globalName"] for t in templates.values()
                for p in (t.get("outputs") or {}).get("parameters") or [] if "globalName" in p]
    assert globals_ == ["pr-url"]
    assert "url: ${status.outputs.parameters.0.value}" in (ROOT / "docs/cluster.md").read_text()
    report = templates[doc["spec"]["onExit"]]["outputs"]["artifacts"]
    assert [(a["name"], a["path"], a.get("optional")) for a in report] == [
        ("report", "/workspace/out/report.md", True)]


def _go_template(template: str, event: dict) -> str:
    """The subset of Go templates + sprig the Sensor's dataTemplates use, on `.Input`."""
    def one(match: re.Match[str]) -> str:
        path, *pipes = [part.strip() for part in match.group(1).split("|")]
        value = gjson_get(event, path.removeprefix(".Input."))
        assert value is not MISSING, f"{path} is not in the payload"
        text = str(value)
        for pipe in pipes:
            name, *args = pipe.split()
            if name == "substr":
                text = text[int(args[0]):int(args[1])]
            elif name == "trunc":
                text = text[:int(args[0])]
            else:
                raise AssertionError(f"unknown pipe {name}")
        return text
    return re.sub(r"\{\{(.*?)\}\}", one, template, flags=re.S)


@pytest.mark.parametrize("forge", sorted(SHAPES))
def test_the_sensor_titles_each_workflow_from_the_forges_payload(forge):
    event = {"body": json.loads((GOLDEN_EVENTS / f"{forge}-push.json").read_text())}
    templates = ui_annotations("shapes-detector", forge)
    title = _go_template(templates[TITLE_ANNOTATION], event)
    assert title == f"**shapes-detector** @ `{event['body']['after'][:12]}`"
    description = _go_template(templates[DESCRIPTION_ANNOTATION], event)
    assert event["body"]["ref"] in description and "<no value>" not in description

    sensor = build_sensor(load_config(EXAMPLE), PipelineSettings(model_forge=forge))
    params = sensor["spec"]["triggers"][0]["template"]["argoWorkflow"]["parameters"]
    dests = {p["dest"]: p["src"].get("dataTemplate") for p in params}
    # sjson (Argo Events' dest syntax) needs the annotation key's dots escaped.
    assert dests["metadata.annotations.workflows\\.argoproj\\.io/title"] == \
        templates[TITLE_ANNOTATION]
    assert dests["metadata.annotations.workflows\\.argoproj\\.io/description"] == \
        templates[DESCRIPTION_ANNOTATION]


def test_metric_names_are_the_ones_prometheus_stores():
    """Argo 3.6+ prefixes custom metric names (docs/metrics.md, v3.7.9)."""
    doc = _rendered()
    names = [mt["name"] for mt in doc["spec"]["metrics"]["prometheus"]]
    names += [mt["name"] for t in doc["spec"]["templates"]
              for mt in (t.get("metrics") or {}).get("prometheus") or []]
    assert names and all(not n.startswith(ARGO_METRIC_PREFIX) for n in names)
    docs = (ROOT / "docs" / "cluster.md").read_text()
    for name in names:
        # Queries in the docs use the stored name, never the bare one.
        assert ARGO_METRIC_PREFIX + name in docs, name
        assert re.search(rf"(?<!{ARGO_METRIC_PREFIX}){name}\b", docs) is None, name


def test_every_step_that_reads_production_mounts_the_models_volume():
    """Issue 42, B1: find-production resolves production's export through its `file://`
    model-uri, on the models volume; it did not mount it, printed "not readable here;
    training from scratch", and every full job in a cluster trained from scratch. Every step
    that reads production from the GitOps repo (find-production, evaluate, gate) mounts the
    volume where serving reads it, read-only."""
    doc = _rendered()
    volumes = {v["name"]: v for v in doc["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "mlops-models"
    readers = {name: t for name, t in _templates(doc).items()
               if "--production-from-gitops" in (t.get("container") or {}).get("args", [])}
    assert set(readers) == {"find-production", "evaluate", "gate"}
    for name, tmpl in readers.items():
        mounts = {m["name"]: m for m in tmpl["container"]["volumeMounts"]}
        assert mounts.get("models", {}).get("mountPath") == MODELS_MOUNT, name
        assert mounts["models"]["readOnly"] is True, name


def _containers(doc: dict) -> list[tuple[str, dict]]:
    spec = doc["spec"].get("workflowSpec") or doc["spec"]
    return [(t["name"], t["container"]) for t in spec["templates"] if t.get("container")]


def test_every_step_container_requests_cpu_and_memory(tmp_path):
    """Issue 42, B8: checkout, build-image and every tool step rendered no resources, so a
    namespace with a compute ResourceQuota and no LimitRange refused their pods ("must
    specify requests.cpu, requests.memory ...": Kubernetes' ResourceQuota admission) and
    evaluate ran Paddle inference as BestEffort. Every container of the pipeline, the push
    Workflow and the data snapshot now has requests and limits for both; a setting changes
    one step and keeps the others."""
    from workflows.data_snapshot import build_snapshot_cron
    from workflows.push import build_push_template

    repo = tmp_path / "shapes-detector"  # the example with a scheduled snapshot
    repo.mkdir()
    config = yaml.safe_load((EXAMPLE / "mlops.yaml").read_text())
    config["data"]["snapshot"] = {"source": "/data/shapes", "schedule": "0 6 * * 1"}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    loaded = load_config(repo)
    settings = PipelineSettings()
    docs = [build_workflow_template(loaded, settings).to_dict(),
            build_push_template(loaded, settings), build_snapshot_cron(loaded, settings)]
    seen = []
    for doc in docs:
        for name, container in _containers(doc):
            resources = container.get("resources") or {}
            for kind in ("requests", "limits"):
                assert set(resources.get(kind) or {}) >= {"cpu", "memory"}, (name, kind)
            seen.append(name)
    assert {"checkout", "build-image", "push-image", "evaluate", "gate", "submit-pipeline",
            "record-outcome", "snapshot"} <= set(seen)
    tuned = PipelineSettings(step_resources={"evaluate": {
        "cpu": "3", "memory": "6Gi", "cpu_limit": "4", "memory_limit": "8Gi"}})
    templates = _templates(build_workflow_template(loaded, tuned).to_dict())
    assert templates["evaluate"]["container"]["resources"]["requests"] == {"cpu": "3",
                                                                           "memory": "6Gi"}
    assert templates["gate"]["container"]["resources"] == \
        _templates(docs[0])["gate"]["container"]["resources"]


def test_the_paddlejob_workers_stop_at_their_steps_deadline():
    """Issue 42 (harmless list): at a training step's activeDeadlineSeconds Argo stops the
    step's own pod; the PaddleJob's workers, other pods, trained on until the Workflow (their
    owner) was deleted. The worker pods carry the same deadline, which the kubelet enforces."""
    doc = _rendered()
    templates = _templates(doc)
    for name in ("smoke-train", "train"):
        job = yaml.safe_load(templates[name]["resource"]["manifest"])
        pod = job["spec"]["worker"]["template"]["spec"]
        assert pod["activeDeadlineSeconds"] == templates[name]["activeDeadlineSeconds"], name


def test_the_training_pod_mounts_only_its_own_models_exports():
    """Issue 41, finding 10: the warm-started PaddleJob mounted the whole models volume,
    every team's weights, into a pod that runs the pushed repo's code. It mounts its own
    model's folder (production's export, which `--init-from` names, is under it)."""
    (full,) = [j for j in _paddlejobs(_rendered()) if j["metadata"]["labels"]["mlops.dev/job"]
               == "full"]
    spec = full["spec"]["worker"]["template"]["spec"]
    (mount,) = [v for v in spec["containers"][0]["volumeMounts"] if v["name"] == "models"]
    assert mount == {"name": "models", "mountPath": "/models/shapes-detector",
                     "subPath": "shapes-detector", "readOnly": True}
