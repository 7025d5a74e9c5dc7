#!/usr/bin/env bash
# `dtrain plan` against measured runs on the GPU machine (one device call):
# `dtrain plan --calibrate` fits this machine's constants into
# $OUT/calibration.json; then, for each of PLAN_CONFIGS ("model seq batch
# [extra flags]", on one GPU unless GPUS), `dtrain bench train` measures
# tokens/s and the peak memory and `dtrain plan` (reading the calibration)
# predicts the same layout (tp 1, pp 1, dp = GPUS, the --shard of the extra
# flags or none, micro-batch = batch, no accumulation); the two side by
# side (goals: tokens/s within 15%, memory within 10%).
# Knobs: PLAN_CONFIGS, GPUS (1), STEPS (15), WARMUP (6), BUDGET_S (540).
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=accuracy
suite=plan-acceptance
source bench/gpu/lib.sh
gpus=${GPUS:-1}
machine_and_build "$gpus"
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - started) )); }
log "dtrain plan --calibrate"
"$dtrain" plan --calibrate --calibration "$OUT/calibration.json" 2> "$OUT/calibrate.log" | tee "$OUT/calibrate.txt"
cat "$OUT/calibration.json"
log "predictions beside measurements ($(left) s left)"
source bench/plan_accuracy.sh
plan_header
while read -r model seq batch extra; do
  [ "$(left)" -lt 60 ] && { echo "out of time before $model $extra"; break; }
  name="$model${extra// /}"
  "$dtrain" bench train --gpus "$gpus" --model "$model" $extra --seq-len "$seq" --batch-size "$batch" --precision bf16 \
    --steps "${STEPS:-15}" --warmup "${WARMUP:-6}" --json > "$OUT/measured-$name.json" 2> "$OUT/measured-$name.log"
  plan_row "$dtrain" "$OUT" "$OUT" "$gpus" "$model" "$seq" "$batch" $extra
done <<< "$(plan_configs)"
echo "plan_acceptance done after $(( $(date +%s) - started )) s"
