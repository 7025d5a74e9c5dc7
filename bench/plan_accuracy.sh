#!/usr/bin/env bash
# `dtrain plan`'s predictions beside measured runs: the table of
# bench/gpu/plan_acceptance.sh, which sources plan_row from here, and, run
# as a script, the same table predicted again by this build from a
# directory that script wrote (its calibration.json and measured-*.json):
# no GPU needed, so a change to the estimate is checked against the last
# measurements.
#   bench/plan_accuracy.sh DIR [GPUS]    e.g. docs/results/2026-12-02-h200-grad-write/plan-accuracy
# Knobs: PLAN_CONFIGS (as plan_acceptance.sh's), DTRAIN (build/src/cli/dtrain).

plan_configs() {
  echo "${PLAN_CONFIGS:-llama-1b 2048 4
gpt2-124m 1024 16
llama-8b 2048 2 --layers 8
gpt2-1.5b 1024 8
llama-3b 2048 2}"
}

plan_header() {
  echo "| config | measured tokens/s | predicted | predicted / measured | measured peak GiB | predicted GiB | predicted / measured |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
}

# plan_row DTRAIN DIR PLAN_DIR GPUS MODEL SEQ BATCH [EXTRA...]: plans the
# layout of DIR/measured-<name>.json (tp 1, pp 1, dp GPUS, the --shard of
# EXTRA or none, micro-batch BATCH, no accumulation or checkpointing) from
# DIR/calibration.json into PLAN_DIR/plan-<name>.json, and prints the row.
plan_row() {
  local dtrain=$1 dir=$2 plan_dir=$3 gpus=$4 model=$5 seq=$6 batch=$7; shift 7
  local extra="$*" name shard=none layers=""
  name="$model${extra// /}"
  [[ "$extra" =~ --shard\ ([a-z]+) ]] && shard=${BASH_REMATCH[1]}
  [[ "$extra" =~ (--layers\ [0-9]+) ]] && layers=${BASH_REMATCH[1]}
  "$dtrain" plan --model "$model" $layers --gpus "$gpus" \
    --gpu "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['gpu'])" "$dir/calibration.json")" \
    --seq-len "$seq" --tokens-per-step $((seq * batch * gpus)) --calibration "$dir/calibration.json" --top 1000 --json \
    > "$plan_dir/plan-$name.json" 2> "$plan_dir/plan-$name.log"
  python3 - "$dir/measured-$name.json" "$plan_dir/plan-$name.json" "$batch" "$shard" "$model $extra seq $seq batch $batch" <<'PY'
import json, sys
measured, planned, batch, shard, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
try:
    m = json.load(open(measured))["results"][0]
except Exception as e:
    print(f"| {label} | measurement failed: {e} |"); sys.exit(0)
p = json.load(open(planned))
want = [l for l in p["layouts"] if l["tp"] == 1 and l["pp"] == 1 and l["micro_batch"] == batch
        and l["microbatches"] == 1 and not l["activation_checkpointing"] and f"shard {shard}," in l["layout"]]
if not want:
    print(f"| {label} | the plan lists no such layout |"); sys.exit(0)
l = want[0]
gib = m["peak_memory_bytes"] / 2**30
print(f"| {label} | {m['tokens_per_s']:,.0f} | {l['tokens_per_s']:,.0f} | {l['tokens_per_s'] / m['tokens_per_s']:.3f} "
      f"| {gib:.2f} | {l['memory_gib_per_gpu']:.2f} | {l['memory_gib_per_gpu'] / gib:.3f} |")
PY
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  [ $# -ge 1 ] || { echo "usage: bench/plan_accuracy.sh DIR [GPUS]" >&2; exit 2; }
  cd "$(dirname "$0")/.." || exit 1
  dir=$1 gpus=${2:-1}
  [ -f "$dir/calibration.json" ] || { echo "bench/plan_accuracy.sh: $dir/calibration.json: no such file" >&2; exit 2; }
  plans=$(mktemp -d)
  trap 'rm -rf "$plans"' EXIT
  plan_header
  while read -r model seq batch extra; do
    plan_row "${DTRAIN:-build/src/cli/dtrain}" "$dir" "$plans" "$gpus" "$model" "$seq" "$batch" $extra
  done <<< "$(plan_configs)"
fi
