"""`mlops` starts cheaply: the parser and a light command load no heavy library.

The suite starts ~160 `mlops` processes and a person types `mlops ... --help`; before
the command modules imported their handlers' libraries lazily, `mlops pr --help` loaded
the canary controller, its statistics (numpy), requests and pydantic: ~0.85 CPU-s for a
help text. Each case runs the real console entry (`python -m mlops`) in a fresh
interpreter and lists the modules it loaded.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

#: Libraries no `--help` nor light command needs: paddle, HTTP clients, the controller
#: and its metrics, the canary's state and statistics, the data pins' S3 client.
#: numpy, pydantic and serving.options still come through `mlops.commands.run` (its top-level
#: `workflows.config` import); add them here once that import is lazy too.
HEAVY = ("paddle", "requests", "urllib3", "prometheus_client", "boto3", "starlette", "hera",
         "promotion.controller", "promotion.decision.state", "promotion.decision.stats",
         "datapins.cache", "numpy", "pydantic", "serving.options")

_PROBE = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["mlops", *sys.argv[2:]]
try:
    runpy.run_module("mlops", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _loaded(tmp_path: pathlib.Path, *argv: str) -> list[str]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", _PROBE, str(out), *argv], check=True, env=env,
                   cwd=tmp_path, stdout=subprocess.DEVNULL, timeout=60)
    doc = json.loads(out.read_text())
    assert doc["code"] in (0, None), f"mlops {' '.join(argv)} exited {doc['code']}"
    return [m for m in doc["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("argv", [["--help"], ["pr", "--help"], ["controller", "run", "--help"],
                                  ["serve", "--help"], ["promote", "propose", "--help"]])
def test_help_loads_no_heavy_library(tmp_path: pathlib.Path, argv: list[str]) -> None:
    assert _loaded(tmp_path, *argv) == []


def test_a_light_command_loads_no_heavy_library(tmp_path: pathlib.Path) -> None:
    """`mlops gitops init` then `mlops pr list` on the local forge: git only."""
    gitops = tmp_path / "gitops"
    assert _loaded(tmp_path, "gitops", "init", str(gitops)) == []
    assert (gitops / "HEAD").is_file() or (gitops / ".git").exists()
    assert _loaded(tmp_path, "pr", "list", "--repo", str(gitops)) == []
