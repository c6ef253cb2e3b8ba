#!/usr/bin/env bash
# Set up this machine, then run the whole test suite (real git, Prometheus,
# HAProxy and PaddlePaddle; the example is trained once per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Lint and types first: seconds, and a finding fails the run before 15 minutes of tests.
# (Settings in pyproject.toml: [tool.ruff] and [tool.mypy].)
python3 -m ruff check .
python3 -m mypy
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Two workers (pytest-xdist), a whole module per worker at a time, modules handed out in
# collection order (tests/conftest.py puts the slow ones first): the demo's end-to-end run
# trains on one worker while the other runs the rest; the example is still trained once
# (tests/fixtures/training.py shares it between the workers).
exec python3 -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
