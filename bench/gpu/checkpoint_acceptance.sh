#!/usr/bin/env bash
# GPU measurement of sharded checkpoints, in one device call: build dtrain
# (without the fused kernels, which checkpoints do not need) unless
# build-gpu/ has it, train $MODEL one step on $GPUS GPUs under --shard
# $STAGE and write its checkpoint, resume it on the same GPUs into another
# directory (every file's CRC checked, every rank reading its ranges, then
# written again), and consolidate it into one file on the CPU. The
# "checkpoint step N: X GiB in Y s" and "loaded checkpoint ..." lines of
# rank 0 are the measurements; the page cache is dropped before the load
# where the machine allows it (else the load reads from memory: said so).
#   bench/gpu/checkpoint_acceptance.sh
# Knobs: MODEL (gpt2-1.5b), STAGE (gradients), GPUS, SEQ (1024), BATCH (4),
# CKPT_DIR (/tmp/dtrain-ckpt-bench), DTRAIN_ARGS.
# Results: $OUT/checkpoint.tgz (the logs, checkpoint_times.md).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
phase=checkpoint
suite=checkpoint-acceptance
source bench/gpu/lib.sh
start=$(date +%s)

if [ ! -x "$dtrain" ]; then
  log "build (libtorch from $torch_prefix)"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
    -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_CUDA_KERNELS=OFF -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
    -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
    && ninja -C build-gpu dtrain >> "$OUT/build.log" 2>&1 \
    || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - start )) s"
fi

gpus=${GPUS:-$ngpu}
model=${MODEL:-gpt2-1.5b}
stage=${STAGE:-gradients}
ckpt=${CKPT_DIR:-/tmp/dtrain-ckpt-bench}
rm -rf "$ckpt"; mkdir -p "$ckpt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
df -h "$ckpt" | tee "$OUT/disk.txt"
train() {  # $1: log name, rest: extra arguments
  local name=$1; shift
  "$dtrain" launch --nproc-per-node "$gpus" "$dtrain" train --model "$model" --dataset synthetic --seq-len "${SEQ:-1024}" \
    --batch-size "${BATCH:-4}" --precision bf16 --optimizer adamw --shard "$stage" --progress none --max-steps 1 \
    --eval-every 0 ${DTRAIN_ARGS:-} "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $?"
  grep -E "checkpoint step|loaded checkpoint|error" "$OUT/$name.log" | sed 's/^\[vm:[0-9]*\]: //' | head -5
}

log "write: $model, --shard $stage, $gpus GPU(s)"
train write --checkpoint-every 1 --checkpoint-dir "$ckpt/a"
du -sh "$ckpt/a"/* | tee "$OUT/sizes.txt"
sync
if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "page cache dropped"; else echo "page cache NOT dropped: the load reads from memory"; fi
log "load and write again"
train load --resume "$ckpt/a/ckpt-000000001/metadata.dtck" --checkpoint-dir "$ckpt/b"
rm -rf "$ckpt/b"
log "consolidate on the CPU"
"$dtrain" checkpoint consolidate "$ckpt/a/ckpt-000000001" --out "$ckpt/whole.dtck" > "$OUT/consolidate.log" 2>&1
echo "consolidate: exit $?"; tail -2 "$OUT/consolidate.log"
ls -la "$ckpt/whole.dtck" 2>/dev/null
rm -rf "$ckpt"
echo "total $(( $(date +%s) - start )) s"
