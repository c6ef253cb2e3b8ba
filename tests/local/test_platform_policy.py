"""A push to a model repo cannot loosen the platform's policy (issue 16, finding 5).

The review merged a candidate to 100 % with no human by pushing an
`mlops.yaml` with `approval: auto`, `gate.min: 0`, `steps: [100]`, an
`errors: vector(0)` query and an arbitrary `serving.image`. The policy now
lives in the GitOps repo (`mlops-gitops.yaml`, `policy:`), which the
platform team owns; each attack below is that push, through the real CLI
on real bare git repos, refused with the field named and nothing written.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import yaml

from mlops.cli import main as cli
from promotion.decision.gate import GateConfig
from promotion.errors import PolicyError
from promotion.gitrepo.platform_policy import load_platform_policy
from tests.fixtures.gitops import Human
from tests.fixtures.production import fake_model_dir
from tests.fixtures.workflows import make_fake_model_repo

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "fake-detector"
PLATFORM = {"approval": "pr", "gate": {"min": 0.6},
            "canary": {"steps": [10, 25, 50, 100], "interval": "30s", "max_error_rate": 0.01},
            "images": ["registry.example.com/mlops/"]}


def _set_policy(repo: pathlib.Path, tmp_path: pathlib.Path, policy: dict | None) -> None:
    """The platform team's commit to the GitOps repo's settings."""
    human = Human(repo, tmp_path / "platform-team")
    human.sync()
    doc = yaml.safe_load(human.read("mlops-gitops.yaml"))
    doc["policy"] = policy
    human.write("mlops-gitops.yaml", yaml.safe_dump(doc))
    human.commit_push("platform policy")


def _model_repo(tmp_path: pathlib.Path, **changes) -> pathlib.Path:
    """A model repo whose mlops.yaml the pusher controls."""
    repo = make_fake_model_repo(tmp_path / "model-repo", gate_min=0.6)
    path = repo / "mlops.yaml"
    doc = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        node = doc
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path.write_text(yaml.safe_dump(doc))
    return repo


def _branches(repo: pathlib.Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, text=True, check=True).stdout


ATTACKS = {
    "approval auto": ({"promotion.approval": "auto"}, "approval auto is not allowed"),
    "one step to 100%": ({"promotion.canary.steps": [100]}, "steps [100] skip ahead"),
    "errors hidden": ({"promotion.canary.metrics": {"preset": "custom", "queries": {
        "requests": "sum(increase(x[$window]))", "errors": "sum(increase(none[$window]))"}}},
        "custom metric queries are the platform's to write"),
    # Issue 41, finding 4: where the numbers come from is the platform's, set or not.
    "another namespace": ({"promotion.canary.metrics": {"namespace": "attacker"}},
                          "metrics (preset, namespace) are the platform's to set"),
    "a preset blind to the router": ({"promotion.canary.metrics": {"preset": "model"}},
                                     "metrics (preset, namespace) are the platform's to set"),
    "looser error rate": ({"promotion.canary.max_error_rate": 0.5},
                          "max_error_rate 0.5 is above the platform's 0.01"),
    "any image": ({"serving.image": "evil.example.com/miner:1"},
                  "image 'evil.example.com/miner:1' is not allowed"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_pushed_mlops_yaml_cannot_loosen_the_platform_policy(attack, empty_gitops, tmp_path,
                                                               capsys):
    changes, words = ATTACKS[attack]
    _set_policy(empty_gitops, tmp_path, PLATFORM)
    model_repo = _model_repo(tmp_path, **changes)
    model_dir = fake_model_dir(tmp_path, MODEL, "v1", {"map50": 0.9, "map": 0.6})
    before = _branches(empty_gitops)
    code = cli(["promote", "propose", str(model_dir), "--gitops", str(empty_gitops),
                "--config", str(model_repo / "mlops.yaml")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and "mlops.yaml" in err
    assert _branches(empty_gitops) == before  # no branch, no PR, nothing merged


def test_without_a_policy_section_a_human_still_approves(empty_gitops, tmp_path, capsys):
    model_repo = _model_repo(tmp_path, **{"promotion.approval": "auto"})
    model_dir = fake_model_dir(tmp_path, MODEL, "v1", {"map50": 0.9, "map": 0.6})
    code = cli(["promote", "propose", str(model_dir), "--gitops", str(empty_gitops),
                "--config", str(model_repo / "mlops.yaml")])
    assert code == 2 and "approval auto is not allowed" in capsys.readouterr().err


def test_tightening_is_accepted_and_written_to_the_gitops_repo(empty_gitops, tmp_path):
    _set_policy(empty_gitops, tmp_path, PLATFORM)
    model_repo = _model_repo(tmp_path, **{"promotion.canary.interval": "60s",
                                          "promotion.canary.steps": [5, 10, 25, 50, 100],
                                          "serving.image": "registry.example.com/mlops/s:2"})
    model_dir = fake_model_dir(tmp_path, MODEL, "v1", {"map50": 0.9, "map": 0.6})
    outputs = tmp_path / "outputs"
    assert cli(["promote", "propose", str(model_dir), "--gitops", str(empty_gitops),
                "--config", str(model_repo / "mlops.yaml"), "--outputs", str(outputs)]) == 0
    branch = (outputs / "branch").read_text()
    written = yaml.safe_load(subprocess.run(
        ["git", "-C", str(empty_gitops), "show",
         f"{branch}:apps/{MODEL}/canary-policy.yaml"],
        capture_output=True, text=True, check=True).stdout)
    # The model's tighter values, the platform's for what the model left alone.
    assert written["interval"] == 60 and written["steps"] == [5, 10, 25, 50, 100]
    assert written["max_error_rate"] == 0.01
    state = json.loads((outputs / "proposal.json").read_text())
    assert state["merged"] is False  # approval stays a human's


def test_the_gate_step_holds_the_platform_floor(empty_gitops, tmp_path, capsys):
    _set_policy(empty_gitops, tmp_path, PLATFORM)
    model_repo = _model_repo(tmp_path, **{"gate.min": 0.0})
    out = tmp_path / "out"
    (out / "full").mkdir(parents=True)
    (out / "full" / "metrics.json").write_text(json.dumps({"map50": 0.1, "map": 0.05}))
    code = cli(["step", "gate", "--repo", str(model_repo), "--out", str(out),
                "--production-from-gitops", str(empty_gitops)])
    printed = capsys.readouterr()
    err = printed.out + printed.err  # steps print their one-line error to the step log
    assert code == 2, err
    assert "gate" in err and "min 0 is below the platform's 0.6" in err
    assert not (out / "full" / "gate.json").exists()  # no verdict, let alone a pass


def test_the_bounds_are_only_those_the_platform_set():
    """Pure: an unset bound is not a bound; a set one is kept when the model is silent."""
    policy = load_platform_policy({"gate": {"min": 0.6}, "canary": {"min_requests": 300}})
    assert policy.gate_for(GateConfig(min=0.7, max_regression=0.2), "m").max_regression == 0.2
    assert policy.canary_for({"interval": "5s"}, "m").min_requests == 300
    with pytest.raises(PolicyError, match="min_requests 10 is below the platform's 300"):
        policy.canary_for({"min_requests": 10}, "m")
    with pytest.raises(PolicyError, match="policy.approval"):
        load_platform_policy({"approval": "sometimes"})


def test_the_canary_modes_are_bounds_only_where_the_platform_sets_them():
    """Pure: `approval: step` holds once the platform asks for it; `mode` is the
    platform's when it sets one (shadow leaves a bad canary serving until a
    person acts); unset, a model team may choose either."""
    free = load_platform_policy({})
    assert free.canary_for({"mode": "shadow", "approval": "step"}, "m").mode == "shadow"
    strict = load_platform_policy({"canary": {"approval": "step", "mode": "auto"}})
    assert strict.canary_for({}, "m").approval == "step"  # the model is silent: the bound holds
    with pytest.raises(PolicyError, match="the platform has a person approve each step"):
        strict.canary_for({"approval": "auto"}, "m")
    with pytest.raises(PolicyError, match="mode shadow"):
        strict.canary_for({"mode": "shadow"}, "m")
