#!/usr/bin/env bash
# Sets up, builds and runs every test (ctest), then the store's fuzz targets
# for 20 s each (scripts/fuzz.sh). The README's test command. Ends with the
# 15 slowest tests of the run.
#
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh -L quick   the inner loop: every unit test and one test per
#                              multi-process area (docs/testing.md), no fuzzing
# Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --peers --fuzzers
status=0
log=build/ctest-output.log
# -j3 on two cores: many tests wait (on timeouts, heartbeats, a killed
# peer's detection); the ones that keep both CPUs busy say so (PROCESSORS 2
# and the both_cpus lock, tests/CMakeLists.txt), and the quick picks
# (label pick) are copies of tests the full run has anyway.
ctest_args=("$@")
if (($# == 0)); then ctest_args=(-LE pick); fi
ctest --test-dir build --output-on-failure -j3 --timeout 600 "${ctest_args[@]}" 2>&1 | tee "$log" || status=$?
echo "== The 15 slowest tests of this run (seconds)"
# sed -n 1,15p reads all of sort's output: head would close the pipe early,
# and sort's SIGPIPE (exit 141) would end this script under pipefail.
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" | sort -rn | sed -n 1,15p
if (($# == 0)); then scripts/fuzz.sh 20 || status=$?; fi
exit "$status"
