#!/usr/bin/env bash
# GPU acceptance of the training runtime (issue: `dtrain train`), on a
# machine with 4 (or 2) GPUs, in two phases so each fits one device call:
#   bench/gpu/train_acceptance.sh build     build against the installed PyTorch's libtorch + NCCL,
#                                           equivalence N GPUs x B == 1 GPU x N*B
#   bench/gpu/train_acceptance.sh train     bf16 resnet18 on Fashion-MNIST on 1/2/4 GPUs, overlap
#                                           timeline, throughput vs PyTorch DDP
# Needs .deps/ (header-only dependencies, GoogleTest) and .deps/fashion-mnist
# (the IDX files). Logs go to $OUT/<phase>.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?build or train}
suite=train-acceptance
source bench/gpu/lib.sh

if [ "$phase" = build ]; then
  log "machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' | tee "$OUT/versions.txt"
  log "build (libtorch from $torch_prefix)"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
    -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$torch_prefix" \
    -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
    && ninja -C build-gpu dtrain train_equivalence_worker custom_loop >> "$OUT/build.log" 2>&1 \
    || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
  grep -i "dtrain:" "$OUT/build.log"
  log "equivalence: N GPUs x B == 1 GPU x N*B (NCCL)"
  worker=build-gpu/tests/parallel/train_equivalence_worker
  for opt in sgd adamw; do
    for accum in 1 2; do
      args="--steps 6 --global-batch 48 --optimizer $opt --bucket-mb 0.004 --accum $accum"
      env -u RANK -u WORLD_SIZE $worker $args --out "$OUT/eq_${opt}_${accum}_1.bin" > "$OUT/eq_${opt}_${accum}_1.log" 2>&1
      for n in 2 "$ngpu"; do
        $dtrain launch --nproc-per-node "$n" --master-port $((29500 + n)) $worker $args --out "$OUT/eq_${opt}_${accum}_$n.bin" \
          > "$OUT/eq_${opt}_${accum}_$n.log" 2>&1 || { echo "equivalence run failed"; tail -20 "$OUT/eq_${opt}_${accum}_$n.log"; }
        python3 - "$OUT/eq_${opt}_${accum}_1.bin" "$OUT/eq_${opt}_${accum}_$n.bin" "$opt accum=$accum $n GPUs" <<'PY'
import sys, numpy as np
a, b = (np.fromfile(p, dtype=np.float32).astype(np.float64) for p in sys.argv[1:3])
rel = np.linalg.norm(a - b) / np.linalg.norm(a)
print(f"{sys.argv[3]}: {a.size} params, relative L2 distance {rel:.3e}, max abs diff {np.abs(a-b).max():.3e}")
PY
      done
    done
  done
  log "library example on $ngpu GPUs"
  $dtrain launch --nproc-per-node "$ngpu" --master-port 29590 build-gpu/examples/custom_loop 200 "$data" 2>&1 | tail -3
  exit 0
fi

log "bf16 resnet18 on Fashion-MNIST, global batch 256, 3 epochs, on 1/2/$ngpu GPUs"
for n in 1 2 "$ngpu"; do
  $dtrain launch --nproc-per-node "$n" --master-port $((29510 + n)) $dtrain train --model resnet18 --precision bf16 \
    --channels-last --data-dir "$data" --epochs 3 --batch-size $((256 / n)) --lr 0.1 --warmup 0.5 --log-every 100 \
    --progress lines --metrics-jsonl "$OUT/fmnist_resnet18_$n.jsonl" > "$OUT/fmnist_resnet18_$n.log" 2>&1
  echo "$n GPU(s): exit $? $(grep 'dtrain train: test accuracy' "$OUT/fmnist_resnet18_$n.log")"
done

log "overlap: bucket timeline of resnet50 (bf16, batch 128/GPU, $ngpu GPUs)"
$dtrain launch --nproc-per-node "$ngpu" --master-port 29530 $dtrain train --model resnet50 --dataset synthetic \
  --synthetic-samples 20000 --precision bf16 --batch-size 128 --max-steps 40 --eval-every 0 --print-bucket-timeline \
  --progress lines --log-every 20 > "$OUT/overlap_resnet50.log" 2>&1
echo "exit $?"; grep -A40 "timeline of the last backward" "$OUT/overlap_resnet50.log" | head -40

log "throughput vs PyTorch DDP: resnet18, bf16, channels-last, batch 256/GPU, synthetic 3x32x32"
python3 bench/train_compare.py --dtrain "$dtrain" --gpus "1,2,$ngpu" --model resnet18 --batch-size 256 \
  --precision bf16 --channels-last --steps 120 --warmup 20 --rounds 2 --out "$OUT/throughput_resnet18.json" \
  2> "$OUT/throughput_resnet18.log" | tee "$OUT/throughput_resnet18.md"
tail -8 "$OUT/throughput_resnet18.log"
