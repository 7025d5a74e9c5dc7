#!/usr/bin/env bash
# GPU acceptance of the observability issue, in one device call:
# - `dtrain exporter --once` against `nvidia-smi --query-gpu` read in the same run;
# - the exporter's CPU cost at a 1 s interval while scraped every second;
# - training throughput with --metrics-port and --timeline on against off.
# Needs .deps/ (header-only dependencies, GoogleTest, cpp-httplib and its
# build dependencies unpacked from Debian). Logs go to $OUT/observability.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=observability
suite=observability-acceptance
source bench/gpu/lib.sh
deps_lib=$PWD/.deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$deps_lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PWD/.deps LD_LIBRARY_PATH="$deps_lib:$LD_LIBRARY_PATH"

log "build (libtorch from $torch_prefix, cpp-httplib from .deps)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_HTTPLIB=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu dtrain >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -30 "$OUT/build.log"; exit 1; }
grep "dtrain:" "$OUT/build.log"

log "exporter vs nvidia-smi, same moment"
nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm,clocks.mem \
  --format=csv,noheader,nounits > "$OUT/smi_before.csv"
$dtrain exporter --once > "$OUT/exporter_once.txt" 2> "$OUT/exporter_once.err"; echo "exporter --once exit $?"
nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm,clocks.mem \
  --format=csv,noheader,nounits > "$OUT/smi_after.csv"
python3 - "$OUT/exporter_once.txt" "$OUT/smi_before.csv" "$OUT/smi_after.csv" <<'PY'
import re, sys
metrics = {}
for line in open(sys.argv[1]):
    m = re.match(r'(\w+)\{([^}]*)\} (\S+)', line)
    if not m: continue
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
    if "gpu" in labels: metrics[(m.group(1), labels["gpu"])] = (float(m.group(3)), labels)
fields = [("DCGM_FI_DEV_GPU_UTIL", 2, "abs", 10), ("DCGM_FI_DEV_FB_USED", 3, "abs", 64), ("DCGM_FI_DEV_FB_TOTAL", 4, "abs", 1),
          ("DCGM_FI_DEV_GPU_TEMP", 5, "abs", 2), ("DCGM_FI_DEV_POWER_USAGE", 6, "rel", 0.10),
          ("DCGM_FI_DEV_SM_CLOCK", 7, "rel", 0.15), ("DCGM_FI_DEV_MEM_CLOCK", 8, "rel", 0.05)]
rows = [[r.strip() for r in l.split(",")] for l in open(sys.argv[2])]
after = [[r.strip() for r in l.split(",")] for l in open(sys.argv[3])]
bad = 0
for row, row2 in zip(rows, after):
    gpu = row[0]
    for name, col, kind, tol in fields:
        if (name, gpu) not in metrics: print(f"gpu {gpu} {name}: not exported"); bad += 1; continue
        v = metrics[(name, gpu)][0]
        lo, hi = sorted([float(row[col]), float(row2[col])])
        d = 0 if lo <= v <= hi else min(abs(v - lo), abs(v - hi))
        ok = d <= (tol if kind == "abs" else tol * max(hi, 1e-9))
        bad += not ok
        print(f"gpu {gpu} {name}: exporter {v:g}, nvidia-smi {lo:g}..{hi:g}, tolerance {tol:g}{'' if kind == 'abs' else ' rel'}: {'ok' if ok else 'DIFFERS'}")
    uuid = metrics.get(("DCGM_FI_DEV_GPU_UTIL", gpu), (0, {}))[1].get("UUID")
    print(f"gpu {gpu} UUID label {uuid} vs {row[1]}: {'ok' if uuid == row[1] else 'DIFFERS'}")
print("all within tolerance" if bad == 0 else f"{bad} field(s) outside tolerance")
PY

log "exporter cost: --interval 1, scraped every second for 30 s"
$dtrain exporter --listen 127.0.0.1:9400 --interval 1 > "$OUT/exporter.log" 2>&1 &
epid=$!
sleep 2
t0=$(awk '{print $14 + $15}' /proc/$epid/stat)
for i in $(seq 30); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:9400/metrics").read()'; sleep 1; done
t1=$(awk '{print $14 + $15}' /proc/$epid/stat)
hz=$(getconf CLK_TCK)
python3 -c "print(f'exporter CPU: {($t1 - $t0) / $hz:.3f} s over ~30 s of wall time = {100 * ($t1 - $t0) / $hz / 30:.2f}% of one core')"
kill $epid; wait $epid 2>/dev/null

log "training throughput, metrics and timeline off vs on (resnet18 bf16, synthetic on the GPU, CUDA graphs, 1 and $ngpu GPUs)"
for n in 1 "$ngpu"; do
  for round in 1 2; do
    for mode in off on; do
      extra=""; [ "$mode" = on ] && extra="--metrics-port 9500 --timeline $OUT/trace_${n}_$round.json"
      $dtrain launch --nproc-per-node "$n" --master-port 29700 $dtrain train --model resnet18 --dataset synthetic \
        --synthetic-samples 60000 --precision bf16 --channels-last --batch-size 256 --max-steps 400 --eval-every 0 \
        --data-on-gpu --cuda-graphs --log-every 50 --progress lines $extra > "$OUT/train_${n}_${mode}_$round.log" 2>&1
      rc=$?
      # Steady state: the mean of the last four 50-step intervals' rates.
      rate=$(grep -E 'step [0-9]+/' "$OUT/train_${n}_${mode}_$round.log" | grep -o '[0-9.]* samples/s' | tail -4 \
             | awk '{s += $1} END {if (NR) printf "%.0f", s / NR}')
      whole=$(grep -o 'wall [0-9.]* s, [0-9]* samples/s' "$OUT/train_${n}_${mode}_$round.log" | tail -1)
      echo "$n GPU(s) round $round metrics/timeline $mode: exit $rc, $rate samples/s (last 4 log intervals); whole run: $whole"
    done
  done
done
ls -la "$OUT"/trace_*.json | head -3
