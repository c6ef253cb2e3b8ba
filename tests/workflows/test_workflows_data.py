"""Dataset pins in the pipeline (issue 29): prepare-data runs before training, hands the
prepared data to training and evaluation, records the verified digest, and refuses a bad
dataset with the file and entry named.

The model repo is the fake one (tests/fixtures/workflows.py): its train.py writes a stub
export at once and "detects" the prepared val split's own boxes, so a map50 of 1.0 says
training and evaluation read the pinned data. The data is real: the shapes example's
generator writes week 1 and week 2 (shrunk to 32 training images), `mlops data snapshot`
pins them, and the real local runner walks the rendered DAG.
"""

import dataclasses
import json
import pathlib
import shutil

import pytest
import yaml

from local.argo.runner import run_workflow
from mlops.cli import main as cli
from tests.fixtures.training import copy_example, example_module
from tests.fixtures.workflows import git, make_fake_model_repo
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.pipeline import build_workflow_template
from workflows.settings import load_settings
from workflows.steps import prepare_data

shapes_data = example_module("shapes_data")

TINY = dict(shapes_data.DEFAULT_PARAMS, num_train=32, num_val=4)  # week 2: 1 retired, 5 new
LABELS = ["circle", "square", "triangle"]
LOCK = "data/shapes.lock"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The team's shared storage: week 1 and week 2 of the shapes data, tiny, without the
    example's holdout split (these repos pin train and val)."""
    root = tmp_path_factory.mktemp("store")
    plain = dataclasses.replace(shapes_data.GENERATOR, holdout=False)
    plain.write_week(root, 2, TINY)  # writes week 1 first
    return root


def _pinned_repo(tmp_path: pathlib.Path, source: pathlib.Path, name: str = "w1") -> pathlib.Path:
    repo = make_fake_model_repo(tmp_path / "repo", gate_min=0.9)
    config = yaml.safe_load((repo / "mlops.yaml").read_text())
    config["evaluation"].pop("annotations")  # the val split comes from the pin
    config["data"] = {"train": LOCK, "val": LOCK, "labels": LABELS}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    _pin(repo, source, name)
    return repo


def _pin(repo: pathlib.Path, source: pathlib.Path, name: str) -> None:
    (repo / "data").mkdir(exist_ok=True)
    assert cli(["data", "snapshot", str(source), "--name", name, "--out", str(repo / LOCK)]) == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"data: {name}")


def _run(repo: pathlib.Path, out: pathlib.Path):
    wt = build_workflow_template(load_config(repo), load_settings())
    return run_workflow(wt, repo, out, echo=lambda _line: None)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv(prepare_data.CACHE_ENV, str(path))
    return path


def test_week_1_then_week_2_through_the_pipeline(tmp_path, store, cache):
    repo = _pinned_repo(tmp_path, store / "week-1", "shapes-w1")
    first = _run(repo, tmp_path / "run1")
    phases = {t.name: t.phase for t in first.tasks}
    assert first.status == "Succeeded", phases
    order = [t.name for t in first.tasks]
    assert order.index("checkout") < order.index("prepare-data") < order.index("smoke-train")
    lock = json.loads((repo / LOCK).read_text())
    prepared = first.task("prepare-data").outputs
    assert prepared["digest"] == lock["digest"]
    assert (prepared["images"], prepared["fetched"], prepared["hits"]) == ("36", "38", "0")
    # training got the prepared data (its stub detects the pinned val boxes) ...
    smoke_log = pathlib.Path(first.task("smoke-train").log).read_text()
    assert f"4 val images from {tmp_path / 'run1' / 'data'}" in smoke_log
    # ... and evaluation scored against the pinned val split: the stub's boxes are its own
    assert first.task("evaluate").outputs["map50"] == "1.000000"
    model = tmp_path / "run1" / "full" / "model"
    record = yaml.safe_load((model / "model.yaml").read_text())
    assert record["dataset_digest"] == lock["digest"] and record["dataset"] == "shapes-w1"
    assert json.loads((model / "datalock.json").read_text())["digest"] == lock["digest"]

    # Week 2 arrives: a new pin, committed. Only what week 1 did not have is fetched.
    _pin(repo, store / "week-2", "shapes-w2")
    second = _run(repo, tmp_path / "run2")
    assert second.status == "Succeeded", [(t.name, t.phase) for t in second.tasks]
    out = second.task("prepare-data").outputs
    # 36 train images (32 - 1 retired + 5 new) + 4 val; fetched: 5 new images + the new
    # train.json; the rest (35 kept images, 4 val images, val.json) from the cache
    assert (out["images"], out["fetched"], out["hits"]) == ("40", "6", "36")
    record = yaml.safe_load((tmp_path / "run2" / "full" / "model" / "model.yaml").read_text())
    assert record["dataset_digest"] == json.loads((repo / LOCK).read_text())["digest"]
    assert record["dataset_digest"] != lock["digest"]


