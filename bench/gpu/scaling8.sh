#!/usr/bin/env bash
# The 8-GPU scaling run (nvidia-h200-x8), in phases that each fit one device
# call of 10 minutes:
#   bench/gpu/scaling8.sh allreduce     build (libtorch + NCCL), then `dtrain bench allreduce` on every GPU,
#                                       8 B - 1 GiB, beside the PyTorch all-reduce peer, 2 alternating rounds
#   bench/gpu/scaling8.sh train a       `dtrain bench train` beside the PyTorch DDP peer on 1, 2, 4 and 8 GPUs
#   bench/gpu/scaling8.sh train b,c     ... on the speed benchmark's other configurations
# GPU counts: 1, 2, 4 and all (GPUS overrides, e.g. GPUS=1,2); ROUNDS (default 1)
# alternating rounds per train configuration; DTRAIN_ARGS extra flags for
# dtrain bench train (e.g. "--bucket-mb 5" for b). Needs .deps/ as the other
# GPU scripts. Logs go to $OUT/<phase>.tgz. Both phases were checked on
# 2x H200 (`allreduce`, then `GPUS=1,2 STEPS=20 ... train a`).
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?allreduce or train CONFIGS}
suite=scaling8
source bench/gpu/lib.sh

build() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
    -DDTRAIN_WITH_NCCL=ON -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
    -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
    && ninja -C build-gpu dtrain >> "$OUT/build.log" 2>&1 \
    || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
}

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee "$OUT/versions.txt"
[ -x "$dtrain" ] || { log "build (libtorch from $torch_prefix)"; build; }

if [ "$phase" = allreduce ]; then
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  log "all-reduce, $ngpu GPUs, 8 B - 1 GiB: dtrain, torch, dtrain, torch"
  for round in 1 2; do
    scripts/spawn-local.sh "$ngpu" -- $dtrain bench allreduce -b 8 -e 1G -f 2 -n 20 -w 5 -c 0 --json \
      > "$OUT/dtrain_allreduce_$round.json" 2> "$OUT/dtrain_allreduce_$round.err"
    scripts/spawn-local.sh "$ngpu" -- python3 bench/peers/torch_allreduce.py -b 8 -e 1G -f 2 -n 20 -w 5 --json \
      > "$OUT/torch_allreduce_$round.json" 2> "$OUT/torch_allreduce_$round.err"
    log "round $round"
    python3 bench/allreduce_compare.py "$OUT/dtrain_allreduce_$round.json" "$OUT/torch_allreduce_$round.json" \
      | tee "$OUT/allreduce_compare_$round.md"
  done
  exit 0
fi

if [ "$phase" = train ]; then
  configs=${2:?configs, e.g. a or b,c}
  gpus=${GPUS:-1,2,4,$ngpu}
  log "dtrain bench train vs PyTorch DDP, configurations $configs, GPUs $gpus"
  python3 bench/train_bench_compare.py --dtrain "$dtrain" --gpus "$gpus" --configs "$configs" --rounds "${ROUNDS:-1}" \
    --peer-args "--cudnn-benchmark" ${DTRAIN_ARGS:+--dtrain-args "$DTRAIN_ARGS"} ${STEPS:+--steps "$STEPS"} \
    --out "$OUT/train_${configs//,/}.json" 2> "$OUT/train.log" | tee "$OUT/train_${configs//,/}.md"
  tail -4 "$OUT/train.log"
  exit 0
fi
echo "unknown phase $phase"; exit 2
