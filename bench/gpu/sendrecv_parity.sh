#!/usr/bin/env bash
# `dtrain bench sendrecv` on the GPUs beside nccl-tests' sendrecv_perf when it
# is installed ($NCCL_TESTS_DIR or PATH), else beside PyTorch's
# batch_isend_irecv (bench/peers/torch_allreduce.py sendrecv), in one device
# call: 8 B .. 1 GiB by 2, 20 iterations after 5 warm-up, one process per GPU,
# dtrain's table checked (-c 1). Needs .deps/ (see docs/benchmarks.md).
# Results: $OUT/sendrecv.tgz (the tables and a side-by-side summary).
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=sendrecv
suite=sendrecv
source bench/gpu/lib.sh
log "build"
cmake -S . -B build-gpu-comm -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu-comm dtrain >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
n=${NPROC:-$ngpu}
args="-b ${MINBYTES:-8} -e ${MAXBYTES:-1G} -f 2 -n ${ITERS:-20} -w ${WARMUP:-5}"
log "dtrain bench sendrecv, $n processes"
timeout 240 scripts/spawn-local.sh "$n" -- build-gpu-comm/src/cli/dtrain bench sendrecv --timeout 120 -c 1 $args \
  > "$OUT/dtrain.txt" 2> "$OUT/dtrain.err"; echo "exit $?"
peer=$(command -v sendrecv_perf || ls "${NCCL_TESTS_DIR:-/nonexistent}/sendrecv_perf" 2>/dev/null)
if [ -n "$peer" ]; then
  log "nccl-tests: $peer"
  timeout 240 scripts/spawn-local.sh "$n" -- "$peer" $args > "$OUT/peer.txt" 2> "$OUT/peer.err"; echo "exit $?"
else
  log "PyTorch batch_isend_irecv (nccl-tests is not installed)"
  timeout 240 scripts/spawn-local.sh "$n" -- python3 bench/peers/torch_allreduce.py sendrecv $args \
    > "$OUT/peer.txt" 2> "$OUT/peer.err"; echo "exit $?"
fi
python3 - "$OUT/dtrain.txt" "$OUT/peer.txt" <<'PY' | tee "$OUT/summary.md"
import sys
def rows(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 9 and f[0].isdigit():
            out[int(f[0])] = (float(f[5]), float(f[7]))  # out-of-place time us, busbw
    return out
d, p = rows(sys.argv[1]), rows(sys.argv[2])
print("| size | dtrain time us | peer time us | dtrain busbw GB/s | peer busbw GB/s | busbw ratio | time ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted(set(d) & set(p)):
    (dt, db), (pt, pb) = d[size], p[size]
    print(f"| {size} | {dt:.2f} | {pt:.2f} | {db:.2f} | {pb:.2f} | {db / pb if pb else 0:.3f} | {dt / pt if pt else 0:.3f} |")
PY
tail -3 "$OUT/dtrain.txt"