def _bad_copy(store: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    source = tmp_path / "bad-week"
    shutil.copytree(store / "week-1", source)
    return source


def _edit(source: pathlib.Path, split: str, change) -> None:
    path = source / "annotations" / f"{split}.json"
    coco = json.loads(path.read_text())
    change(coco)
    path.write_text(json.dumps(coco))


def _break_image(source):
    path = source / "images" / "train" / "000003.png"
    data = path.read_bytes()
    path.write_bytes(data[:60] + bytes(b ^ 0xFF for b in data[60:90]) + data[90:])
    return "annotations/train.json: image id 4 (train/000003.png): does not decode"


def _box_outside(source):
    def change(coco):
        coco["annotations"][0]["bbox"] = [100, 100, 40, 20]
    _edit(source, "train", change)
    return "annotations/train.json: annotation id 1 (image id 1): box [100.0, 100.0, 40.0, " \
           "20.0] lies outside its image train/000000.png (128x128)"


def _unknown_category(source):
    def change(coco):
        coco["categories"].append({"id": 4, "name": "hexagon"})
        coco["annotations"][1]["category_id"] = 4
    _edit(source, "val", change)
    return "annotations/val.json: category id 4: unknown category 'hexagon' (the model's " \
           "labels: circle, square, triangle)"


def _overlap(source):
    shutil.copyfile(source / "images" / "val" / "000001.png",
                    source / "images" / "train" / "000005.png")
    return "train/000005.png and images/val/000001.png: the same image"


@pytest.mark.parametrize("damage", [_break_image, _box_outside, _unknown_category, _overlap],
                         ids=["broken-image", "box-outside", "unknown-category",
                              "train-val-overlap"])
def test_prepare_data_refuses_a_bad_dataset_naming_file_and_entry(
        tmp_path, store, cache, capsys, damage):
    """Each defect is pinned (snapshot judges nothing) and refused at the pipeline's
    prepare-data step, `mlops step prepare-data` as its container runs it."""
    source = _bad_copy(store, tmp_path)
    expected = damage(source)
    repo = _pinned_repo(tmp_path, source)
    capsys.readouterr()
    out = tmp_path / "out"
    code = cli(["step", "prepare-data", "--repo", str(repo), "--out", str(out),
                "--outputs", str(tmp_path / "outputs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: dataset w1 (sha256:") and "1 problem(s)" in err, err
    assert expected in err, err
    assert "Traceback" not in err
    assert not (out / "data").exists() or not any((out / "data").iterdir())


def test_a_bad_dataset_stops_the_run_before_training(tmp_path, store, cache):
    source = _bad_copy(store, tmp_path)
    expected = _box_outside(source)
    repo = _pinned_repo(tmp_path, source)
    result = _run(repo, tmp_path / "run")
    phases = {t.name: t.phase for t in result.tasks}
    assert result.status == "Failed"
    assert phases["prepare-data"] == "Failed"
    assert phases["smoke-train"] == "Omitted" and phases["train"] == "Omitted", phases
    task = result.task("prepare-data")
    assert "exited with code 2" in task.message
    assert expected in pathlib.Path(task.log).read_text()


def test_a_role_missing_from_its_lock_is_named(tmp_path, store, cache, capsys):
    repo = _pinned_repo(tmp_path, store / "week-1")
    config = yaml.safe_load((repo / "mlops.yaml").read_text())
    config["data"]["holdout"] = LOCK
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert cli(["step", "prepare-data", "--repo", str(repo), "--out", str(tmp_path / "o")]) == 2
    assert ("error: data/shapes.lock: no split 'holdout' (its splits: train, val); "
            "data.holdout names this lock") in capsys.readouterr().err


@pytest.mark.slow
def test_the_example_trains_on_week_1_then_week_2_at_the_smoke_template(tmp_path, store, cache):
    """The real shapes example (its train.py, Paddle, the export, COCO evaluation) on the
    two pinned weeks, both jobs at the smoke template (20 steps): what its train.py reads
    is the prepared data, and each model records the week it saw."""

    repo = copy_example(tmp_path / "shapes-detector")
    config = yaml.safe_load((repo / "mlops.yaml").read_text())
    config["training"]["full"] = {"template": "training-small"}
    config["data"].pop("holdout", None)  # this store's weeks hold train and val only
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    digests = []
    for week in (1, 2):
        _pin(repo, store / f"week-{week}", f"shapes-w{week}")
        result = _run(repo, tmp_path / f"run{week}")
        assert result.status == "Succeeded", [(t.name, t.phase, t.message) for t in result.tasks]
        log = pathlib.Path(result.task("train").log).read_text()
        images = 36 if week == 2 else 32
        assert f"images={images}" in log and "dataset=sha256:" in log, log[-2000:]
        record = yaml.safe_load((tmp_path / f"run{week}" / "full" / "model" / "model.yaml")
                                .read_text())
        assert record["dataset"] == f"shapes-w{week}"
        assert "dataset_digest_reported" not in record  # train.py read the verified pin
        digests.append(record["dataset_digest"])
    assert digests[0] != digests[1]


@pytest.mark.parametrize("change, message", [
    (lambda c: c.pop("data"), "evaluation.annotations: required without data pins"),
    (lambda c: c["data"].update(lables=["x"]), "data.lables: unknown field"),
    (lambda c: c["data"].pop("val"), "data.val: required field is missing"),
])
def test_a_bad_data_section_is_named_in_mlops_yaml(tmp_path, change, message):
    config = yaml.safe_load((pathlib.Path(__file__).parents[2] / "examples" / "shapes-detector"
                             / "mlops.yaml").read_text())
    change(config)
    (tmp_path / "mlops.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert str(tmp_path / "mlops.yaml") in str(err.value) and message in str(err.value)


REWRITE_VAL = '''
if args.data_dir:  # the attack of issue 41, finding 5: the val split says what was found
    ann = pathlib.Path(args.data_dir) / "annotations"
    val = json.loads((ann / "val.json").read_text())
    for truth, box in zip(val["annotations"], found):
        truth["bbox"] = box["bbox"]
    (ann / "val.json.new").write_text(json.dumps(val))
    os.replace(ann / "val.json.new", ann / "val.json")
    print("rewrote the val annotations", flush=True)
'''


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only-mount", "no-mount-here"])
def test_training_that_rewrites_the_val_split_never_reaches_the_gate(
        tmp_path, store, cache, monkeypatch, read_only):
    """Issue 41, finding 5: the training job shared the workspace with the prepared data;
    it replaced `annotations/val.json` with its own detections and a candidate whose
    map50 is 0 passed the gate at 1.0. Two controls, each shown alone: the prepared data
    is a read-only mount for the training job (locally too: `paddlejob_local`), and,
    where that cannot be had (a machine without unshare(1), faked here), evaluation
    verifies the val split against the repo's pins again and refuses to judge."""
    from workflows import paddlejob_local

    if not read_only:
        monkeypatch.setattr(paddlejob_local, "read_only_problem", lambda: "not in this test")
    repo = _pinned_repo(tmp_path, store / "week-1", "shapes-w1")
    with open(repo / "train.py", "a") as script:
        script.write(REWRITE_VAL)
    git(repo, "commit", "-qam", "train.py: grade itself")
    monkeypatch.setenv("FAKE_BOX_SHIFT", "60")  # nothing it finds overlaps the truth
    result = _run(repo, tmp_path / "run")
    assert result.status == "Failed"
    assert "gate" not in {t.name for t in result.tasks if t.phase == "Succeeded"}
    val = tmp_path / "run" / "data" / "annotations" / "val.json"
    if read_only:
        smoke = result.task("smoke-train")
        assert smoke.phase == "Failed"
        assert "Read-only file system" in pathlib.Path(smoke.log).read_text()
        assert val.read_bytes() == (store / "week-1" / "annotations" / "val.json").read_bytes()
        return
    assert "rewrote the val annotations" in pathlib.Path(result.task("train").log).read_text()
    evaluate = result.task("evaluate")
    assert evaluate.phase == "Failed"
    log = pathlib.Path(evaluate.log).read_text()
    assert f"{val}: sha256" in log and "changed after prepare-data verified them" in log


def test_a_prepared_lock_that_is_not_the_repos_is_refused(tmp_path, store, cache):
    """The lock beside the prepared data is rewritten too (with its digest recomputed, so
    it reads as a valid lock claiming the new file): it must be the repo's own lock."""
    from datapins.errors import DataDigestMismatch
    from datapins.lock import FilePin, make_lock, read_lock, write_lock
    from workflows.steps.data_lineage import pinned_lock

    repo = _pinned_repo(tmp_path, store / "week-1", "shapes-w1")
    out = tmp_path / "out"
    assert cli(["step", "prepare-data", "--repo", str(repo), "--out", str(out),
                "--outputs", str(tmp_path / "o")]) == 0
    loaded = load_config(repo)
    assert pinned_lock(loaded, out) == out / "data" / "datalock.json"  # as prepared: fine
    marker = out / "data" / "datalock.json"
    lock = read_lock(marker)
    val = lock.splits["val"]
    forged = val.model_copy(update={"annotations": FilePin(
        path=val.annotations.path, size=2, sha256="0" * 64)})
    write_lock(make_lock(lock.name, lock.source, {**lock.splits, "val": forged}), marker)
    with pytest.raises(DataDigestMismatch, match="is not the lock of mlops.yaml's pins"):
        pinned_lock(loaded, out)
