"""mlops.yaml and resource templates: typed at the boundary, clear errors."""

import pathlib
import textwrap

import pytest

from mlops.cli import main as cli
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.resources import apply_overrides, load_template, template_names

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "shapes-detector"

GOOD = """
model: demo
training:
  command: [python, train.py]
  smoke: {template: training-small, overrides: {max-steps: 5}}
  full: {template: training-medium, overrides: {workers: 3, args: {epochs: 4, lr: 0.01}}}
evaluation:
  annotations: data/val.json
"""


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    (tmp_path / "mlops.yaml").write_text(textwrap.dedent(text))
    return tmp_path


def test_example_config_loads():
    loaded = load_config(EXAMPLE)
    assert loaded.config.model == "shapes-detector"
    assert loaded.full.workers == 2
    assert loaded.smoke.workers == 1
    assert loaded.config.gate.min == pytest.approx(0.85)


def test_overrides_apply_to_fields_and_args(tmp_path):
    loaded = load_config(write(tmp_path, GOOD))
    assert loaded.smoke.args["max-steps"] == 5
    assert loaded.smoke.args["subset"] == 64  # untouched template arg kept
    assert loaded.full.workers == 3
    assert loaded.full.cpu == "2"
    assert loaded.full.args == {"epochs": 4, "lr": 0.01}


def test_new_args_need_the_args_key(tmp_path):
    """`epochs` is neither a field nor an arg of training-medium: a typo guard."""
    text = GOOD.replace("args: {epochs: 4, lr: 0.01}", "epochs: 4")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert "training.full.overrides.epochs" in str(err.value)


def test_unknown_override_names_the_choices(tmp_path):
    text = GOOD.replace("max-steps: 5", "max_stepz: 5")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    msg = str(err.value)
    assert "mlops.yaml" in msg and "training.smoke.overrides.max_stepz" in msg
    assert "workers" in msg and "max-steps" in msg


def test_unknown_template_lists_shipped_ones(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, GOOD.replace("training-medium", "training-huge")))
    msg = str(err.value)
    assert "training-huge" in msg
    for name in template_names():
        assert name in msg


def test_bad_override_type_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, GOOD.replace("workers: 3", "workers: many")))
    assert "training.full.overrides.workers" in str(err.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("model: demo\n", ["training: required field is missing", "evaluation: required"]),
        (GOOD + "gate: {min: 2}\n", ["gate.min"]),
        (GOOD + "extra_key: 1\n", ["extra_key: unknown field"]),
        (GOOD.replace("model: demo", "model: Demo_Model"), ["model:"]),
        (GOOD + "promotion: {approval: maybe}\n", ["promotion.approval"]),
        ("model: [unclosed\n", ["not valid YAML", "line"]),
        ("- a\n- b\n", ["expected a mapping"]),
    ],
)
def test_bad_config_errors_name_file_and_field(tmp_path, text, expected):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    msg = str(err.value)
    assert str(tmp_path / "mlops.yaml") in msg
    for part in expected:
        assert part in msg


def test_missing_config_via_cli_is_one_line_and_exit_2(tmp_path, capsys):
    code = cli(["step", "evaluate", "--repo", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2
    out = capsys.readouterr()
    assert "mlops.yaml" in out.out + out.err
    assert "Traceback" not in out.out + out.err
    assert not (tmp_path / "out").exists()  # nothing written half-way


def test_templates_are_valid_and_distinct():
    names = template_names()
    assert names == ["training-large", "training-medium", "training-small"]
    small, large = load_template("training-small"), load_template("training-large")
    assert small.workers == 1 and large.gpus >= 1
    with pytest.raises(ConfigError):
        apply_overrides(small, {"args": 3})
