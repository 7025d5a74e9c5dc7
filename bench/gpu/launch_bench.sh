#!/usr/bin/env bash
# `dtrain launch` beside torchrun (PyTorch's own, which works on the GPU
# machine's Python): start-up and recovery for 2, 8 and 32 trivial workers.
# Only the CPUs are used. Writes the table and raw JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
OUT="${OUT:-/tmp/dtrain-launch-bench}"
mkdir -p "$OUT"
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' | tee "$OUT/launch_versions.txt"
nproc | tee -a "$OUT/launch_versions.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=OFF -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" > "$OUT/launch_build.log" 2>&1 \
  && ninja -C build-gpu dtrain >> "$OUT/launch_build.log" 2>&1 || { tail -40 "$OUT/launch_build.log"; exit 1; }
python3 bench/launch_compare.py --dtrain build-gpu/src/cli/dtrain --nprocs 2 8 32 --repeat 3 --json \
  > "$OUT/launch_compare.json" || exit 1
python3 - "$OUT/launch_compare.json" <<'PY' | tee "$OUT/launch_compare.md"
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
print("| workers | dtrain start-up (s) | torchrun start-up (s) | speed-up | dtrain recovery (s) | torchrun recovery (s) | speed-up |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for n in sorted({r["nprocs"] for r in rows}):
    def med(name, key):
        return statistics.median(r[key] for r in rows if r["launcher"] == name and r["nprocs"] == n)
    du, tu, dr, tr = med("dtrain", "startup_s"), med("torchrun", "startup_s"), med("dtrain", "recovery_s"), med("torchrun", "recovery_s")
    print(f"| {n} | {du:.3f} | {tu:.3f} | {tu/du:.1f}x | {dr:.3f} | {tr:.3f} | {tr/dr:.1f}x |")
PY
