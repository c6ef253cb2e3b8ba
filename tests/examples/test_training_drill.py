"""The example's --drill-* flags: a fault drill declared at training time, carried by the artifact.

The pure parts (the `fault:` section and the version it implies) are tested
without training; short real trainings (the same run with and without a
drill, and another seed, through one `--weights-cache`) check the export
writes what the server then reads, that a drill on identical weights still
gets a version of its own, and that the cache reuses weights only for the
same training inputs.
"""

import hashlib
import json

import pytest
import yaml

from serving.modeldir import FaultConfig, InferConfig, load_model_dir
from tests.fixtures.training import copy_example, example_module, run_train
from workflows.config import load_config
from workflows.worker_command import training_args

train = example_module("train")

SHA = hashlib.sha256(b"some weights").hexdigest()


def test_a_skew_drops_the_scale_swaps_mean_and_std_or_the_channel_order_and_nothing_else():
    section = {"mean": [0.5] * 3, "std": [0.25] * 3, "channel_order": "RGB", "scale": "1/255"}
    assert train.skewed_input(section, "no-scale") == dict(section, scale=1.0)
    assert train.skewed_input(section, "mean-std") == dict(section, mean=[0.25] * 3,
                                                           std=[0.5] * 3)
    assert train.skewed_input(section, "bgr") == dict(section, channel_order="BGR")
    assert train.skewed_input(section, "none") == section


def test_no_drill_keeps_the_weights_version():
    assert train.drill_fault() is None
    assert train.drill_fault(0, 0, 503) is None  # a status alone declares nothing
    assert train.model_version(SHA) == "v-" + SHA[:12]
    assert train.model_version(SHA, None) == "v-" + SHA[:12]


def test_a_drill_is_a_full_fault_section_the_server_accepts():
    fault = train.drill_fault(200, 0.3, 503)
    assert fault == {"delay_ms": 200.0, "error_rate": 0.3, "error_status": 503}
    assert train.drill_fault(200) == {"delay_ms": 200.0, "error_rate": 0.0, "error_status": 500}
    assert train.drill_fault(error_rate=1) == {
        "delay_ms": 0.0, "error_rate": 1.0, "error_status": 500}
    # what train.py writes is what serving/modeldir.py reads
    assert InferConfig.model_validate({"fault": fault}).fault == FaultConfig(**fault)


def test_a_drill_version_is_derived_from_weights_and_drill():
    fault = train.drill_fault(200)
    version = train.model_version(SHA, fault)
    canonical = '{"delay_ms":200.0,"error_rate":0.0,"error_status":500}'
    assert version == "v-" + hashlib.sha256((SHA + canonical).encode()).hexdigest()[:12]
    assert version != train.model_version(SHA)
    assert train.model_version(SHA, train.drill_fault(200.0, 0, 500)) == version  # canonical
    others = {train.model_version(SHA, train.drill_fault(*d))
              for d in [(201, 0, 500), (200, 0.1, 500), (0, 0.3, 500), (0, 0.3, 503)]}
    assert len(others) == 4 and version not in others
    other_weights = hashlib.sha256(b"other weights").hexdigest()
    assert train.model_version(other_weights, fault) != version


def _args(*flags):
    return ["--output-dir", "out", "--checkpoint-dir", "ckpt", *flags]


@pytest.mark.parametrize("flags, message", [
    (["--drill-error-rate", "1.5"], "--drill-error-rate must be between 0 and 1, got 1.5"),
    (["--drill-error-rate", "nan"], "--drill-error-rate must be between 0 and 1, got nan"),
    (["--drill-delay-ms", "-1"], "--drill-delay-ms must be in 0..3600000, got -1.0"),
    (["--drill-delay-ms", "inf"], "--drill-delay-ms must be in 0..3600000, got inf"),
    (["--drill-error-status", "404"], "--drill-error-status must be 500 or 503, got 404"),
])
def test_bad_drill_flags_are_one_line_errors(capsys, flags, message):
    assert train.main(_args(*flags)) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_mlops_yaml_args_reach_train_py(tmp_path):
    """`training.full.overrides.args: {drill-delay-ms: 200}` becomes a flag train.py accepts."""
    config = yaml.safe_load((train.HERE / "mlops.yaml").read_text())
    config["training"]["full"]["overrides"]["args"] = {"drill-delay-ms": 200,
                                                      "drill-error-rate": 0.25}
    (tmp_path / "mlops.yaml").write_text(yaml.safe_dump(config))
    job = load_config(tmp_path).full
    argv = training_args(job, "out", "ckpt")
    assert argv[-4:] == ["--drill-delay-ms", "200", "--drill-error-rate", "0.25"]
    args = train.parse_args(argv)
    assert train.drill_fault(args.drill_delay_ms, args.drill_error_rate,
                             args.drill_error_status) == {
        "delay_ms": 200.0, "error_rate": 0.25, "error_status": 500}
    assert load_config(train.HERE).full.args.get("drill-delay-ms") is None  # off by default


