#!/usr/bin/env bash
# GPU acceptance of `dtrain doctor` and `dtrain slurm conf`, in one device call:
# builds dtrain without the training runtime (NCCL on), runs every check
# (with the active quick all-reduce) as a table and as JSON, and prints what
# nvidia-smi says about the same facts (topology, PCIe, persistence, driver
# and CUDA version, processes) to compare by eye and in the log.
# Logs go to $OUT/doctor.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=doctor
suite=doctor-acceptance
source bench/gpu/lib.sh
deps_lib=$PWD/.deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$deps_lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PWD/.deps LD_LIBRARY_PATH="$deps_lib:$LD_LIBRARY_PATH"

log "build (no libtorch; NCCL from $nccl_home)"
cmake -S . -B build-doctor -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_HTTPLIB=ON -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-doctor dtrain >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -30 "$OUT/build.log"; exit 1; }
dtrain=$PWD/build-doctor/src/cli/dtrain
# The CUDA runtime PyTorch ships (the runtime a training job on this node uses).
cudart=$(python3 -c 'import glob, os, nvidia; r = sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "**", "libcudart.so*"), recursive=True)); print(r[0] if r else "")' 2>/dev/null)
[ -n "$cudart" ] && export DTRAIN_CUDART_LIBRARY=$cudart
echo "CUDA runtime: ${cudart:-none found}; NCCL: $nccl_home/lib/libnccl.so.2"

log "nvidia-smi: the same facts"
{
  nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active --format=csv
  nvidia-smi | sed -n 1,4p
  nvidia-smi topo -m
  nvidia-smi -q | grep -A3 -i "fabric" | head -20
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
} 2>&1 | tee "$OUT/nvidia_smi.txt"

log "dtrain doctor --expect-gpus $ngpu --allreduce (table)"
$dtrain doctor --expect-gpus "$ngpu" --allreduce --timeout 120 2>&1 | tee "$OUT/doctor.txt"
echo "exit ${PIPESTATUS[0]}"
log "dtrain doctor --json"
$dtrain doctor --expect-gpus "$ngpu" --json > "$OUT/doctor.json" 2> "$OUT/doctor_json.err"
echo "exit $?"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["summary"], "exit_code", d["exit_code"])' "$OUT/doctor.json"
log "a wrong --expect-gpus must fail gpu.count and exit 2"
$dtrain doctor --check gpu.count --expect-gpus $((ngpu + 1)); echo "exit $?"
log "dtrain slurm conf"
$dtrain slurm conf 2>&1 | tee "$OUT/slurm_conf.txt"
$dtrain slurm conf --gres-files 2>&1 | tee -a "$OUT/slurm_conf.txt"
nproc; grep MemTotal /proc/meminfo; lscpu | grep -E "^(Socket|Core|Thread)"
