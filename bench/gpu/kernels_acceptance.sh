#!/usr/bin/env bash
# The fused CUDA kernels (src/models/kernels/) on the GPU machine, in one
# device call: build kernels_test and kernels_bench against the installed
# PyTorch's libtorch (as the other GPU scripts), run the tests (every kernel
# against its CPU reference, determinism, graph capture), the bandwidth table
# at GPT-2 124M / Llama 3.2 1B shapes, and the same operations through
# PyTorch eager and torch.compile (bench/peers/torch_fused_ops.py). Then the
# torch side of the kernels: models_test's Fused* tests (every fused autograd operation
# and whole tiny gpt2/llama models against DTRAIN_FUSED_KERNELS=0, and a CUDA
# graph of a fused forward + backward), optim_test's FusedAdamW tests (AdamW and
# gradient clipping fused against the torch operations, and captured), and
# adamw_bench (AdamW fused against torch operations, 124M and 1.2B elements, GB/s).
#   bench/gpu/kernels_acceptance.sh [all|kernels|fused]
#                                            (needs .deps/ as the other GPU scripts,
#                                             with libgtest-dev: docs/benchmarks.md;
#                                             DTRAIN_DEPS=DIR names another such folder;
#                                             kernels: the kernels and the PyTorch peers only,
#                                             fused: the torch side only; default all)
# Logs go to $OUT/kernels.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=kernels
suite=kernels
source bench/gpu/lib.sh
deps=${DTRAIN_DEPS:-$PWD/.deps}
part=${1:-all}
case $part in all|kernels|fused) ;; *) echo "usage: $0 [all|kernels|fused]" >&2; exit 2 ;; esac

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee "$OUT/versions.txt"

log "build (libtorch from $torch_prefix)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_CUDA_KERNELS=ON -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_DEPS_PREFIX="$deps" \
  -DCMAKE_PREFIX_PATH="$deps/usr;$torch_prefix" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu kernels_test kernels_bench >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
bin=build-gpu/tests/models/kernels

if [[ $part != fused ]]; then
log "kernels_test"
$bin/kernels_test --gtest_brief=1 > "$OUT/kernels_test.log" 2>&1
echo "kernels_test exit $?"
grep -E "^\[  (PASSED|FAILED) |Failure|out of tolerance" "$OUT/kernels_test.log" | head -40

log "kernels_bench (dtrain's kernels, GB/s)"
$bin/kernels_bench | tee "$OUT/kernels_bench.md"

log "the same operations in PyTorch (eager, torch.compile)"
PYTHONUNBUFFERED=1 python3 bench/peers/torch_fused_ops.py 2> "$OUT/torch_fused_ops.err" | tee "$OUT/torch_fused_ops.md"
fi
[[ $part == kernels ]] && exit 0

# The torch side builds apart, so that a failure there leaves the results above.
log "build the fused autograd operations and AdamW (models_test, optim_test, adamw_bench)"
if ninja -C build-gpu models_test optim_test adamw_bench > "$OUT/build_fused.log" 2>&1; then
  log "fused_ops_test"
  build-gpu/tests/models/models_test --gtest_brief=1 --gtest_filter='Fused*' > "$OUT/fused_ops_test.log" 2>&1
  echo "fused_ops_test exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|out of tolerance|worst relative|Skipped|declined" "$OUT/fused_ops_test.log" | head -60

  log "train_fused_optim_test"
  build-gpu/tests/optim/optim_test --gtest_brief=1 --gtest_filter='FusedAdamW*' > "$OUT/train_fused_optim_test.log" 2>&1
  echo "train_fused_optim_test exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|Skipped" "$OUT/train_fused_optim_test.log" | head -30

  log "adamw_bench (fused AdamW against torch operations)"
  build-gpu/tests/optim/adamw_bench 2>&1 | tee "$OUT/adamw_bench.md"
else
  grep -B2 -A12 "error" "$OUT/build_fused.log" | head -80
  tail -30 "$OUT/build_fused.log"
  echo "build of the fused operations failed"
  exit 1
fi
