#!/usr/bin/env bash
# Sets up, builds and runs the main job: a 2-process all-reduce benchmark over
# the Gloo (CPU) backend on this machine, nccl-tests style, with result checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/src/cli/dtrain launch --nproc-per-node 2 --local-ranks-filter 0 --no-python \
  build/src/cli/dtrain bench allreduce --backend gloo -b 8 -e 64M -f 4 -n 20 -w 5 -c 1 "$@"
