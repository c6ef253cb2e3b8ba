"""JSON Schemas of `mlops.yaml`, the platform settings and the canary policy (issue 44).

They are generated from the pydantic models that load the files (`mlops.reference.schemas`)
and shipped in the package (`mlops/schemas/`), so the shipped text must be what the models
give now (`MLOPS_REGENERATE=1` rewrites it on purpose), the files we ship as examples must
validate against them, and what a schema refuses the loader refuses too.
"""

from __future__ import annotations

import json
import os
import pathlib
import re

import jsonschema
import pytest
import tomllib
import yaml

from mlops.cli import main
from mlops.reference import schemas

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*/mlops.yaml"))


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schemas.shipped(name))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", schemas.NAMES)
def test_the_shipped_schema_is_the_generated_one(name):
    generated = schemas.render(name)
    path = schemas.schema_path(name)
    if os.environ.get("MLOPS_REGENERATE") == "1":
        path.write_text(generated)
    assert path.read_text() == generated, (
        f"{path.relative_to(ROOT)} differs from the model; run "
        "`python -m mlops.reference.schemas` (or MLOPS_REGENERATE=1) and commit it")


def test_the_package_ships_the_schemas():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "schemas/*.json" in data["tool"]["setuptools"]["package-data"]["mlops"]
    assert {p.name for p in schemas.SCHEMA_DIR.glob("*.json")} == \
        {f"{n}.schema.json" for n in schemas.NAMES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_the_examples_name_their_schema_and_validate_against_it(path):
    text = path.read_text()
    first = text.splitlines()[0]
    match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert match, f"{path}: the first line names no schema"
    assert (path.parent / match.group(1)).resolve() == schemas.schema_path("mlops.yaml")
    data = yaml.safe_load(text)
    errors = [e.message for e in _validator("mlops.yaml").iter_errors(data)]
    assert errors == []
    canary = data.get("promotion", {}).get("canary", {})
    assert [e.message for e in _validator("canary-policy").iter_errors(canary)] == []


def test_the_cluster_guides_settings_validate():
    text = (ROOT / "docs" / "cluster.md").read_text()
    block = re.search(r"```yaml\n(# settings\.yaml\n.*?)```", text, re.S)
    assert block
    assert [e.message for e in _validator("settings").iter_errors(
        yaml.safe_load(block.group(1)))] == []


@pytest.mark.parametrize("change, where", [
    (lambda d: d["gate"].update(minimum=0.5), "minimum"),                       # a typo
    (lambda d: d["promotion"]["canary"].update(interval="10 seconds"), "interval"),
    (lambda d: d["promotion"]["canary"].update(steps=[10, 250]), "steps"),
    (lambda d: d["serving"].update(replicas=0), "0"),
])
def test_what_the_schema_refuses_the_loader_refuses(tmp_path, change, where):
    from workflows.config import load_config
    from workflows.errors import ConfigError

    data = yaml.safe_load((ROOT / "examples/shapes-detector/mlops.yaml").read_text())
    change(data)
    errors = list(_validator("mlops.yaml").iter_errors(data))
    assert errors, "the schema accepted it"
    (tmp_path / "mlops.yaml").write_text(yaml.safe_dump(data))
    try:
        config = load_config(tmp_path)
    except ConfigError:
        return
    from promotion.decision.policy import load_policy
    from promotion.errors import PolicyError

    with pytest.raises(PolicyError, match=re.escape(where)):
        load_policy(config.config.promotion.canary)


def test_durations_are_seconds_or_strings_in_the_schema_as_in_the_policy():
    from promotion.decision.policy import load_policy

    validator = _validator("canary-policy")
    for good in (30, 2.5, "30s", "1m30s", "1h"):
        assert not list(validator.iter_errors({"interval": good})), good
        load_policy({"interval": good})
    for bad in ("30", "soon", 0, -1):
        assert list(validator.iter_errors({"interval": bad})), bad


def test_mlops_schema_prints_the_shipped_schema(capsys, tmp_path):
    assert main(["schema", "mlops.yaml"]) == 0
    assert capsys.readouterr().out == schemas.shipped("mlops.yaml")
    assert main(["schema", "settings", "--out", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text() == schemas.shipped("settings")
    assert main(["schema", "canary"]) == 0  # an alias
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["title"] == "CanaryPolicy"
    assert main(["schema", "nope"]) == 2
    assert "mlops.yaml, settings, canary-policy" in capsys.readouterr().err
