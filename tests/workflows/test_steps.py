"""The step entrypoints on the real example: smoke-train, evaluate, gate, publish.

These run the example's own train.py for real (one process, 20 steps on a
subset), reusing the session's generated dataset through a symlink.
"""

import base64
import json
import os
import pathlib
import re
import shutil
import textwrap
import time

import pytest
import requests
import yaml

from contracts.artifact import PROBE_DIR, PROBE_MAX_BYTES, PROBE_MAX_IMAGES, read_record
from mlops.cli import main as cli
from tests.fixtures.serving import start_server, stop_server
from tests.fixtures.training import copy_example, unpin
from workflows.errors import StepError
from workflows.probe_set import choose_probe_images, stratified_sample
from workflows.steps import gate, publish, smoke_train


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, shapes_dataset):
    """One smoke-train run of a copy of the example (shared by this module)."""
    base = tmp_path_factory.mktemp("steps")
    repo = unpin(copy_example(base / "repo"))
    (repo / "data").symlink_to(shapes_dataset, target_is_directory=True)
    out = base / "out"
    params = smoke_train.run(str(repo), str(out))
    return repo, out, params


def test_smoke_train_produces_a_loadable_artifact(smoke_run):
    repo, out, params = smoke_run
    model_dir = pathlib.Path(params["model_dir"])
    assert model_dir == out / "smoke" / "model"
    record = yaml.safe_load((model_dir / "model.yaml").read_text())
    assert params["version"] == record["version"] and params["version"].startswith("v-")
    assert len(params["weights_sha256"]) == 64
    assert params["workers"] == 1
    log = (out / "smoke" / "train.log").read_text()
    assert "--max-steps 20" in log and "--subset 64" in log  # the small template's args


def test_evaluate_and_gate_on_the_smoke_model(smoke_run, capsys):
    repo, out, _ = smoke_run
    code = cli(["step", "evaluate", "--repo", str(repo), "--out", str(out), "--which", "smoke"])
    assert code == 0
    outputs = out / "outputs"
    map50 = float((outputs / "map50").read_text())
    metrics = json.loads((out / "smoke" / "metrics.json").read_text())
    assert map50 == pytest.approx(metrics["map50"], abs=1e-6)
    assert 0.0 <= metrics["map"] <= metrics["map50"] <= 1.0
    record = yaml.safe_load((out / "smoke" / "model" / "model.yaml").read_text())
    assert record["metrics"]["map50"] == pytest.approx(map50, abs=1e-6)

    # 20 steps cannot reach the example's 0.85 floor: the gate says so, in words.
    params = gate.run(str(repo), str(out), which="smoke")
    assert params["passed"] == "false"
    assert "below the minimum 0.8500" in params["reason"]
    # --exit-code turns the verdict into exit 6 (gate refused), still writing the outputs.
    code = cli(["step", "gate", "--repo", str(repo), "--out", str(out), "--which", "smoke",
                "--exit-code"])
    assert code == 6
    assert (outputs / "passed").read_text() == "false"


