#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --peers
ctest --test-dir build --output-on-failure -j2 --timeout 600
