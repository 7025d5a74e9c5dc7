#!/usr/bin/env bash
# The small-message all-reduce floor on the GPU machine, in one device call:
# build dtrain without libtorch, run the NCCL communicator tests (on the
# default blocking communicator), then $ROUNDS rounds (default 3) of
#   dtrain bench allreduce                         (blocking communicator)
#   DTRAIN_NCCL_BLOCKING=0 dtrain bench allreduce  (non-blocking, as before)
#   bench/peers/torch_allreduce.py                 (PyTorch, NCCL)
# on $GPUS GPUs (default 2), 8 B - 64 MiB, and the size-by-size comparison of
# each dtrain variant with PyTorch (mean ratio over 1-16 MiB).
#   bench/gpu/allreduce_floor.sh        (needs .deps/ as the other GPU scripts)
# Logs go to $OUT/allreduce.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=allreduce
suite=allreduce-floor
source bench/gpu/lib.sh
rounds=${ROUNDS:-3}
gpus=${GPUS:-2}
sizes=(-b 8 -e 64M -f 2 -n 50 -w 10)

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' \
  | tee "$OUT/versions.txt"

log "build (no libtorch)"
start=$SECONDS
cmake -S . -B build-gpu-comm -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu-comm dtrain nccl_communicator_test >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -20 "$OUT/build.log"; exit 1; }
echo "built in $((SECONDS - start)) s"
bin=build-gpu-comm/src/cli/dtrain

log "NCCL communicator tests (blocking communicator)"
start=$SECONDS
timeout 240 build-gpu-comm/tests/comm/nccl/nccl_communicator_test --gtest_brief=1 > "$OUT/nccl_tests.log" 2>&1
echo "nccl_communicator_test exit $? in $((SECONDS - start)) s"
grep -E "^\[  (PASSED|FAILED) |Failure|SKIPPED" "$OUT/nccl_tests.log" | head -30

log "all-reduce, $gpus GPUs, 8 B - 64 MiB: dtrain (blocking), dtrain (non-blocking), torch; $rounds rounds"
for round in $(seq 1 "$rounds"); do
  scripts/spawn-local.sh "$gpus" -- $bin bench allreduce "${sizes[@]}" -c 0 --json \
    > "$OUT/blocking_$round.json" 2> "$OUT/blocking_$round.err"
  echo "round $round dtrain blocking: exit $?"
  DTRAIN_NCCL_BLOCKING=0 scripts/spawn-local.sh "$gpus" -- $bin bench allreduce "${sizes[@]}" -c 0 --json \
    > "$OUT/nonblocking_$round.json" 2> "$OUT/nonblocking_$round.err"
  echo "round $round dtrain non-blocking: exit $?"
  scripts/spawn-local.sh "$gpus" -- python3 bench/peers/torch_allreduce.py "${sizes[@]}" --json \
    > "$OUT/torch_$round.json" 2> "$OUT/torch_$round.err"
  echo "round $round torch: exit $?"
done
log "one table as printed (blocking, round 1, with the check)"
scripts/spawn-local.sh "$gpus" -- $bin bench allreduce -b 8 -e 64M -f 4 -n 20 -w 5 -c 1 2>&1 | tee "$OUT/table.txt" | grep -v INFO
for round in $(seq 1 "$rounds"); do
  for variant in blocking nonblocking; do
    log "round $round: dtrain $variant vs torch"
    python3 bench/allreduce_compare.py "$OUT/${variant}_$round.json" "$OUT/torch_$round.json" \
      --min-bytes 1M --max-bytes 16M | tee "$OUT/compare_${variant}_$round.md"
  done
done
