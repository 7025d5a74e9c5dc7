#!/usr/bin/env bash
# GPU acceptance of ZeRO-3 (--shard full) beside PyTorch FSDP2, in device
# calls of at most 10 minutes (build-gpu/ from bench/gpu/lm_acceptance.sh
# build is reused when present):
#   bench/gpu/zero3_acceptance.sh check    tiny fp32 models on 2 GPUs: --shard full vs none, eager and
#                                          CUDA graphs, losses side by side; then gpt2-124m with every
#                                          --shard stage (bench/gpu/shard_acceptance.sh)
#   bench/gpu/zero3_acceptance.sh gpt2     gpt2-1.5b seq 1024, --shard full vs the FSDP2 peer
#                                          (fully_shard per block, bf16 params, fp32 reduce,
#                                          torch.compile per block, fused AdamW), bench/lm_compare.py
#   bench/gpu/zero3_acceptance.sh llama    llama-8b seq 2048 with activation checkpointing, the same
# Knobs: CHECK_FAMILIES ("gpt2 llama"), GPT2_BATCH (16), LLAMA_BATCH (2), ROUNDS (2; the check's stage
# table 1), STEPS (20), WARMUP (8), DTRAIN_ARGS, PEER_ARGS,
# BUDGET_S (540). Results: $OUT/<phase>.tgz.
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=${1:-check}
suite=zero3-acceptance
source bench/gpu/lib.sh
log "machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
if [ ! -x "$dtrain" ]; then
  log "build"
  SKIP_FUSED_TEST=1 bench/gpu/lm_acceptance.sh build > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
fi
gpus=2
[ "$ngpu" -lt 2 ] && { echo "zero3_acceptance: needs 2 GPUs, this machine has $ngpu"; exit 1; }

# Tiny models, fp32: sharded and replicated runs see the same data and, on 2
# ranks, do the same arithmetic up to the reduction's order.
check() {
  local tiny="--model $1 --layers 4 --dim 128 --heads 4 --seq-len 128 --vocab-size 512 --batch-size 4"
  [ "$1" = llama ] && tiny+=" --kv-heads 2"  # llama's default 8 key/value heads do not divide 4 heads
  local modes=("--no-cuda-graphs" "")
  [ "$1" = llama ] && modes=("")
  for graphs in "${modes[@]}"; do
    for shard in none full; do
      "$dtrain" bench train --gpus $gpus $tiny --precision fp32 --clip-grad-norm 1.0 --steps 6 --warmup 4 \
        --shard $shard $graphs --json > "$OUT/check-$1-$shard${graphs:+-eager}.json" 2> "$OUT/check-$1-$shard${graphs:+-eager}.log"
      echo "$1 --shard $shard ${graphs:-graphs}: exit $? $(grep -o '"loss":[^,]*' "$OUT/check-$1-$shard${graphs:+-eager}.json" | head -1) $(grep -o '"graphs":"[^"]*"' "$OUT/check-$1-$shard${graphs:+-eager}.json" | head -1)"
    done
  done
  [ "$1" = llama ] && return
  # bf16 parameters and reductions, with activation checkpointing.
  "$dtrain" bench train --gpus $gpus $tiny --precision bf16 --steps 6 --warmup 4 --shard full --reduce-dtype bf16 \
    --activation-checkpointing --json > "$OUT/check-$1-bf16.json" 2> "$OUT/check-$1-bf16.log"
  echo "$1 --shard full bf16 + checkpointing: exit $? $(grep -o '"loss":[^,]*' "$OUT/check-$1-bf16.json" | head -1)"
}

case "$phase" in
  check)
    log "correctness: --shard full vs none, fp32, 2 GPUs"
    for family in ${CHECK_FAMILIES:-gpt2 llama}; do check "$family"; done
    grep -h -B2 -A8 "Error\|error:" "$OUT"/check-*.log | head -40
    log "gpt2-124m, every --shard stage (${BUDGET_S:-540} s budget)"
    STAGES="none optimizer gradients full" ROUNDS=${ROUNDS:-1} bench/gpu/shard_acceptance.sh
    cp /tmp/dtrain-shard-acceptance-shard/shard_compare.md "$OUT/" 2>/dev/null
    ;;
  gpt2|llama)
    if [ "$phase" = gpt2 ]; then
      config=(--config gpt2-1.5b 1024 "${GPT2_BATCH:-16}" $gpus); extra=""
    else
      config=(--config llama-8b 2048 "${LLAMA_BATCH:-2}" $gpus); extra="--activation-checkpointing"
    fi
    left=$(( ${BUDGET_S:-540} - ($(date +%s) - started) ))
    log "$phase: dtrain --shard full vs FSDP2 (${left} s left)"
    python3 bench/lm_compare.py --dtrain "$dtrain" "${config[@]}" --steps "${STEPS:-20}" --warmup "${WARMUP:-8}" \
      --rounds "${ROUNDS:-2}" --deadline-s "$left" --parallel fsdp2 \
      --dtrain-args "--shard full $extra ${DTRAIN_ARGS:-}" --peer-args "$extra ${PEER_ARGS:-}" \
      --out "$OUT/lm_compare.json" 2> "$OUT/lm_compare.log" | tee "$OUT/lm_compare.md"
    grep -E "^# round|FAILED|^failed|timed out|Error" "$OUT/lm_compare.log" | tail -20
    ;;
  *) echo "unknown phase $phase (check | gpt2 | llama)"; exit 2 ;;
esac
echo "zero3_acceptance $phase done after $(( $(date +%s) - started )) s"
