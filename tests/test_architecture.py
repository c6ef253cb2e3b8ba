"""The rooms' doors, written in .importlinter, are checked, not just described."""

import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is a test dependency (pip install -e .[test])"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" in proc.stdout and "0 broken" in proc.stdout
