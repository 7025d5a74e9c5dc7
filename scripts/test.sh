#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest), then the store's fuzz targets
# for 20 s each (scripts/fuzz.sh). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --peers --fuzzers
status=0
ctest --test-dir build --output-on-failure -j2 --timeout 600 || status=$?
scripts/fuzz.sh 20 || status=$?
exit "$status"