def test_gate_against_a_better_production_model(smoke_run, tmp_path):
    repo, out, _ = smoke_run
    metrics = json.loads((out / "smoke" / "metrics.json").read_text())
    prod = tmp_path / "model.yaml"
    prod.write_text(
        yaml.safe_dump({"version": "v-old", "metrics": {"map50": metrics["map50"] + 0.2}})
    )
    # lower the floor so only the regression check can fail
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["gate"]["min"] = 0.0
    lowered = tmp_path / "repo"
    shutil.copytree(repo, lowered, symlinks=True)
    (lowered / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    params = gate.run(str(lowered), str(out), production=str(prod), which="smoke")
    assert params["passed"] == "false"
    assert "regresses from production" in params["reason"]


@pytest.mark.parametrize(
    ("name", "train_py", "expected"),
    [
        # A crashing training command fails fast, naming the exit code, the error and the log.
        ("broken", "import no_such_module_here\n",
         ["exited with code 1", "no_such_module_here", "train.log"]),
        # One that exits 0 without an export is refused, naming the missing files.
        ("lazy", "print('trained, honestly')\n", ["inference.pdiparams", "bbox.json"]),
    ],
    ids=["crashes", "exports-nothing"],
)
def test_smoke_train_refuses_a_repo_that_does_not_train(tmp_path, name, train_py, expected):
    repo = tmp_path / name
    repo.mkdir()
    (repo / "train.py").write_text(train_py)
    (repo / "mlops.yaml").write_text(textwrap.dedent(f"""
        model: {name}
        training: {{command: [python, train.py]}}
        evaluation: {{annotations: data/val.json}}
    """))
    with pytest.raises(StepError) as err:
        smoke_train.run(str(repo), str(tmp_path / "out"))
    for words in expected:
        assert words in str(err.value)


def test_evaluate_with_empty_predictions_exits_nonzero(smoke_run, tmp_path, capsys):
    repo, out, _ = smoke_run
    fake_out = tmp_path / "out"
    shutil.copytree(out / "smoke" / "model", fake_out / "full" / "model")  # a real export
    (fake_out / "full" / "bbox.json").write_text("[]")
    code = cli(["step", "evaluate", "--repo", str(repo), "--out", str(fake_out)])
    assert code == 2
    assert "no detections" in capsys.readouterr().err
    assert not (fake_out / "full" / "metrics.json").exists()
    # Without an export at all, evaluate names what training failed to leave.
    shutil.rmtree(fake_out / "full" / "model")
    assert cli(["step", "evaluate", "--repo", str(repo), "--out", str(fake_out)]) != 0
    assert "lacks: inference.pdiparams" in capsys.readouterr().err
    assert not (fake_out / "outputs").exists()


# --- publish-model -------------------------------------------------------------


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_publish_copies_the_export_under_model_and_version(smoke_run, tmp_path, capsys):
    repo, out, params = smoke_run
    models = tmp_path / "models"
    models.mkdir()
    outputs = tmp_path / "outputs"
    code = cli(["step", "publish", "--repo", str(repo), "--out", str(out), "--outputs",
                str(outputs), "--which", "smoke", "--models-root", str(models)])
    assert code == 0, capsys.readouterr()
    target = models / "shapes-detector" / params["version"]
    assert (outputs / "model-dir").read_text() == str(target)
    published = {k: v for k, v in _tree(target).items() if not k.startswith(f"{PROBE_DIR}/")}
    assert published == _tree(out / "smoke" / "model")  # the whole export, byte for byte
    assert sorted(p.name for p in target.parent.iterdir()) == [
        params["version"]
    ]  # no temp dir left
    # A retry (or a re-run of the same commit) finds the same weights: fine, nothing rewritten.
    before = (target / "model.yaml").stat().st_mtime_ns
    assert publish.run(str(out), str(models), "smoke") == {"model-dir": str(target)}
    assert "already published" in capsys.readouterr().out
    assert (target / "model.yaml").stat().st_mtime_ns == before


def test_publish_ships_a_stratified_random_probe_set_served_at_the_probe_route(
        smoke_run, tmp_path):
    """Every published version gets `probe/` (workflows/probe_set.py): 32 val images drawn at
    random and stratified by class (seeded by the annotations, so the same pin ships the same
    set), decodable, within the caps, outside the weights' digest; its server hands them out
    at `GET .../probe` (serving/probe.py), what the paired answers check asks."""
    # lazy (collection cost): pillow loads only when this runs
    from PIL import Image

    repo, out, params = smoke_run
    models = tmp_path / "models"
    models.mkdir()
    target = pathlib.Path(publish.run(str(out), str(models), "smoke", str(repo))["model-dir"])
    assert not (out / "smoke" / "model" / PROBE_DIR).exists()  # the export is left as written
    shipped = sorted((target / PROBE_DIR).iterdir())
    val = json.loads((repo / "data" / "val.json").read_text())
    chosen = choose_probe_images(repo / "data" / "val.json")
    assert chosen == choose_probe_images(repo / "data" / "val.json")  # a re-run: the same set
    assert len(val["images"]) > PROBE_MAX_IMAGES  # so the cap, not the set's size, chose 32
    assert len(chosen) == len(set(chosen)) == PROBE_MAX_IMAGES
    first = sorted(i["file_name"] for i in val["images"])[:PROBE_MAX_IMAGES]
    names = [str(p.relative_to((repo / "data").resolve())) for p in chosen]
    assert sorted(names) != first  # not the first by file name
    by_id = {i["id"]: i["file_name"] for i in val["images"]}
    classes = {a["category_id"] for a in val["annotations"]}
    held = {a["category_id"] for a in val["annotations"] if by_id[a["image_id"]] in names}
    assert held == classes  # every class has images in it
    assert [p.name for p in shipped] == [f"{i:02d}-{p.name}" for i, p in enumerate(chosen)]
    assert [p.read_bytes() for p in shipped] == [p.read_bytes() for p in chosen]
    assert sum(p.stat().st_size for p in shipped) <= PROBE_MAX_BYTES
    for path in shipped:
        with Image.open(path) as image:
            image.load()  # decodes: a real image, not a name
    read_record(target, check_weights=True)  # probe/ is not weights: the digest still holds

    server = start_server(target, log_dir=tmp_path)
    try:
        response = requests.get(f"{server.url}/v2/models/{server.model_name}/versions/"
                                f"{params['version']}/probe", timeout=30)
    finally:
        stop_server(server)
    assert response.status_code == 200, response.text
    images = response.json()["images"]
    assert [i["name"] for i in images] == [p.name for p in shipped]
    assert base64.b64decode(images[0]["data"]) == shipped[0].read_bytes()


def test_publish_without_val_images_at_hand_ships_no_probe_set_and_says_why(tmp_path, capsys):
    """A repo may keep its images elsewhere than next to the annotations: the version is
    still published, without `probe/` (the answers check then has no verdict, never a pass),
    and the log names the file and the folder looked in."""
    repo = unpin(copy_example(tmp_path / "repo"))
    (repo / "data").mkdir()
    (repo / "data" / "val.json").write_text(json.dumps(
        {"images": [{"id": 1, "file_name": "val/gone.png"},
                    {"id": 2, "file_name": "../../outside.png"}]}))
    (tmp_path / "outside.png").write_bytes(b"not of the set")
    out = tmp_path / "out"
    _fake_export(out, name="shapes-detector")  # with --repo, the repo's own model's name
    models = tmp_path / "models"
    models.mkdir()
    code = cli(["step", "publish", "--repo", str(repo), "--out", str(out),
                "--models-root", str(models)])
    printed = capsys.readouterr()
    assert code == 0, printed
    assert re.search(r"warning: no probe set shipped: .*val\.json: none of its 2 images .* "
                     r"under .*data", printed.out), printed
    assert (models / "shapes-detector" / "v-1" / "model.yaml").is_file()
    assert not (models / "shapes-detector" / "v-1" / PROBE_DIR).exists()


def test_publish_refuses_other_weights_under_a_published_version(smoke_run, tmp_path):
    _, out, params = smoke_run
    models = tmp_path / "models"
    target = models / "shapes-detector" / params["version"]
    target.mkdir(parents=True)
    record = yaml.safe_load((out / "smoke" / "model" / "model.yaml").read_text())
    (target / "model.yaml").write_text(yaml.safe_dump({**record, "weights_sha256": "0" * 64}))
    with pytest.raises(StepError, match="already holds other weights.*refusing to overwrite"):
        publish.run(str(out), str(models), "smoke")
    assert sorted(p.name for p in target.iterdir()) == ["model.yaml"]  # left as it was


@pytest.mark.parametrize("problem, expected", [
    ("no-volume", "models volume .*: not a directory"),
    ("no-export", r"model.yaml: not found \(did the train step export the model\?\)"),
    ("bad-version", "field 'version' is '../escape'"),
])
def test_publish_errors_name_what_is_wrong(tmp_path, capsys, problem, expected):
    out = tmp_path / "out"
    model = out / "full" / "model"
    model.mkdir(parents=True)
    if problem != "no-export":
        version = "../escape" if problem == "bad-version" else "v-1"
        (model / "model.yaml").write_text(yaml.safe_dump(
            {"name": "m", "version": version, "weights_sha256": "a" * 64}))
    models = tmp_path / "models"
    if problem != "no-volume":
        models.mkdir()
    code = cli(["step", "publish", "--out", str(out), "--models-root", str(models)])
    printed = capsys.readouterr()
    assert code in (1, 2) and "Traceback" not in printed.out + printed.err
    assert re.search(expected, printed.out + printed.err), printed
    assert not models.exists() or not any(models.rglob("*"))  # nothing written


def _fake_export(out: pathlib.Path, version: str = "v-1", name: str = "m") -> pathlib.Path:
    model = out / "full" / "model"
    model.mkdir(parents=True)
    (model / "model.yaml").write_text(yaml.safe_dump(
        {"name": name, "version": version, "weights_sha256": "a" * 64}))
    (model / "inference.pdiparams").write_bytes(b"weights")
    return model


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_publish_refuses_a_symlink_in_the_export(tmp_path, capsys, kind):
    """Finding 8 of the hardening review: a link left by training code was followed and its
    target (a home directory, a token file) copied onto the volume every serving pod reads."""
    secret = tmp_path / "outside"
    if kind == "dir":
        secret.mkdir()
        (secret / "token").write_text("s3cr3t")
    else:
        secret.write_text("s3cr3t")
    model = _fake_export(tmp_path / "out")
    (model / "extra").symlink_to(secret)
    models = tmp_path / "models"
    models.mkdir()
    code = cli(["step", "publish", "--out", str(tmp_path / "out"), "--models-root", str(models)])
    printed = capsys.readouterr()
    assert code != 0 and "Traceback" not in printed.out + printed.err
    assert re.search(r"extra: a symbolic link .*outside", printed.out + printed.err), printed
    assert not any(models.rglob("*"))  # nothing published, no temp copy either
    assert not any("s3cr3t" in p.read_text() for p in models.rglob("*") if p.is_file())


def test_publish_removes_temp_copies_of_killed_publishes_only(tmp_path):
    """A publish killed mid-copy leaves `.VERSION.XXXX.tmp`; the next one removes it once stale,
    but never a fresh one (a concurrent publish may still be writing it)."""
    _fake_export(tmp_path / "out")
    parent = tmp_path / "models" / "m"
    stale, fresh = parent / ".v-1.dead0000.tmp", parent / ".v-1.live0000.tmp"
    for tmp in (stale, fresh):
        tmp.mkdir(parents=True)
        (tmp / "inference.pdiparams").write_bytes(b"half")
    old = time.time() - publish.STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    publish.run(str(tmp_path / "out"), str(tmp_path / "models"))
    assert not stale.exists() and fresh.exists()
    assert (parent / "v-1" / "inference.pdiparams").read_bytes() == b"weights"


def test_the_probe_draw_gives_every_class_images_even_a_rare_one():
    """1000 images, every one with a common class, 13 with a rare one as well: the 32 drawn
    hold all 13 of the rare class (the answers check tests each class on its own), the
    draw is random (another seed, another set) and reproducible (the same seed, the same)."""
    import numpy as np

    images = [{"common"} | ({"rare"} if i % 83 == 0 else set()) for i in range(1000)]
    rare = {i for i, c in enumerate(images) if "rare" in c}
    first = stratified_sample(images, 32, np.random.default_rng(1))
    assert len(first) == len(set(first)) == 32
    assert rare <= set(first)
    assert first == stratified_sample(images, 32, np.random.default_rng(1))
    assert first != stratified_sample(images, 32, np.random.default_rng(2))
    # a size cap: images the caller's `fits` refuses are passed over
    small = stratified_sample(images, 32, np.random.default_rng(1), fits=lambda i: i % 2 == 1)
    assert small and all(i % 2 == 1 for i in small)
