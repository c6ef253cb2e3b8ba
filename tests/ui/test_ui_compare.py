"""Runs compared (issue 32 item 2): `mlops runs compare A B` and the UI's /api/compare read
the same records (`workflows.run_compare`): parameters, dataset, metrics, gate verdicts,
durations and the training-loss curve, rows that differ marked.

Runs are written in the local runner's formats (`tests/fixtures/ui.py: make_run`).
"""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from mlops.cli import main as cli
from mlops.ui.app import UiConfig, create_app
from tests.fixtures.ui import make_run
from workflows.run_compare import compare, loss_curve, read_run


@pytest.fixture
def two_runs(tmp_path):
    runs = tmp_path / "runs"
    a = make_run(runs, "aaaa", lr=0.004, map50=0.61, passed=True, losses=[3.0, 1.5, 0.9])
    b = make_run(runs, "bbbb", lr=0.002, map50=0.48, passed=False, losses=[3.1, 2.0, 1.4, 1.2],
                 seconds=140.0)
    return runs, a, b


def test_loss_curve_keeps_the_first_worker():
    text = ("[worker-1] step=10 epoch=0 loss=9.0\n[worker-0] step=10 epoch=0 loss=2.5\n"
            "noise step=x loss=1\n[worker-0] step=20 epoch=0 loss=nan\nstep=5 loss=bad\n")
    assert loss_curve(text) == [(10, 2.5)]
    assert loss_curve("step=10 epoch=0 loss=0.9000\nstep=30 epoch=2 loss=0.4120\n") == \
        [(10, 0.9), (30, 0.412)]


def test_compare_marks_what_differs(two_runs):
    _, a, b = two_runs
    doc = compare([read_run(a), read_run(b)])
    rows = {f"{r['section']}.{r['key']}": r for r in doc["rows"]}
    assert rows["parameters.hyperparameters.lr"]["values"] == [0.004, 0.002]
    assert rows["parameters.hyperparameters.lr"]["differs"]
    assert not rows["parameters.hyperparameters.epochs"]["differs"]
    assert not rows["dataset.digest"]["differs"]
    assert rows["metrics.map50"]["values"] == [0.61, 0.48]
    assert rows["gate.passed"]["values"] == [True, False] and rows["gate.passed"]["differs"]
    assert rows["durations.total"]["values"] == [100.0, 140.0]
    assert rows["training.final loss"]["values"] == [0.9, 1.2]
    assert doc["loss"][1] == [[10, 3.1], [20, 2.0], [30, 1.4], [40, 1.2]]


def test_mlops_runs_compare_prints_the_table(two_runs, capsys):
    runs, a, _ = two_runs
    assert cli(["runs", "compare", str(a), "bbbb", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["aaaa", "bbbb"]
    lr = next(line for line in out.splitlines() if "hyperparameters.lr" in line)
    assert lr.startswith("* ") and lr.split()[-2:] == ["0.004", "0.002"]
    epochs = next(line for line in out.splitlines() if "hyperparameters.epochs" in line)
    assert epochs.startswith("  ")
    assert cli(["runs", "compare", str(a), "bbbb", "--runs", str(runs), "--differences"]) == 0
    assert "hyperparameters.epochs" not in capsys.readouterr().out
    assert cli(["runs", "compare", str(a), str(a.parent), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][1]["name"] == "aaaa"


def test_bad_runs_are_named(two_runs, capsys):
    runs, a, _ = two_runs
    assert cli(["runs", "compare", str(a), "zzzz", "--runs", str(runs)]) == 7
    assert "run 'zzzz': no run records" in capsys.readouterr().err
    assert cli(["runs", "compare", str(a)]) == 2
    assert "two or more runs" in capsys.readouterr().err


def test_the_ui_compares_only_runs_it_lists(two_runs, tmp_path):
    runs, a, b = two_runs
    other = make_run(tmp_path / "elsewhere", "cccc", lr=1, map50=0.1, passed=False, losses=[1])
    # the Runs page needs no GitOps repo: one that does not exist costs nothing here
    app = create_app(UiConfig(gitops=str(tmp_path / "none.git"), runs=[runs]))
    with TestClient(app) as c:
        doc = c.get("/api/compare", params=[("run", str(a)), ("run", str(b))]).json()
        assert [r["name"] for r in doc["runs"]] == ["aaaa", "bbbb"]
        res = c.get("/api/compare", params=[("run", str(a)), ("run", str(other))])
        assert res.status_code == 400 and "not a run under" in res.json()["error"]
        res = c.get("/api/compare", params=[("run", str(a))])
        assert res.status_code == 400 and "two or more runs" in res.json()["error"]
