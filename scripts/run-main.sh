#!/usr/bin/env bash
# Sets up, builds and runs the main job: `dtrain train` with its defaults —
# the CNN on Fashion-MNIST (Debian's dataset-fashion-mnist), 3 epochs, two
# data-parallel ranks over Gloo on this machine's CPUs, started by
# `dtrain launch` — ending with the test accuracy. Extra arguments go to
# `dtrain train` (e.g. --epochs 1, --model mlp, --checkpoint-dir ckpt).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --main
exec build/src/cli/dtrain launch --nproc-per-node 2 --standalone build/src/cli/dtrain train "$@"
