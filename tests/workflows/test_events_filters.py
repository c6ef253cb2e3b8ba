"""Each forge's push payload through the rendered Sensor's filters, as Argo Events evaluates them.

The evaluator (`workflows.sensor_filters`) is transcribed from Argo Events
v1.9 `pkg/sensors/dependencies/filter.go`; its own semantics are pinned at
the bottom (unanchored regexes, missing path = no trigger, and/or). The
payloads are the documented shapes in tests/golden/events/ (see its README).
Before: the branch regex was unanchored (`main-old` trained), Gitea pushes
were all dropped (no `deleted` field), GitLab's shape was not read at all,
and the bot filter compared an email with the name `mlops-bot`.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re

import pytest

from gitops.git import BOT_IDENTITY, DEFAULT_IDENTITY
from tests.manifest_validation import validate_manifest
from workflows.argo_events import build_eventsource, build_sensor
from workflows.config import load_config
from workflows.sensor_filters import MISSING, dependency_matches, gjson_get
from workflows.settings import PipelineSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "events"
HEADERS = {"github": {"X-Github-Event": ["push"]}, "gitlab": {"X-Gitlab-Event": ["Push Hook"]},
           "gitea": {"X-Gitea-Event": ["push"], "X-Gitea-Event-Type": ["push"]}}


def _payload(forge: str, case: str) -> dict:
    """The documented payload for `case`: push, main-old, delete, bot."""
    if case == "delete":
        return json.loads((GOLDEN / f"{forge}-delete.json").read_text())
    body = json.loads((GOLDEN / f"{forge}-push.json").read_text())
    if case == "main-old":
        body["ref"] = "refs/heads/main-old"
    if case == "bot":
        for commit in [body.get("head_commit"), *(body.get("commits") or [])][-1:]:
            if commit:
                commit["author"] = {"name": BOT_IDENTITY.name, "email": BOT_IDENTITY.email}
        if body.get("head_commit"):
            body["head_commit"]["author"] = {"name": BOT_IDENTITY.name,
                                             "email": BOT_IDENTITY.email}
    return body


def _event(forge: str, dependency: str, body: dict) -> dict:
    if dependency == "github-push":  # the GitHub event source
        return {"headers": {k: v for k, v in HEADERS["github"].items()}, "body": body}
    return {"header": dict(HEADERS[forge], Authorization=["Bearer <token>"]), "body": body}


def _sensor(forge: str) -> dict:
    loaded = load_config(ROOT / "examples" / "shapes-detector")
    return build_sensor(loaded, PipelineSettings(model_forge=forge))


@pytest.mark.parametrize("forge", ["github", "gitlab", "gitea"])
@pytest.mark.parametrize("case, trains", [
    ("push", True), ("main-old", False), ("delete", False), ("bot", False),
])
def test_forge_payloads_through_the_rendered_filters(forge, case, trains):
    sensor = _sensor(forge)
    validate_manifest(sensor)
    for dependency in sensor["spec"]["dependencies"]:
        event = _event(forge, dependency["name"], _payload(forge, case))
        assert dependency_matches(dependency, event) is trains, (dependency["name"], case)


@pytest.mark.parametrize("forge, revision, clone", [
    ("github", "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
     "https://github.com/example-org/shapes-detector.git"),
    ("gitlab", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
     "https://gitlab.example.com/ml/shapes-detector.git"),
    ("gitea", "bffeb74224043ba2feb48d137756c8a9331c449a",
     "https://gitea.example.com/ml/shapes-detector.git"),
])
def test_trigger_parameters_read_each_forges_fields(forge, revision, clone):
    sensor = _sensor(forge)
    for trigger in sensor["spec"]["triggers"]:
        dependency = trigger["template"]["conditions"]
        event = _event(forge, dependency, _payload(forge, "push"))
        values = {p["dest"]: gjson_get(event, p["src"]["dataKey"])
                  for p in trigger["template"]["argoWorkflow"]["parameters"]
                  if "dataKey" in p["src"]}
        assert values["spec.arguments.parameters.0.value"] == clone
        assert values["spec.arguments.parameters.1.value"] == revision
        assert values["spec.arguments.parameters.2.value"] == "refs/heads/main"
        assert MISSING not in values.values()


@pytest.mark.parametrize("forge, sources", [
    ("github", {"github", "webhook"}), ("gitlab", {"webhook"}), ("gitea", {"webhook"}),
])
def test_eventsource_listens_where_the_forge_sends(forge, sources):
    loaded = load_config(ROOT / "examples" / "shapes-detector")
    doc = build_eventsource(loaded, PipelineSettings(model_forge=forge))
    validate_manifest(doc)
    assert {k for k in ("github", "webhook") if k in doc["spec"]} == sources
    ports = {p["name"] for p in doc["spec"]["service"]["ports"]}
    assert ports == sources


def test_the_bot_is_one_identity_everywhere():
    """Write-back commits as BOT_IDENTITY; the Sensor filters exactly its email."""

    assert DEFAULT_IDENTITY is BOT_IDENTITY and "@" in BOT_IDENTITY.email

    data = _sensor("github")["spec"]["dependencies"][0]["filters"]["data"]
    (bot,) = [f["value"][0] for f in data if f["path"].endswith("author.email")]
    assert re.search(bot, BOT_IDENTITY.email)  # exactly the email the write-back commits as
    assert not re.search(bot, BOT_IDENTITY.name) and not re.search(bot, "x" + BOT_IDENTITY.email)
    assert "bot_identity" not in PipelineSettings.model_fields


# -- the evaluator's own semantics (Argo Events filter.go) ---------------------------------------

def test_string_filters_are_unanchored_regexes_like_argo_events():
    dep = {"filters": {"data": [{"path": "body.ref", "type": "string",
                                 "value": ["refs/heads/main"]}]}}
    assert dependency_matches(dep, {"body": {"ref": "refs/heads/main-old"}})  # the old bug
    anchored = copy.deepcopy(dep)
    anchored["filters"]["data"][0]["value"] = ["^refs/heads/main$"]
    assert not dependency_matches(anchored, {"body": {"ref": "refs/heads/main-old"}})


def test_missing_path_fails_under_and_is_skipped_under_or():
    data = [{"path": "body.deleted", "type": "bool", "value": ["false"]},
            {"path": "body.ref", "type": "string", "value": ["main"]}]
    event = {"body": {"ref": "refs/heads/main"}}  # Gitea: no `deleted`
    assert not dependency_matches({"filters": {"data": data}}, event)
    assert dependency_matches({"filters": {"data": data, "dataLogicalOperator": "or"}}, event)


def test_not_equal_comparator_and_numbers():
    neq = {"filters": {"data": [{"path": "body.after", "type": "string", "value": ["^0{40}$"],
                                 "comparator": "!="}]}}
    assert not dependency_matches(neq, {"body": {"after": "0" * 40}})
    assert dependency_matches(neq, {"body": {"after": "a" * 40}})
    num = {"filters": {"data": [{"path": "body.n", "type": "number", "value": ["3"],
                                 "comparator": ">="}]}}
    assert dependency_matches(num, {"body": {"n": 5}}) and not dependency_matches(
        num, {"body": {"n": 2}})


def test_filters_this_evaluator_does_not_know_are_refused():
    with pytest.raises(ValueError, match="not evaluated here"):
        dependency_matches({"filters": {"exprs": [{"expr": "true"}]}}, {"body": {}})
