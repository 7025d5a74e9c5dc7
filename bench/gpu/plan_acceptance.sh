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
echo "| config | measured tokens/s | predicted | predicted / measured | measured peak GiB | predicted GiB | predicted / measured |"
echo "|---|---:|---:|---:|---:|---:|---:|"
while read -r model seq batch extra; do
  [ "$(left)" -lt 60 ] && { echo "out of time before $model $extra"; break; }
  name="$model${extra// /}"
  "$dtrain" bench train --gpus "$gpus" --model "$model" $extra --seq-len "$seq" --batch-size "$batch" --precision bf16 \
    --steps "${STEPS:-15}" --warmup "${WARMUP:-6}" --json > "$OUT/measured-$name.json" 2> "$OUT/measured-$name.log"
  shard=none; [[ "$extra" =~ --shard\ ([a-z]+) ]] && shard=${BASH_REMATCH[1]}
  layers=""; [[ "$extra" =~ (--layers\ [0-9]+) ]] && layers=${BASH_REMATCH[1]}
  "$dtrain" plan --model "$model" $layers --gpus "$gpus" --gpu "$(python3 -c "import json; print(json.load(open('$OUT/calibration.json'))['gpu'])")" \
    --seq-len "$seq" --tokens-per-step $((seq * batch * gpus)) --calibration "$OUT/calibration.json" --top 1000 --json \
    > "$OUT/plan-$name.json" 2> "$OUT/plan-$name.log"
  python3 - "$OUT" "$name" "$batch" "$shard" "$model $extra seq $seq batch $batch" <<'PY'
import json, sys
out, name, batch, shard, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
try:
    m = json.load(open(f"{out}/measured-{name}.json"))["results"][0]
except Exception as e:
    print(f"| {label} | measurement failed: {e} |"); sys.exit(0)
p = json.load(open(f"{out}/plan-{name}.json"))
want = [l for l in p["layouts"] if l["tp"] == 1 and l["pp"] == 1 and l["micro_batch"] == batch
        and l["microbatches"] == 1 and not l["activation_checkpointing"] and f"shard {shard}," in l["layout"]]
if not want:
    print(f"| {label} | the plan lists no such layout |"); sys.exit(0)
l = want[0]
gib = m["peak_memory_bytes"] / 2**30
print(f"| {label} | {m['tokens_per_s']:,.0f} | {l['tokens_per_s']:,.0f} | {l['tokens_per_s'] / m['tokens_per_s']:.3f} "
      f"| {gib:.2f} | {l['memory_gib_per_gpu']:.2f} | {l['memory_gib_per_gpu'] / gib:.3f} |")
PY
done <<< "${PLAN_CONFIGS:-llama-1b 2048 4
gpt2-124m 1024 16
llama-8b 2048 2 --layers 8
gpt2-1.5b 1024 8
llama-3b 2048 2}"
echo "plan_acceptance done after $(( $(date +%s) - started )) s"
