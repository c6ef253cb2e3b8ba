"""Issue 25, defect 5: the Argo UI's "Pull request" link resolves on every run.

docs/cluster.md configures the link as `${status.outputs.parameters.0.value}`.
Only output parameters with a `globalName` reach a Workflow's `status.outputs`
(argoproj/argo-workflows v3.7.9 workflow/controller/operator.go
addParamToGlobalScope, called for pods' outputs; a DAG's own outputs never
go there), and the UI substitutes `null` for a path that is missing or empty
(ui/src/shared/components/links.tsx processURL: `(p && p[c]) || null`). The
pull request's URL was exported by `propose` alone, so every run stopped at
the gate (or earlier) linked to `null`. Now the exit handler, which runs on
every run, exports it: the PR, or the GitOps repo's pull requests.
"""

import pathlib
import re

import pytest
import yaml

from workflows.config import load_config
from workflows.pipeline import EXIT_HANDLER, PR_LINK_PATH, build_workflow_template
from workflows.pod_paths import PATH_ENV
from workflows.settings import load_settings
from workflows.steps import record_outcome

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "cluster.md").read_text()
MODEL_REPO_URL = "https://github.com/example-org/shapes-detector.git"  # the Sensor's clone_url


def process_url(expression: str, obj: dict) -> str:
    """The Argo UI's processURL (links.tsx, v3.7.9), for `${...}` paths on the Workflow."""
    def one(match: re.Match) -> str:
        parts = match.group(1).split(".")
        value = obj
        for part in parts:
            item = None
            if isinstance(value, dict):
                item = value.get(part)
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                item = value[int(part)]
            value = item or ("" if parts[0] == "workflow" else None)
        return "null" if value is None else str(value)
    return re.sub(r"\$\{([^}]*)\}", one, expression)


@pytest.fixture(scope="module")
def guide_template(tmp_path_factory):
    """The WorkflowTemplate rendered from docs/cluster.md's settings and its model repo's
    `promotion:` block (section 5)."""
    repo = tmp_path_factory.mktemp("repo")
    config = yaml.safe_load((ROOT / "examples" / "shapes-detector" / "mlops.yaml").read_text())
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE, re.S)
    model_block = yaml.safe_load(next(b for b in blocks if b.startswith("serving:")))
    config["promotion"] = {**config.get("promotion", {}), **model_block["promotion"]}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config))
    for name in ("data", "train.py"):
        source = ROOT / "examples" / "shapes-detector" / name
        if source.exists():
            (repo / name).symlink_to(source)
    settings = next(b for b in blocks if b.startswith("# settings.yaml"))
    (repo.parent / "settings.yaml").write_text(settings)
    return build_workflow_template(load_config(repo),
                                   load_settings(repo.parent / "settings.yaml")).to_dict()


def test_the_only_global_output_is_the_exit_handlers(guide_template):
    """`status.outputs.parameters.0` is the link on every run: the exit handler (which Argo
    runs whatever happened) is the one template exporting a global output."""
    spec = guide_template["spec"]
    exported = [(t["name"], p) for t in spec["templates"]
                for p in (t.get("outputs") or {}).get("parameters") or [] if p.get("globalName")]
    assert [(name, p["globalName"]) for name, p in exported] == [(EXIT_HANDLER, "pr-url")]
    assert spec["onExit"] == EXIT_HANDLER
    assert exported[0][1]["valueFrom"] == {"path": PR_LINK_PATH, "default": ""}


def _run_exit_handler(template: dict, out: pathlib.Path, status: str) -> None:
    """Run the exit handler's rendered argv as Argo would, with the parameters the GitHub
    Sensor passes."""
    spec = template["spec"]
    tmpl = next(t for t in spec["templates"] if t["name"] == EXIT_HANDLER)
    params = {p["name"]: p.get("value", "") for p in spec["arguments"]["parameters"]}
    params["repo"] = MODEL_REPO_URL
    values = {**{f"workflow.parameters.{k}": v for k, v in params.items()},
              "workflow.status": status, "workflow.name": "shapes-detector-0123456789ab",
              "workflow.failures": ""}
    argv = [re.sub(r"\{\{([^}]*)\}\}", lambda m: values[m.group(1)], a)
            .replace("$(MLOPS_OUT)", str(out)) for a in tmpl["container"]["args"]]
    assert argv[:2] == ["step", EXIT_HANDLER]
    assert record_outcome.main(argv[2:]) == 0


