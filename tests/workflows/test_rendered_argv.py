"""Every command line this project renders parses with the real parser it will meet.

Argv built as strings are seen by no import contract: a renamed flag would
render fine and fail in the cluster on the first push. Here each one is parsed
by `mlops.cli.build_parser()` and, for `mlops step NAME ...`, by that step's
own `build_parser()`: the Argo WorkflowTemplate's containers, a serving
Deployment, the controller's Deployment, and the run a `git push` starts
through the post-receive hook. An unknown flag, a missing required argument or
a new entry point the test does not know fails here.
"""

import argparse
import contextlib
import importlib
import io
import pathlib
import re

import pytest

from local.argo.hooks import mlops_run_args
from mlops.cli import build_parser, main
from promotion.cluster.deploy import controller_manifests
from serving.manifests import deployment
from serving.options import ServingOptions
from workflows.config import load_config
from workflows.render import render_documents
from workflows.settings import load_settings
from workflows.steps import STEPS

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"


def _no_abbreviations(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Rendered argv must name flags in full: argparse would take `--production-from-git`
    for `--production-from-gitops`, and a later flag sharing the prefix breaks the cluster."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _no_abbreviations(sub)
    return parser


def _strict_parse(parser: argparse.ArgumentParser, argv: list[str], where: str):
    _no_abbreviations(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: {argv} does not parse: {err.getvalue().strip()}")


def parse_mlops(argv: list[str], where: str) -> argparse.Namespace:
    """Parse `mlops ARGV` as the installed CLI would; steps with their own parser too."""
    args = _strict_parse(build_parser(), argv, where)
    if argv[0] == "step":
        step = importlib.import_module(STEPS[args.step])
        args.step_parsed = _strict_parse(step.build_parser(), args.step_args,
                                         f"{where} (step {args.step})")
    return args


def _workflow_template():
    settings = load_settings(image_pull_secrets=["registry-a"])
    docs = render_documents(load_config(EXAMPLE), settings)
    return docs["workflowtemplate.yaml"][0]


def test_every_workflow_container_parses_with_the_cli():
    templates = _workflow_template()["spec"]["templates"]
    parsed: dict[str, argparse.Namespace] = {}
    for template in templates:
        container = template.get("container")
        if container is None:
            continue
        command = container.get("command")
        if command == ["sh", "-c"]:
            continue  # checkout and the image build: shell, tested by the runner's tests
        if command == ["crane"]:  # push-image: `crane push TAR IMAGE --image-refs FILE`
            env = {e["name"] for e in container["env"]}
            refs = re.findall(r"\$\((\w+)\)", " ".join(container["args"]))
            assert container["args"][0] == "push" and refs and set(refs) <= env, refs
            continue
        assert command == ["mlops"], \
            f"template {template['name']}: command {command} is neither `mlops` nor `sh -c`"
        parsed[template["name"]] = parse_mlops(container["args"], f"template {template['name']}")
    assert sorted(parsed) == ["evaluate", "find-production", "gate", "prepare-data", "propose",
                              "publish-model", "record-outcome"]
    # every pipeline container starts the same way: `mlops step NAME`
    assert {name: args.step for name, args in parsed.items()} == {
        "evaluate": "evaluate", "find-production": "find-production", "gate": "gate",
        "prepare-data": "prepare-data", "publish-model": "publish", "propose": "propose",
        "record-outcome": "record-outcome"}
    assert parsed["prepare-data"].step_parsed.cache == "$(MLOPS_DATA_CACHE)"
    for name in ("evaluate", "find-production", "gate"):  # production, from the GitOps repo
        assert parsed[name].step_parsed.production_from_gitops == \
            "{{workflow.parameters.gitops-repo}}"
    assert parsed["publish-model"].step_parsed.models_root == "$(MLOPS_MODELS)"
    assert parsed["record-outcome"].step_parsed.status == "{{workflow.status}}"
    propose = parsed["propose"].step_parsed
    assert (propose.model_dir, propose.image_pull_secret) == \
        ("{{inputs.parameters.model-dir}}", ["registry-a"])


def test_a_serving_deployment_parses_with_the_cli():
    doc = deployment("shapes", "v3", image="registry.example.com/mlops/serve:0.1.0",
                     model_uri="pvc://models/shapes/v3", weights_sha256="ab" * 32)
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["mlops"]
    args = parse_mlops(container["args"], "serving Deployment")
    assert (args.model_name, args.model_version, args.weights_sha256, args.port) == \
        ("shapes", "v3", "ab" * 32, 8080)

    doc = deployment("shapes", "v3", image="registry.example.com/mlops/serve:0.1.0",
                     model_uri="pvc://models/shapes/v3", weights_sha256="ab" * 32,
                     serving=ServingOptions(workers=2, batch_max_size=8, batch_timeout_ms=2))
    args = parse_mlops(doc["spec"]["template"]["spec"]["containers"][0]["args"],
                       "serving Deployment with workers and batching")
    assert (args.workers, args.batch_max_size, args.batch_timeout_ms) == (2, 8, 2.0)


@pytest.mark.parametrize(("forge", "workers"), [(None, {}), ("gitea", {"workers": 3})])
def test_the_controller_deployment_parses_with_the_cli(forge, workers):
    docs = controller_manifests(gitops_url="https://git.example.com/ml/gitops.git",
                                prometheus_url="http://prometheus:9090", forge=forge,
                                webhook_secret="slack-hook", applications=["shapes"], **workers)
    deployment_doc = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment_doc["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["mlops"]
    args = parse_mlops(container["args"], "controller Deployment")
    assert (args.gitops, args.forge) == ("https://git.example.com/ml/gitops.git", forge)
    # a fleet: models analysed at once (issue 31), 8 unless the manifests say otherwise
    assert args.workers == workers.get("workers", 8)
    # issue 42 (harmless list): a window is read once Prometheus scraped its end; the
    # guide's Prometheus (Istio's addon) scrapes every 15 s, so 0 judged its last 15 s unseen
    assert args.settle >= 2 * 15


def test_controller_manifests_take_workers_and_refuse_a_bad_count(capsys):
    base = ["controller", "manifests", "--gitops", "https://g/r.git", "--prometheus", "http://p"]
    assert main([*base, "--workers", "3"]) == 0
    assert "- --workers\n        - '3'" in capsys.readouterr().out
    code = main([*base, "--workers", "0"])  # the settings' bound (a user error), as `run`'s
    err = capsys.readouterr().err
    assert code != 0 and "--workers" in err and "at least 1" in err


def test_the_run_a_push_starts_parses_with_the_cli(tmp_path):
    args = parse_mlops(mlops_run_args(tmp_path / "repo", tmp_path / "out",
                                      "https://git.example.com/ml/gitops.git"), "post-receive hook")
    assert args.command == "run" and args.param == ["gitops-repo=https://git.example.com/ml/gitops.git"]
    # The hook's GitOps repo and model are the platform's: passed even when empty, so the
    # pushed mlops.yaml cannot fill them in (issue 41, findings 1 and 10).
    none = parse_mlops(mlops_run_args(tmp_path / "repo", tmp_path / "out", ""), "hook")
    assert none.param == ["gitops-repo="] and none.model is None
    bound = parse_mlops(mlops_run_args(tmp_path / "repo", tmp_path / "out", "", "shapes"), "hook")
    assert bound.model == "shapes"


def test_a_flag_the_cli_lacks_fails_the_parse():
    """The guard itself: a template naming a flag no parser has must fail, not pass."""
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --no-such-flag"):
        parse_mlops(["step", "gate", "--out", "x", "--no-such-flag"], "a bad template")
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --production-f"):
        parse_mlops(["step", "gate", "--out", "x", "--production-from-git", "r"], "abbreviated")
    with pytest.raises(pytest.fail.Exception, match="invalid choice"):
        parse_mlops(["step", "no-such-step"], "a bad template")
