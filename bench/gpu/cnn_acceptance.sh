#!/usr/bin/env bash
# The fused CNN blocks (batch-norm statistics/apply/backward with the
# residual add and ReLU, src/models/kernels/batch_norm.cu) and ResNet-50
# against torch.compile, on the GPU machine, in one device call:
#   - build dtrain, kernels_test, kernels_bench and models_test (its Fused* tests) against
#     the installed PyTorch's libtorch;
#   - the batch-norm kernel tests (against the CPU reference, determinism,
#     graph capture), the fused batch-norm operation and the fused ResNets
#     against DTRAIN_FUSED_KERNELS=0, and the kernels' bandwidth table;
#   - ResNet-50 (CONFIGS, default cnn224: 224x224, batch 128, bf16,
#     channels-last) on GPUS (default 1) GPUs: `dtrain bench train` (fused),
#     the PyTorch peer eager and under torch.compile (reduce-overhead on 1 GPU,
#     max-autotune-no-cudagraphs under DDP), ROUNDS rounds (default 1), with
#     bench/train_bench_compare.py --compiled-peer, dtrain with
#     the fused batch norm (the default); then dtrain with DTRAIN_FUSED_KERNELS=0 and
#     both eager time splits (--breakdown);
#   - with PROFILE=1, every kernel of two timed steps of dtrain (graphed) and
#     of the compiled peer under Nsight Compute (kernel durations only,
#     clocks left alone; --profile-range on both), summed by kind with
#     bench/gpu/kernel_table.py.
# PHASES (default tests,compare,unfused,kbench,breakdown) picks the parts;
# "profile" in PHASES or PROFILE=1 adds the Nsight Compute part.
#   bench/gpu/cnn_acceptance.sh      (needs .deps/ as the other GPU scripts)
# Logs go to $OUT/cnn.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=cnn
suite=cnn
source bench/gpu/lib.sh
# The fused batch norm is on by default (DTRAIN_FUSED_BATCH_NORM): every
# dtrain run here takes it but the unfused one (DTRAIN_FUSED_KERNELS=0).
deps=${DTRAIN_DEPS:-$PWD/.deps}
configs=${CONFIGS:-cnn224}
gpus=${GPUS:-1}
rounds=${ROUNDS:-1}
phases=,${PHASES:-tests,compare,unfused,kbench,breakdown}${PROFILE:+,profile},
want() { [[ $phases == *,$1,* ]]; }

log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__)' \
  2>&1 | tail -1 | tee "$OUT/versions.txt"

log "build (libtorch from $torch_prefix)"
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=ON \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_WITH_CUDA_KERNELS=ON -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_DEPS_PREFIX="$deps" \
  -DCMAKE_PREFIX_PATH="$deps/usr;$torch_prefix" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu dtrain kernels_test kernels_bench models_test >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; tail -30 "$OUT/build.log"; exit 1; }
echo "built in $((SECONDS - start)) s"
kbin=build-gpu/tests/models/kernels

if want tests; then
log "batch-norm kernel tests"
timeout 120 $kbin/kernels_test --gtest_brief=1 --gtest_filter='*BatchNorm*' > "$OUT/kernels_test.log" 2>&1
echo "kernels_test exit $?"
grep -E "^\[  (PASSED|FAILED) |Failure|out of tolerance|worst" "$OUT/kernels_test.log" | head -30
log "fused batch-norm operation and fused ResNets against DTRAIN_FUSED_KERNELS=0"
timeout 180 build-gpu/tests/models/models_test --gtest_brief=1 --gtest_filter='Fused*BatchNorm*:Fused*FusedResNet*' \
  > "$OUT/fused_ops_test.log" 2>&1
echo "fused_ops_test exit $?"
grep -E "^\[  (PASSED|FAILED) |Failure|worst|declined|Skipped" "$OUT/fused_ops_test.log" | head -30
fi
if want compare; then
log "ResNet-50 ($configs) on $gpus GPU(s): dtrain, PyTorch eager, PyTorch torch.compile; $rounds round(s)"
timeout 420 python3 bench/train_bench_compare.py --dtrain "$dtrain" --gpus "$gpus" --configs "$configs" --rounds "$rounds" \
  --compiled-peer --peer-args "--cudnn-benchmark" --out "$OUT/compare.json" 2> "$OUT/compare.log" | tee "$OUT/compare.md"
tail -6 "$OUT/compare.log"
fi

# MODEL_ARGS: the model and batch of the single-configuration parts (the
# unfused run, the time splits, the profiles); the flags mean the same to
# dtrain bench train and to the peer.
model_args=${MODEL_ARGS:-"--model resnet50 --image-size 224 --batch-size 128 --precision bf16 --channels-last"}
cfg="$model_args --steps 30 --warmup 10"
if want unfused; then
log "dtrain with DTRAIN_FUSED_KERNELS=0 (the libtorch batch-norm), same configuration"
DTRAIN_FUSED_KERNELS=0 timeout 120 $dtrain bench train --gpus 1 $cfg 2>&1 | grep -v INFO | tee "$OUT/unfused.txt" | tail -4
fi
if want kbench; then
log "batch-norm kernels, GB/s"
timeout 60 $kbin/kernels_bench > "$OUT/kernels_bench.md" 2>&1
grep -i -E "batch|^\| kernel|^\|---" "$OUT/kernels_bench.md" | head -30
fi

if want breakdown; then
log "eager time split, fused and unfused (--no-cuda-graphs --breakdown)"
timeout 120 $dtrain bench train --gpus 1 $cfg --no-cuda-graphs --breakdown 2>&1 | grep -v INFO | tee "$OUT/breakdown_fused.txt" | tail -8
DTRAIN_FUSED_KERNELS=0 timeout 120 $dtrain bench train --gpus 1 $cfg --no-cuda-graphs --breakdown 2>&1 | grep -v INFO \
  | tee "$OUT/breakdown_unfused.txt" | tail -8
fi

if want profile && command -v ncu > /dev/null; then
  ncu_args=(--profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum
            --csv --page raw)
  single=(env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29613)
  log "ncu: every kernel of two timed dtrain steps (CUDA graph)"
  timeout 150 "${single[@]}" ncu "${ncu_args[@]}" --log-file "$OUT/ncu_dtrain.log" \
    $dtrain bench train $cfg --steps 2 --warmup 5 --profile-range > "$OUT/kernels_dtrain.csv" 2> "$OUT/ncu_dtrain.err"
  echo "ncu exit $?"
  python3 bench/gpu/kernel_table.py "$OUT/kernels_dtrain.csv" "$OUT/ncu_dtrain.log" --steps 2 --top 45
  # The compiled peer under ncu does not finish compiling within a device
  # call (240 s were not enough on an H100): its kernels come from
  # torch.profiler (CUPTI) instead, two steps after the timed ones.
  log "torch.profiler: every kernel of two steps of the compiled peer"
  timeout 240 "${single[@]}" python3 bench/peers/torch_ddp_bench.py $model_args \
    --cudnn-benchmark --compile reduce-overhead --steps 5 --warmup 10 --kernel-csv "$OUT/kernels_peer.csv" > "$OUT/peer_profile.txt" 2> "$OUT/peer_profile.err"
  echo "peer exit $?"
  python3 bench/gpu/kernel_table.py "$OUT/kernels_peer.csv" --steps 2 --top 45
fi
