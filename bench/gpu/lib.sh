# Shared set-up of the GPU acceptance scripts (sourced, with $phase and
# $suite set): NCCL settings for the GPU machine, the output folder packed
# into $OUT/<phase>.tgz on exit, the GPU count, PyTorch's libtorch and NCCL.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL_OUT="${OUT:-/tmp/dtrain-$suite}"
OUT=/tmp/dtrain-$suite-$phase
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
# A phase run twice in one call keeps both: phase.tgz, phase-2.tgz, ...
pack() {
  local tgz="$FINAL_OUT/$phase.tgz" n=1
  while [ -e "$tgz" ]; do n=$((n + 1)); tgz="$FINAL_OUT/$phase-$n.tgz"; done
  tar czf "$tgz" -C "$OUT" .
}
trap pack EXIT
ngpu=$(nvidia-smi -L | wc -l)
log() { echo "=== $*"; }
nccl_home=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
export LD_LIBRARY_PATH="$nccl_home/lib:${LD_LIBRARY_PATH:-}"
dtrain=$PWD/build-gpu/src/cli/dtrain
data=$PWD/.deps/fashion-mnist

# The machine's GPUs (into $OUT/gpus.csv), then build-gpu/ built unless it
# holds dtrain already; exits unless there are at least $1 GPUs.
machine_and_build() {
  log "machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
  if [ ! -x "$dtrain" ]; then
    log "build"
    local t0; t0=$(date +%s)
    SKIP_FUSED_TEST=1 bench/gpu/lm_acceptance.sh build > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
    echo "built in $(( $(date +%s) - t0 )) s"
  fi
  [ "$ngpu" -lt "$1" ] && { echo "$suite: needs $1 GPUs, this machine has $ngpu"; exit 1; }
  return 0
}
