#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest), then the store's fuzz targets
# for 20 s each (scripts/fuzz.sh). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# Without debug information the build takes a third less time; a developer's
# DTRAIN_CMAKE_ARGS wins (e.g. -DDTRAIN_DEBUG_INFO=ON to debug a failing test).
export DTRAIN_CMAKE_ARGS="${DTRAIN_CMAKE_ARGS:--DDTRAIN_DEBUG_INFO=OFF}"
scripts/setup.sh --peers --fuzzers
status=0
ctest --test-dir build --output-on-failure -j2 --timeout 600 || status=$?
scripts/fuzz.sh 20 || status=$?
exit "$status"
