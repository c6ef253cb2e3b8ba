#!/usr/bin/env bash
# Set up this machine, then run the whole test suite (real git, Prometheus,
# HAProxy and PaddlePaddle; the example is trained once per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec python3 -m pytest "$@"
