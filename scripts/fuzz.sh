#!/usr/bin/env bash
# Builds the store's fuzz targets with clang into ./build-fuzz and runs each
# for SECONDS (default 20), two at a time, from the generated seeds and what
# earlier runs found; fails on any crash, leak, sanitizer report or broken
# invariant, and says where the input that did it was saved.
# Needs clang 16 and libclang-rt-16-dev (scripts/setup.sh --fuzzers).
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
dir=build-fuzz/tests/store/fuzz

launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Only the store's sources are built here: everything optional is off.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 "${launcher[@]}" \
  -DDTRAIN_BUILD_FUZZERS=ON -DDTRAIN_FUZZ_SECONDS="$seconds" -DDTRAIN_BUILD_TESTS=OFF \
  -DDTRAIN_WITH_TORCH=OFF -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_NCCL=OFF \
  -DDTRAIN_WITH_HTTPLIB=OFF -DDTRAIN_WITH_CUDA_KERNELS=OFF >/dev/null
ninja -C build-fuzz store_frame_fuzzer store_handler_fuzzer
find "$dir/crashes" -type f -delete  # the list below names this run's only
if ! ctest --test-dir build-fuzz -j2 --output-on-failure; then
  echo "fuzz.sh: a fuzz target failed (its report is above). The inputs that failed:" >&2
  find "$dir/crashes" -type f -printf '  %p\n' >&2
  echo "fuzz.sh: replay one with $dir/store_<frame|handler>_fuzzer FILE; to keep it as a test, add it to" \
       "tests/store/fuzz/regressions/<frame_decoder|request_handler>/" >&2
  exit 1
fi
