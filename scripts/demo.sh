#!/usr/bin/env bash
# Set up this machine, then run the local demo: train the example detector
# with 2 data-parallel processes, evaluate mAP, gate it, and propose it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec mlops demo "$@"
