#!/usr/bin/env bash
# Set up this machine, then run the whole test suite (real git, Prometheus,
# HAProxy and PaddlePaddle; the example is trained once per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Lint first: a second, and a finding fails the run before the tests. Types beside the
# tests, their report waiting in a pipe: mypy is slow cold and fast with its
# incremental cache, kept between runs in this machine's cache dir (mypy checks each
# module's hash, so a fresh clone elsewhere reuses it; MYPY_CACHE_DIR is mypy's own
# variable). (Settings in pyproject.toml: [tool.ruff] and [tool.mypy].)
python3 -m ruff check .
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/paddle-mlops/mypy}"
coproc MYPY { python3 -m mypy 2>&1; echo "mypy exit $?"; }
exec {types_fd}<&"${MYPY[0]}"  # bash drops MYPY's fds once mypy ends: keep our own
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Bytecode is written (into __pycache__ dirs, which git and the image builds ignore): with
# PYTHONDONTWRITEBYTECODE set, as in CI and container environments, each xdist worker
# rewrote and compiled every test module again at collection (about twice the CPU of a
# worker's collection), before the demo's worker could start the demo.
unset PYTHONDONTWRITEBYTECODE
# Three workers (pytest-xdist; MLOPS_TEST_WORKERS to change), a whole module per worker at a
# time, modules handed out in collection order (tests/conftest.py puts the slow ones first):
# the demo's end-to-end run trains on one worker, first in line for the CPU (tests/conftest.py),
# while the other two share the rest; a third worker fills the cores while tests wait on
# servers (docs/development.md, "Tests", says why). The example is still trained once
# (tests/fixtures/training.py shares it between the workers).
status=0
python3 -m pytest -n "${MLOPS_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@" \
    || status=$?
types=$(cat <&"$types_fd")
echo "$types"
case "$types" in *"mypy exit 0") ;; *) [ "$status" != 0 ] || status=1 ;; esac
exit "$status"
