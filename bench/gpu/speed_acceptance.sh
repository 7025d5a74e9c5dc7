#!/usr/bin/env bash
# GPU acceptance of the speed issue (CUDA graphs, data on the GPU, bench
# train against PyTorch DDP), on a machine with 4 (or 2) GPUs, in phases that
# each fit one device call:
#   bench/gpu/speed_acceptance.sh build       build against the installed PyTorch's libtorch + NCCL, the CUDA
#                                             unit tests, graphed vs eager losses over 50 steps
#   bench/gpu/speed_acceptance.sh compare a,b bench/train_bench_compare.py on seed configurations a and b
#   bench/gpu/speed_acceptance.sh compare c   ... and c
#   bench/gpu/speed_acceptance.sh breakdown   the eager time split of each configuration on 1 and 4 GPUs
# Needs .deps/ (header-only dependencies, GoogleTest) and .deps/fashion-mnist.
# Logs go to $OUT/<phase>.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?build, compare CONFIGS or breakdown}
suite=speed-acceptance
source bench/gpu/lib.sh

build() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
    -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
    -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
    && ninja -C build-gpu dtrain train_optim_test data_test >> "$OUT/build.log" 2>&1 \
    || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
}

if [ "$phase" = build ]; then
  log "machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee "$OUT/versions.txt"
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -1 | tee -a "$OUT/versions.txt"
  log "build (libtorch from $torch_prefix)"
  build
  log "CUDA unit tests (optimizer incl. capturable mode, data on the device, loader)"
  build-gpu/tests/optim/optim_test > "$OUT/optim_test.log" 2>&1; echo "train_optim_test exit $?"; grep -E "PASSED|FAILED|SKIPPED" "$OUT/optim_test.log" | head
  # (the dataset-file tests use std::filesystem, which crashes against pip libtorch's own copy of it)
  build-gpu/tests/data/data_test --gtest_filter='DeviceEpochData*:LoaderTest*:DistributedSampler*' > "$OUT/data_test.log" 2>&1; echo "data_test exit $?"; grep -E "PASSED|FAILED|SKIPPED" "$OUT/data_test.log" | head
  log "graphed vs eager: resnet18 on Fashion-MNIST, 2 GPUs x 64, data on the GPU, deterministic cuDNN, 50 steps"
  for precision in fp32 bf16; do
    for mode in eager eager2 graphs; do
      flags=""; [ "$mode" = graphs ] && flags="--cuda-graphs"
      $dtrain launch --nproc-per-node 2 --master-port 29600 $dtrain train --model resnet18 --data-dir "$data" \
        --precision $precision --batch-size 64 --max-steps 50 --log-every 1 --eval-every 0 --progress lines \
        --data-on-gpu --deterministic $flags --metrics-jsonl "$OUT/num_${precision}_$mode.jsonl" > "$OUT/num_${precision}_$mode.log" 2>&1
      echo "$precision $mode: exit $? $(grep -E 'CUDA graphs' "$OUT/num_${precision}_$mode.log" | tail -1)"
    done
    python3 - "$OUT/num_${precision}_eager.jsonl" "$OUT/num_${precision}_eager2.jsonl" "$OUT/num_${precision}_graphs.jsonl" "$precision" <<'PY'
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if r.get("event") == "step"]
a, b, g = (losses(p) for p in sys.argv[1:4])
def rel(x, y): return max(abs(u - v) / max(abs(u), 1e-12) for u, v in zip(x, y))
print(f"{sys.argv[4]}: {len(a)} steps; losses {a[0]:.4f} -> {a[-1]:.4f} (eager), {g[0]:.4f} -> {g[-1]:.4f} (graphs); "
      f"max relative difference eager vs eager {rel(a, b):.2e}, eager vs graphs {rel(a, g):.2e}")
PY
  done
  log "bench train smoke: resnet50 32x32 batch 64 fp32, 1 GPU"
  $dtrain bench train --gpus 1 --steps 50 --warmup 10 2>&1 | grep -v INFO | tee "$OUT/bench_smoke.txt"
  exit 0
fi

[ -x "$dtrain" ] || build
if [ "$phase" = compare ]; then
  configs=${2:?configs, e.g. a,b}
  log "dtrain bench train vs PyTorch DDP, seed configurations $configs, GPUs 1,2,$ngpu"
  python3 bench/train_bench_compare.py --dtrain "$dtrain" --gpus "1,2,$ngpu" --configs "$configs" --rounds 2 \
    --peer-args "--cudnn-benchmark" ${DTRAIN_ARGS:+--dtrain-args "$DTRAIN_ARGS"} --out "$OUT/compare_${configs//,/}.json" 2> "$OUT/compare.log" \
    | tee "$OUT/compare_${configs//,/}.md"
  tail -4 "$OUT/compare.log"
  exit 0
fi

if [ "$phase" = sweep ]; then
  # Gradient bucket size and NCCL channel count against 4-GPU scaling, config b.
  cfg="--image-size 32 --batch-size 256 --precision bf16 --channels-last --steps 100 --warmup 20"
  $dtrain bench train --gpus 1 $cfg 2>&1 | grep -E "^ +[0-9]"
  for mb in ${SWEEP_BUCKETS:-10 50 100}; do echo "bucket-mb $mb"; $dtrain bench train --gpus "$ngpu" $cfg --bucket-mb $mb 2>&1 | grep -E "^ +[0-9]"; done
  for ch in ${SWEEP_CHANNELS:-4 8 16}; do echo "NCCL_MAX_NCHANNELS=$ch"; NCCL_MAX_NCHANNELS=$ch $dtrain bench train --gpus "$ngpu" $cfg 2>&1 | grep -E "^ +[0-9]"; done
  exit 0
fi

if [ "$phase" = breakdown ]; then
  all=("--image-size 32 --batch-size 64 --precision fp32 --steps 30 --warmup 10"
       "--image-size 32 --batch-size 256 --precision bf16 --channels-last --steps 30 --warmup 10"
       "--image-size 224 --batch-size 128 --precision bf16 --channels-last --steps 20 --warmup 10")
  for i in ${BREAKDOWN:-0 1 2}; do
    cfg=${all[$i]}
    log "time split (eager): $cfg"
    $dtrain bench train --gpus "1,$ngpu" $cfg --no-cuda-graphs --breakdown 2>&1 | grep -v INFO
  done
  exit 0
fi
echo "unknown phase $phase"; exit 2
