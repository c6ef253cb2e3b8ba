"""The getting-started page's first run works on a fresh clone, as written (issue 44).

`mlops run examples/shapes-detector`, as the README showed it, stopped at prepare-data
with "data/shapes.lock: no such lock file": the example ships no pin. The page now makes
week 1's pin first. This test runs the page's commands before `mlops run` exactly as
written, in a directory laid out as a fresh clone (the example copied without any data),
then the pipeline's own prepare-data step on that repo, the step that failed: it must
find the pin, fetch and validate the pinned files and lay them out for training. The
rest of the run (training, evaluation, the gate) on the same kind of pin is what
`tests/workflows/test_workflows_example.py` and the demo's end-to-end test run for real;
this one does not train.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

from mlops.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"


def _first_run_block() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S)
    block = next(b for b in blocks if "mlops run examples/shapes-detector" in b)
    return [line for line in block.splitlines() if line.strip()]


def test_the_page_pins_week_1_before_the_run():
    lines = _first_run_block()
    assert lines[-1] == "mlops run examples/shapes-detector"
    assert any(line.startswith("mlops data snapshot") and
               "--out examples/shapes-detector/data/shapes.lock" in line for line in lines)


def test_the_first_runs_commands_as_written_make_the_pin_prepare_data_reads(tmp_path,
                                                                          monkeypatch):
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "examples" / "shapes-detector", clone / "examples" / "shapes-detector",
                    ignore=shutil.ignore_patterns("data", "mlops-out", "__pycache__"))
    lines = _first_run_block()[:-1]  # all but `mlops run` (it trains for minutes)
    script = "\n".join([
        "set -euo pipefail",
        f'python() {{ "{sys.executable}" "$@"; }}',
        f'mlops() {{ "{sys.executable}" -m mlops "$@"; }}',
        *lines])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLOPS_DATA_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    repo = clone / "examples" / "shapes-detector"
    assert (repo / "data" / "shapes.lock").is_file()

    monkeypatch.setenv("MLOPS_DATA_CACHE", str(tmp_path / "cache"))
    assert main(["step", "prepare-data", "--repo", str(repo), "--out", str(tmp_path / "out")]) == 0
    data = tmp_path / "out" / "data"
    for role in ("train", "val", "holdout"):
        assert (data / "annotations" / f"{role}.json").is_file()
    assert (data / "datalock.json").is_file() and any((data / "images").rglob("*.png"))
