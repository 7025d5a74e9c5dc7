#!/usr/bin/env bash
# Every kernel of dtrain's training step beside every kernel of the
# torch.compile'd PyTorch peer's, under Nsight Compute (one metric, the
# kernel's duration; clocks and caches left alone), summed by kind and by
# name with bench/gpu/kernel_table.py: where the two steps spend their time.
#   bench/gpu/kernel_compare.sh                       llama-1b 2048 x 4, then gpt2-124m 1024 x 16
#   CONFIGS="llama-1b:2048:4" bench/gpu/kernel_compare.sh
# dtrain runs eagerly (--no-cuda-graphs: ncu times kernels one by one, the
# same kernels the graph replays), 1 warm-up step and 1 timed step, both
# profiled; the table counts the timed step (from its token embedding's
# gather on: kernel_table.py --second-half). The peer compiles in its warm-up steps
# outside the profile and is profiled over its 2 timed steps only
# (lm_peer.py --cuda-profiler-window, ncu --profile-from-start off).
# Builds build-gpu/ first unless it holds dtrain. Knobs: CONFIGS, PRECISION
# (bf16), DTRAIN_ARGS, PEER_ARGS, BUDGET_S (560), TOP (45).
# Output: $OUT/kernels.tgz (the raw CSVs and both tables per config).
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=kernels
suite=kernel-compare
source bench/gpu/lib.sh
machine_and_build 1
precision=${PRECISION:-bf16}
budget=${BUDGET_S:-560}
left() { echo $(( budget - ($(date +%s) - started) )); }

for config in ${CONFIGS:-llama-1b:2048:4 gpt2-124m:1024:16}; do
  IFS=: read -r model seq batch <<< "$config"
  tag="$model-$precision"
  [ "$(left)" -lt 60 ] && { echo "out of time before $config"; break; }
  log "dtrain $config, eager, under ncu ($(left) s left)"
  # In-process (RANK/WORLD_SIZE set, no --gpus): ncu sees the worker's kernels.
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
    timeout "$(( $(left) / 2 ))" ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv --page raw --log-file "$OUT/$tag-dtrain.ncu.log" \
    "$dtrain" bench train --model "$model" --seq-len "$seq" --batch-size "$batch" --precision "$precision" \
    --no-cuda-graphs --steps 1 --warmup 1 ${DTRAIN_ARGS:-} > "$OUT/$tag-dtrain.csv" 2> "$OUT/$tag-dtrain.err"
  echo "ncu exit $?"
  python3 bench/gpu/kernel_table.py "$OUT/$tag-dtrain.csv" "$OUT/$tag-dtrain.ncu.log" --steps 1 \
    --second-half gather_kernel --top "${TOP:-45}" \
    | tee "$OUT/$tag-dtrain.table"

  [ "$(left)" -lt 60 ] && { echo "out of time before the peer of $config"; break; }
  log "peer $config, torch.compile, under ncu ($(left) s left)"
  peer_precision=$precision; [ "$precision" = fp8 ] && peer_precision="bf16 --float8"
  timeout "$(( $(left) - 10 ))" ncu --clock-control none --cache-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv --page raw --log-file "$OUT/$tag-peer.ncu.log" \
    python3 bench/peers/lm_peer.py --model "$model" --seq-len "$seq" --batch-size "$batch" \
    --precision $peer_precision --parallel none --steps 2 --warmup-steps 3 --cuda-profiler-window \
    ${PEER_ARGS:-} > "$OUT/$tag-peer.csv" 2> "$OUT/$tag-peer.err"
  echo "ncu exit $?"
  python3 bench/gpu/kernel_table.py "$OUT/$tag-peer.csv" "$OUT/$tag-peer.ncu.log" --steps 2 --top "${TOP:-45}" \
    | tee "$OUT/$tag-peer.table"
done
echo "kernel_compare done after $(( $(date +%s) - started )) s"
