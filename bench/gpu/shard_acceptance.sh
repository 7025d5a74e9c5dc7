#!/usr/bin/env bash
# GPU acceptance of sharded data parallelism (--shard), in one device call:
# `dtrain bench train` of a language model on $GPUS GPUs (default: all of
# them, at least 2) with --shard none, optimizer and gradients in turn,
# $ROUNDS alternating rounds (the order rotates each round so that drift
# hits every stage), then a table of median tokens/s, step time, peak memory
# and the ratio to replicated (--shard none).
#   bench/gpu/shard_acceptance.sh         (after bench/gpu/lm_acceptance.sh build)
# Knobs: MODEL (gpt2-124m), SEQ (1024), BATCH (16), GPUS, STAGES
# ("none optimizer gradients"), ROUNDS (2), STEPS (30), WARMUP (10),
# DTRAIN_ARGS. Results: $OUT/shard.tgz (shard_compare.md, one JSON per run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
phase=shard
suite=shard-acceptance
source bench/gpu/lib.sh
[ -x "$dtrain" ] || { echo "no $dtrain: run bench/gpu/lm_acceptance.sh build first"; exit 1; }
gpus=${GPUS:-$ngpu}
[ "$gpus" -lt 2 ] && { echo "shard_acceptance: $ngpu GPU(s); sharding needs at least 2"; exit 0; }
stages=(${STAGES:-none optimizer gradients})
rounds=${ROUNDS:-2}
log "dtrain bench train --shard {${stages[*]}}: ${MODEL:-gpt2-124m} seq ${SEQ:-1024} batch ${BATCH:-16}/GPU on $gpus GPUs, $rounds round(s)"
for ((round = 1; round <= rounds; ++round)); do
  for ((i = 0; i < ${#stages[@]}; ++i)); do
    stage=${stages[$(( (i + round - 1) % ${#stages[@]} ))]}
    "$dtrain" bench train --gpus "$gpus" --model "${MODEL:-gpt2-124m}" --seq-len "${SEQ:-1024}" \
      --batch-size "${BATCH:-16}" --precision bf16 --clip-grad-norm 1.0 --steps "${STEPS:-30}" \
      --warmup "${WARMUP:-10}" --shard "$stage" ${DTRAIN_ARGS:-} --json > "$OUT/$stage-$round.json" 2> "$OUT/$stage-$round.log"
    echo "round $round --shard $stage: exit $?"
  done
done
python3 - "$OUT" "$gpus" "${stages[@]}" <<'EOF' | tee "$OUT/shard_compare.md"
import glob, json, os, statistics, sys
out, gpus, stages = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for stage in stages:
    runs = []
    for path in sorted(glob.glob(os.path.join(out, f"{stage}-*.json"))):
        try:
            last = [l for l in open(path) if l.startswith('{"bench"')][-1]
            runs.append(json.loads(last)["results"][0])
        except Exception:
            pass
    rows[stage] = runs
base = statistics.median(r["tokens_per_s"] for r in rows["none"]) if rows.get("none") else None
print(f"| --shard | GPUs | tokens/s (median) | rounds | step ms | MFU | peak GiB/GPU | vs none |")
print("|---|---:|---:|---|---:|---:|---:|---:|")
for stage, runs in rows.items():
    if not runs:
        print(f"| {stage} | {gpus} | failed | | | | | |")
        continue
    tps = statistics.median(r["tokens_per_s"] for r in runs)
    step = statistics.median(r["step_ms"] for r in runs)
    mfu = statistics.median(r.get("mfu", 0) for r in runs)
    mem = max(r.get("peak_memory_bytes", 0) for r in runs) / 2**30
    ratio = f"{tps / base:.3f}" if base else "n/a"
    each = " / ".join(f"{r['tokens_per_s']:,.0f}" for r in runs)
    print(f"| {stage} | {gpus} | {tps:,.0f} | {each} | {step:.1f} | {100 * mfu:.1f}% | {mem:.2f} | {ratio} |")
EOF
