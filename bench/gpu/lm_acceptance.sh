#!/usr/bin/env bash
# GPU acceptance of language-model training speed, in one device call of
# 10 minutes: build dtrain against the installed PyTorch's libtorch + NCCL
# (skipped when build-gpu/ already has it), then bench/lm_compare.py runs
# `dtrain bench train --model ...` beside the PyTorch peer
# (bench/peers/lm_peer.py: torch.compile, SDPA, fused AdamW, bf16 autocast,
# DDP) on
#   gpt2-124m, seq 1024, batch 16/GPU, on 1 and 2 GPUs
#   llama-1b,  seq 2048, batch $LLAMA_BATCH/GPU (default 4), on 1 GPU
# Round 1 covers all three before round 2 starts; the compare stops starting
# pairs that no longer fit in $BUDGET_S seconds (default 540) counted from this
# script's start. The peer's first run of each shape spends 1-2 minutes in
# torch.compile; later ones hit Inductor's cache in /tmp.
#   bench/gpu/lm_acceptance.sh            build if needed, then compare
#   bench/gpu/lm_acceptance.sh build      only build (when the build alone needs a call)
# models_test's and optim_test's fused tests run first (SKIP_FUSED_TEST=1
# leaves them out); a --breakdown time split of gpt2-124m runs next, and with
# PROFILE=1 Nsight Compute times every kernel of one eager gpt2-124m step
# ($OUT/kernels.csv; bench/gpu/kernel_table.py sums it by kernel).
# Knobs: BUILD_TESTS (the test programs built beside dtrain; SKIP_FUSED_TEST=1 runs none of
# them), ROUNDS (2), STEPS (40), WARMUP (10), LLAMA_BATCH (4), SKIP_LLAMA, PEER_COMPILE
# (default | max-autotune-no-cudagraphs | none), PEER_PARALLEL (ddp | fsdp2),
# DTRAIN_ARGS, PEER_ARGS, BUDGET_S. Needs .deps/ as the other GPU scripts.
# Logs and results go to $OUT/<phase>.tgz (lm_compare.md, lm_compare.json).
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=${1:-compare}
suite=lm-acceptance
source bench/gpu/lib.sh

# dtrain with the fused CUDA kernels, and models_test's Fused* tests (every fused
# operation and whole tiny models against the libtorch path) beside it.
build() {
  local tests="${BUILD_TESTS-models_test optim_test kernels_test}"
  [ -n "${SKIP_FUSED_TEST:-}" ] && tests="${BUILD_TESTS:-}"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
    -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_CUDA_KERNELS=ON -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
    -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
    && ninja -C build-gpu dtrain $tests >> "$OUT/build.log" 2>&1 \
    || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
}

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee "$OUT/versions.txt"
if [ "$phase" = build ] || [ ! -x "$dtrain" ]; then
  log "build (libtorch from $torch_prefix)"
  t0=$(date +%s); build; echo "built in $(( $(date +%s) - t0 )) s"
fi
[ "$phase" = build ] && exit 0
[ "$phase" = compare ] || { echo "unknown phase $phase"; exit 2; }

if [ -x build-gpu/tests/models/models_test ] && [ -z "${SKIP_FUSED_TEST:-}" ]; then
  log "fused_ops_test"
  timeout 120 build-gpu/tests/models/models_test --gtest_brief=1 --gtest_filter='Fused*:Fp8*' > "$OUT/fused_ops_test.log" 2>&1
  echo "fused_ops_test exit $? after $(( $(date +%s) - started )) s"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|worst relative" "$OUT/fused_ops_test.log" | head -40
  timeout 60 build-gpu/tests/optim/optim_test --gtest_brief=1 --gtest_filter='FusedAdamW*' > "$OUT/fused_optim_test.log" 2>&1
  echo "train_fused_optim_test exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" "$OUT/fused_optim_test.log" | head -20
  timeout 90 build-gpu/tests/models/kernels/kernels_test --gtest_brief=1 > "$OUT/kernels_test.log" 2>&1
  echo "kernels_test exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|FAILED" "$OUT/kernels_test.log" | head -20