def test_export_with_a_drill_declares_it_and_gets_its_own_version(tmp_path,
                                                                   small_shapes_dataset):
    repo = copy_example(tmp_path / "repo")
    data = small_shapes_dataset  # 32 training, 8 val images
    flags = ["--data-dir", str(data), "--subset", "32", "--batch-size", "16",
             "--epochs", "1", "--log-every", "1", "--weights-cache", str(tmp_path / "cache")]
    runs, logs = {}, {}
    for name, extra in [("clean", []),
                        ("drill", ["--drill-delay-ms", "150", "--drill-error-rate", "0.2",
                                   "--drill-error-status", "503"]),
                        ("skew", ["--drill-skew", "mean-std"]),
                        ("other-seed", ["--seed", "1"])]:
        logs[name] = run_train(repo, ["--output-dir", str(tmp_path / name), "--checkpoint-dir",
                                      str(tmp_path / f"{name}-ckpt"), *flags, *extra]).stdout
        runs[name] = tmp_path / name / "model"

    clean = yaml.safe_load((runs["clean"] / "model.yaml").read_text())
    drill = yaml.safe_load((runs["drill"] / "model.yaml").read_text())
    fault = {"delay_ms": 150.0, "error_rate": 0.2, "error_status": 503}
    # The weights cache: the clean run stored its weights, the drill (serving flags only)
    # exported them without a training step; another seed is other weights and trains.
    assert "weights cache: stored" in logs["clean"] and "step=1 " in logs["clean"]
    assert "holds this run's weights" in logs["drill"] and "step=1 " not in logs["drill"]
    assert "holds" not in logs["other-seed"] and "weights cache: stored" in logs["other-seed"]
    other = yaml.safe_load((runs["other-seed"] / "model.yaml").read_text())
    assert other["weights_sha256"] != clean["weights_sha256"]
    assert drill["weights_sha256"] == clean["weights_sha256"]
    assert clean["version"] == "v-" + clean["weights_sha256"][:12]
    assert "drill" not in clean
    assert drill["drill"] == fault
    assert drill["version"] == train.model_version(drill["weights_sha256"], fault)
    assert drill["version"] != clean["version"]

    clean_cfg = yaml.safe_load((runs["clean"] / "infer_cfg.yml").read_text())
    drill_cfg = yaml.safe_load((runs["drill"] / "infer_cfg.yml").read_text())
    assert "fault" not in clean_cfg
    assert drill_cfg == dict(clean_cfg, fault=fault)  # nothing else differs
    assert load_model_dir(runs["drill"]).infer_cfg.fault == FaultConfig(**fault)
    assert load_model_dir(runs["clean"]).infer_cfg.fault is None
    # the evaluation input is the model's own detections: a drill does not change them
    assert json.loads((tmp_path / "drill" / "bbox.json").read_text()) == \
        json.loads((tmp_path / "clean" / "bbox.json").read_text())

    # a skew: same weights (from the cache), the served preprocessing wrong on purpose,
    # the gate's input unchanged (it cannot see a serving-side mistake), its own version
    skew = yaml.safe_load((runs["skew"] / "model.yaml").read_text())
    skew_cfg = yaml.safe_load((runs["skew"] / "infer_cfg.yml").read_text())
    assert "holds this run's weights" in logs["skew"]
    assert skew["weights_sha256"] == clean["weights_sha256"]
    assert skew["drill"] == {"skew": "mean-std"}
    assert skew["version"] == train.model_version(skew["weights_sha256"], {"skew": "mean-std"})
    assert skew["version"] not in (clean["version"], drill["version"])
    assert (skew_cfg["input"]["mean"], skew_cfg["input"]["std"]) == \
        (clean_cfg["input"]["std"], clean_cfg["input"]["mean"])
    assert {k: v for k, v in skew_cfg.items() if k != "input"} == \
        {k: v for k, v in clean_cfg.items() if k != "input"}
    assert "fault" not in skew_cfg  # answers are 200 and on time: only their content is off
    assert json.loads((tmp_path / "skew" / "bbox.json").read_text()) == \
        json.loads((tmp_path / "clean" / "bbox.json").read_text())
