#!/usr/bin/env bash
# GPU acceptance of the collective layer, in one call on the GPU machine:
# build with NCCL, run the NCCL tests, check every op x dtype of every
# collective on 2 and all GPUs, and time dtrain's all-reduce beside PyTorch's
# (same NCCL, same run). Needs the header-only dependencies unpacked under
# .deps/ (see docs/benchmarks.md). Writes logs and JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Logs go to a work folder, packed into $OUT/acceptance.tgz at the end (the
# device tool returns at most 8 files).
FINAL_OUT="${OUT:-/tmp/dtrain-acceptance}"
OUT=/tmp/dtrain-acceptance-work
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/acceptance.tgz" -C "$OUT" .' EXIT
ngpu=$(nvidia-smi -L | wc -l)
log() { echo "=== $*"; }

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
nccl_home=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee "$OUT/versions.txt"
ls "$nccl_home/lib" | tee -a "$OUT/versions.txt"

log "build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu >> "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
export LD_LIBRARY_PATH="$nccl_home/lib:${LD_LIBRARY_PATH:-}"
dtrain=build-gpu/src/cli/dtrain

log "nccl tests"
ctest --test-dir build-gpu -R NcclCommunicatorTest --output-on-failure --timeout 300 2>&1 | tee "$OUT/nccl_tests.log" | tail -15

log "correctness: every collective x dtype x op, 2 and $ngpu GPUs"
for n in 2 "$ngpu"; do
  for coll in allreduce reduce_scatter allgather broadcast; do
    scripts/spawn-local.sh "$n" -- $dtrain bench $coll -b 8 -e 4M -f 64 -n 1 -w 1 -c 1 -d all -o all \
      > "$OUT/check_${coll}_${n}.log" 2>&1
    echo "$n GPUs $coll: exit $? $(grep -c '^ ' "$OUT/check_${coll}_${n}.log") rows, $(grep 'Out of bounds' "$OUT/check_${coll}_${n}.log")"
  done
done

log "all-reduce bandwidth, $ngpu GPUs, 8 B - 1 GiB: dtrain, torch, dtrain, torch"
for round in 1 2 3; do
  scripts/spawn-local.sh "$ngpu" -- $dtrain bench allreduce -b 8 -e 1G -f 2 -n 20 -w 5 -c 0 \
    > "$OUT/dtrain_allreduce_$round.txt" 2>&1
  scripts/spawn-local.sh "$ngpu" -- $dtrain bench allreduce -b 8 -e 1G -f 2 -n 20 -w 5 -c 0 --json \
    > "$OUT/dtrain_allreduce_$round.json" 2>/dev/null
  scripts/spawn-local.sh "$ngpu" -- python3 bench/peers/torch_allreduce.py -b 8 -e 1G -f 2 -n 20 -w 5 --json \
    > "$OUT/torch_allreduce_$round.json" 2>/dev/null
done
cat "$OUT/dtrain_allreduce_1.txt"
for round in 1 2 3; do
  log "compare round $round"
  python3 bench/allreduce_compare.py "$OUT/dtrain_allreduce_$round.json" "$OUT/torch_allreduce_$round.json" \
    | tee "$OUT/compare_$round.md"
done
