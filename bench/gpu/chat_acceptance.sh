#!/usr/bin/env bash
# SFT tokens/s on packed chat data against pretraining tokens/s, the same
# model, sequence length, batch and precision, on one GPU (the issue's goal:
# >= 0.95x). Needs .deps/chat-speed from bench/chat_speed_prepare.sh
# (carried). Each run: `dtrain train` for STEPS (60) steps logged every 10;
# the figure is the median tokens/s of the step records after the first
# 20 steps (graph capture and warm-up left out). Tokens are counted the
# same way on both sides: every position of a row (a chat row's padding
# included, as TRL's packed throughput counts it).
# Knobs: CHAT_MODEL (llama-1b), SEQ (2048), BATCH (4), STEPS (60), DTRAIN_ARGS.
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=sft-speed
suite=chat-acceptance
source bench/gpu/lib.sh
machine_and_build 1
data=$PWD/.deps/chat-speed
model=${CHAT_MODEL:-llama-1b}
common="--model $model --seq-len ${SEQ:-2048} --batch-size ${BATCH:-4} --precision bf16 --max-steps ${STEPS:-60}
  --log-every 10 --eval-batches 0 --progress lines --seed 3 ${DTRAIN_ARGS:-}"
for kind in text chat; do
  log "$model, --dataset $kind"
  extra="--dataset text --data-dir $data/shards"
  [ "$kind" = chat ] && extra="--dataset chat --data-dir $data/chat --tokenizer-dir $data/tok --chat-template llama3"
  "$dtrain" launch --nproc-per-node 1 --standalone "$dtrain" train $common $extra \
    --metrics-jsonl "$OUT/$kind.jsonl" > "$OUT/$kind.txt" 2>&1
  echo "exit $?"; grep -E "error|Error" "$OUT/$kind.txt" | head -5
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rate = {}
for kind in ("text", "chat"):
    try:
        steps = [json.loads(l) for l in open(f"{out}/{kind}.jsonl")]
    except OSError:
        print(f"{kind}: no metrics"); continue
    late = [r["tokens_per_s"] for r in steps if r.get("event") == "step" and r["step"] > 20]
    if late:
        rate[kind] = statistics.median(late)
        print(f"{kind}: median tokens/s {rate[kind]:,.0f} over {len(late)} records")
if len(rate) == 2:
    print(f"SFT / pretraining tokens/s: {rate['chat'] / rate['text']:.3f} (goal >= 0.95)")
PY
echo "chat_acceptance done after $(( $(date +%s) - started )) s"
