#!/usr/bin/env bash
# Set up this machine, then the local demo: a git push of the example trains it
# (smoke + 2-process Paddle training), gates it on mAP and proposes it as a PR;
# the demo approves, then pushes a retrain that goes through a canary under
# live load until it is promoted. `bash scripts/demo.sh --scenario all` also
# shows a slow and a failing candidate rolled back and a weak one refused.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec mlops demo "$@"
