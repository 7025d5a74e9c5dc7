#!/usr/bin/env bash
# Re-formation after a node's loss, `dtrain launch` beside torchrun
# (PyTorch's own, which runs on the GPU machine's Python), default rendezvous
# settings: bench/reformation_compare.py. Only the CPUs are used. Writes the
# table and raw JSON under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
OUT="${OUT:-/tmp/dtrain-reformation-bench}"
mkdir -p "$OUT"
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' | tee "$OUT/versions.txt"
nproc | tee -a "$OUT/versions.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=OFF -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_DEPS_PREFIX="$PWD/.deps" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu dtrain >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
python3 bench/reformation_compare.py --dtrain build-gpu/src/cli/dtrain \
  --torchrun "python3 -m torch.distributed.run" --repeat "${REPEAT:-3}" --json "$OUT/reformation.json" \
  | tee "$OUT/reformation.md"