def _status_outputs(template: dict, ran: list[str], out: pathlib.Path) -> list[dict]:
    """Argo's status.outputs.parameters after the pods `ran`, in order: each output with a
    globalName, read from its file (or its default), a later one overwriting."""
    found: dict[str, str] = {}
    for tmpl in (t for name in ran for t in template["spec"]["templates"] if t["name"] == name):
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            source = p.get("valueFrom") or {}
            if not p.get("globalName") or "path" not in source:
                continue
            path = out / pathlib.Path(source["path"]).relative_to(PATH_ENV["MLOPS_OUT"])
            if path.is_file():
                found[p["globalName"]] = path.read_text()
            elif "default" in source:
                found[p["globalName"]] = source["default"]
    return [{"name": k, "value": v} for k, v in found.items()]


@pytest.mark.parametrize("stopped", ["gate", "train", "propose"])
def test_the_guides_pr_link_resolves_on_every_run(guide_template, tmp_path, stopped):
    out = tmp_path / "out"
    (out / "full").mkdir(parents=True)
    if stopped == "gate":
        (out / "full" / "gate.json").write_text('{"passed": false, "reason": "map50 0.1 < 0.5"}')
    pr = "https://github.com/example-org/gitops/pull/7"
    if stopped == "propose":
        (out / "full" / "proposal").mkdir()
        (out / "full" / "proposal" / "proposal.json").write_text(
            f'{{"model": "shapes-detector", "version": "v2", "pr_url": "{pr}"}}')
    ran = [EXIT_HANDLER]
    if stopped == "propose":  # what `mlops step propose --outputs` leaves
        (out / "full" / "proposal" / "pr-url").write_text(pr)
        ran.insert(0, "propose")
    _run_exit_handler(guide_template, out, "Failed" if stopped == "train" else "Succeeded")
    workflow = {"status": {"outputs": {"parameters": _status_outputs(guide_template, ran,
                                                                     out)}}}
    link = yaml.safe_load(re.search(r"```yaml\n(links: \|\n.*?)```", GUIDE, re.S)
                          .group(1))["links"]
    (url,) = [item["url"] for item in yaml.safe_load(link) if item["name"] == "Pull request"]
    resolved = process_url(url, workflow)
    assert resolved == (pr if stopped == "propose"
                        else "https://github.com/example-org/gitops/pulls")


def test_without_a_global_output_the_link_is_dead():
    """What the runs stopped at the gate got before: the UI's `null`."""
    assert process_url("${status.outputs.parameters.0.value}", {"status": {}}) == "null"
    assert process_url("${status.outputs.parameters.0.value}",
                       {"status": {"outputs": {"parameters": [{"value": ""}]}}}) == "null"


@pytest.mark.parametrize("proposal, gitops, forge, repo, link", [
    ({"pr_url": "https://gitlab.example.com/g/ops/-/merge_requests/3"}, "", "", "",
     "https://gitlab.example.com/g/ops/-/merge_requests/3"),
    (None, "https://github.com/o/ops.git", "github", "", "https://github.com/o/ops/pulls"),
    (None, "https://git.example.com:3000/o/ops", "gitea", "",
     "https://git.example.com:3000/o/ops/pulls"),
    (None, "https://gitlab.com/g/sub/ops.git", "gitlab", "",
     "https://gitlab.com/g/sub/ops/-/merge_requests"),
    (None, "https://user:secret@github.com/o/ops.git", "github", "",
     "https://github.com/o/ops/pulls"),  # never a credential in a link
    (None, "", "github", "https://github.com/o/model.git", "https://github.com/o/model"),
    (None, "/srv/gitops.git", "local", "git@github.com:o/model.git", ""),
    ({"pr_url": "/srv/gitops.git#pr-1"}, "/srv/gitops.git", "local", "", "/srv/gitops.git#pr-1"),
])
def test_pr_link_choices(proposal, gitops, forge, repo, link):
    assert record_outcome.pr_link(proposal, gitops, forge, repo) == link
