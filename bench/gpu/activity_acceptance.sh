#!/usr/bin/env bash
# GPU acceptance of the exporter's GPM activity metrics (DCGM_FI_PROF_*), in
# one device call: builds dtrain without the training runtime, runs
# `dtrain exporter --interval 1` and scrapes it while GPU 0 is idle, then
# while PyTorch runs a bf16 matmul loop on it with host<->device copies on a
# second stream (both directions), then idle again. Passes when, on the loaded GPU,
# DCGM_FI_PROF_SM_ACTIVE and DCGM_FI_PROF_PIPE_TENSOR_ACTIVE are above 0.5
# under load and below 0.05 idle, DCGM_FI_PROF_DRAM_ACTIVE is above 0 and
# the PCIe bytes/s are above 0 under load. Prints the GPUs' owner labels
# (hpc_job, pod_uid) seen meanwhile. Logs go to $OUT/activity.tgz; the exit
# status is 0 only when every check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=activity
suite=activity-acceptance
source bench/gpu/lib.sh
deps_lib=$PWD/.deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$deps_lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PWD/.deps LD_LIBRARY_PATH="$deps_lib:$LD_LIBRARY_PATH"

log "build (no libtorch; cpp-httplib from .deps when there)"
cmake -S . -B build-activity -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_HTTPLIB=AUTO -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-activity dtrain >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -30 "$OUT/build.log"; exit 1; }
dtrain=$PWD/build-activity/src/cli/dtrain
nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv | tee "$OUT/gpus.csv"

port=9411
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null; }
# A build without cpp-httplib has no server: then every scrape is a
# `dtrain exporter --once` of its own (a 120 ms GPM window instead of 1 s).
scrape() {  # scrape <phase> <count>: <count> scrapes 2 s apart into $OUT/<phase>_<i>.prom
  for i in $(seq "$2"); do
    if [ -n "$epid" ]; then
      get "http://127.0.0.1:$port/metrics" > "$OUT/$1_$i.prom" || echo "scrape $1 $i failed"
    else
      $dtrain exporter --once > "$OUT/$1_$i.prom" 2>> "$OUT/exporter.log" || echo "exporter --once $1 $i failed"
    fi
    sleep 2
  done
}

log "dtrain exporter --interval 1"
$dtrain exporter --listen "127.0.0.1:$port" --interval 1 > "$OUT/exporter.log" 2>&1 &
epid=$!
for _ in $(seq 50); do get "http://127.0.0.1:$port/metrics" > /dev/null && break; kill -0 $epid 2>/dev/null || break; sleep 0.2; done
if ! kill -0 $epid 2>/dev/null; then
  wait $epid 2>/dev/null
  echo "no exporter server in this build ($(tail -1 "$OUT/exporter.log")): one \`dtrain exporter --once\` per scrape"
  epid=""
  $dtrain exporter --once > /dev/null 2>> "$OUT/exporter.log"
fi
grep -i "performance monitoring\|NVML" "$OUT/exporter.log"

log "idle"
sleep 3
scrape idle 3

log "load: bf16 matmul loop on GPU 0, host<->device copies on a second stream"
cat > "$OUT/load.py" <<'PY'
import sys, time, torch
seconds = float(sys.argv[1])
dev = torch.device("cuda", 0)
print("uuid", "GPU-" + str(torch.cuda.get_device_properties(dev).uuid), flush=True)
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
host = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
back = torch.empty_like(host).pin_memory()
dst = torch.empty_like(host, device=dev)
copies = torch.cuda.Stream(dev)
end = time.time() + seconds
n = 0
while time.time() < end:
    with torch.cuda.stream(copies):
        dst.copy_(host, non_blocking=True)  # PCIe rx of the GPU
        back.copy_(dst, non_blocking=True)  # PCIe tx
    for _ in range(20):
        c = a @ b
    n += 20
    torch.cuda.synchronize(dev)
print("matmuls", n, flush=True)
PY
CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 python3 "$OUT/load.py" 30 > "$OUT/load.log" 2>&1 &
lpid=$!
sleep 8  # warm-up: cuBLAS heuristics, clocks up, two exporter windows
scrape load 6
wait $lpid; echo "load exit $?"; cat "$OUT/load.log"

log "idle again"
sleep 4
scrape after 3
[ -n "$epid" ] && { kill $epid; wait $epid 2>/dev/null; }

log "checks"
python3 - "$OUT" <<'PY'
import glob, os, re, statistics, sys
out = sys.argv[1]
uuid = next((l.split()[1] for l in open(os.path.join(out, "load.log")) if l.startswith("uuid ")), None)

def read(path):
    series = []
    for line in open(path):
        m = re.match(r'(\w+)\{([^}]*)\} (\S+)', line)
        if m:
            series.append((m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))))
    return series

def values(phase, name):
    got = []
    for path in sorted(glob.glob(os.path.join(out, phase + "_*.prom"))):
        for metric, labels, value in read(path):
            if metric == name and (labels.get("UUID") == uuid if uuid else labels.get("gpu") == "0"):
                got.append(value)
    return got

print(f"loaded GPU: {uuid or 'gpu 0 (no UUID from torch)'}")
bad = 0
def check(what, ok):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")

for name in ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
             "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
             "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"]:
    print(f"{name}: idle {values('idle', name)} load {values('load', name)} after {values('after', name)}")

def median(phase, name):
    v = values(phase, name)
    return statistics.median(v) if v else None

for name in ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]:
    load, idle, after = median("load", name), median("idle", name), median("after", name)
    check(f"{name} under load {load} > 0.5", load is not None and load > 0.5)
    check(f"{name} idle {idle} < 0.05", idle is not None and idle < 0.05)
    check(f"{name} idle again {after} < 0.05", after is not None and after < 0.05)
dram = median("load", "DCGM_FI_PROF_DRAM_ACTIVE")
check(f"DCGM_FI_PROF_DRAM_ACTIVE under load {dram} > 0", dram is not None and dram > 0)
pcie = [median("load", n) for n in ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")]
check(f"DCGM_FI_PROF_PCIE_TX/RX_BYTES under load {pcie} > 0", all(v is not None and v > 0 for v in pcie))
for path in sorted(glob.glob(os.path.join(out, "load_*.prom")))[:1]:
    owners = {(l.get("gpu"), l.get("hpc_job"), l.get("pod_uid")) for m, l, v in read(path)
              if m == "DCGM_FI_DEV_GPU_UTIL"}
    print("owner labels under load (gpu, hpc_job, pod_uid):", sorted(owners, key=str))
print("all checks passed" if bad == 0 else f"{bad} check(s) failed")
sys.exit(1 if bad else 0)
PY