fi
gpus2=2; [ "$ngpu" -lt 2 ] && gpus2=""
left=$(( ${BUDGET_S:-540} - ($(date +%s) - started) ))
[ "$left" -lt 90 ] && { echo "only $left s left after the build: run the script again (build-gpu/ is kept)"; exit 0; }
log "dtrain bench train vs the PyTorch LM peer: gpt2-124m (1${gpus2:+,$gpus2} GPUs), llama-1b (1 GPU); ${left} s left"
configs=(--config gpt2-124m 1024 16 "1${gpus2:+,$gpus2}")
[ -z "${SKIP_LLAMA:-}" ] && configs+=(--config llama-1b 2048 "${LLAMA_BATCH:-4}" 1)
python3 bench/lm_compare.py --dtrain "$dtrain" "${configs[@]}" \
  --steps "${STEPS:-40}" --warmup "${WARMUP:-10}" --rounds "${ROUNDS:-2}" --deadline-s "$left" \
  --compile "${PEER_COMPILE:-default}" --parallel "${PEER_PARALLEL:-ddp}" \
  ${DTRAIN_ARGS:+--dtrain-args "$DTRAIN_ARGS"} ${PEER_ARGS:+--peer-args "$PEER_ARGS"} \
  --out "$OUT/lm_compare.json" 2> "$OUT/lm_compare.log" | tee "$OUT/lm_compare.md"
status=${PIPESTATUS[0]}
grep -E "^# round|FAILED|^failed|timed out" "$OUT/lm_compare.log" | tail -20
echo "lm_compare exit $status after $(( $(date +%s) - started )) s in all"

# gpt2-124m on libtorch's own kernels (DTRAIN_FUSED_KERNELS=0): what the
# fused kernels bring, in the same run.
left=$(( ${BUDGET_S:-540} + 40 - ($(date +%s) - started) ))
if [ "$left" -gt 40 ] && [ -z "${SKIP_UNFUSED:-}" ]; then
  log "gpt2-124m without the fused kernels (${left} s left)"
  DTRAIN_FUSED_KERNELS=0 timeout "$left" "$dtrain" bench train --model gpt2-124m --seq-len 1024 --batch-size 16 \
    --precision bf16 --steps 30 --warmup 10 ${DTRAIN_ARGS:-} 2>&1 | tee "$OUT/unfused.txt" | grep -v "^\[" | tail -6
fi

# The time split behind the gpt2-124m number (eager steps, CUDA events around
# forward, backward, all-reduce and optimizer), when time is left.
left=$(( ${BUDGET_S:-540} + 40 - ($(date +%s) - started) ))
if [ "$left" -gt 30 ] && [ -z "${SKIP_BREAKDOWN:-}" ]; then
  log "time split: gpt2-124m, eager, --breakdown (${left} s left)"
  timeout "$left" "$dtrain" bench train --model gpt2-124m --seq-len 1024 --batch-size 16 --precision bf16 \
    --no-cuda-graphs --breakdown --steps 10 --warmup 3 ${DTRAIN_ARGS:-} 2>&1 | tee "$OUT/breakdown.txt" | tail -25
fi

# Every kernel of one eager gpt2-124m step under Nsight Compute (one metric,
# the kernel's duration; clocks left alone): what the forward and backward
# spend their time on, kernel by kernel.
left=$(( ${BUDGET_S:-540} + 50 - ($(date +%s) - started) ))
if [ -n "${PROFILE:-}" ] && [ "$left" -gt 40 ] && command -v ncu > /dev/null; then
  log "ncu: every kernel of gpt2-124m steps, eager (${left} s left)"
  # In-process (RANK/WORLD_SIZE set, no --gpus): ncu then sees the worker's kernels.
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
    timeout "$left" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
    --log-file "$OUT/ncu.log" "$dtrain" bench train --model gpt2-124m --seq-len 1024 --batch-size 16 \
    --precision bf16 --no-cuda-graphs --steps 1 --warmup 1 ${DTRAIN_ARGS:-} > "$OUT/kernels.csv" 2> "$OUT/ncu.err"
  echo "ncu exit $?, $(wc -l < "$OUT/kernels.csv") lines"
  python3 bench/gpu/kernel_table.py "$OUT/kernels.csv" "$OUT/ncu.log" 2>&1 | head -40
fi
