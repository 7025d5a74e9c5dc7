#!/usr/bin/env bash
# GPU acceptance of pipeline parallelism (--pp) beside PyTorch's
# torch.distributed.pipelining, in device calls of at most 10 minutes
# (build-gpu/ from bench/gpu/lm_acceptance.sh build is reused when present):
#   bench/gpu/pp_acceptance.sh check   tiny llama, fp32: pp 2 on 2 GPUs against pp 1 on one for every
#                                      schedule (losses side by side); the peer's --check
#   bench/gpu/pp_acceptance.sh speed   llama-8b seq 4096, pp 2, M 8 (micro-batches of one sequence):
#                                      dtrain against the pipelining peer (bench/peers/lm_pp_peer.py:
#                                      the same stages, torch.compile per block, FSDP2's bf16) for each
#                                      of SCHEDULES ("1f1b interleaved-1f1b"), by bench/lm_compare.py
#   bench/gpu/pp_acceptance.sh bubble  the same dtrain runs with --breakdown: each schedule's measured
#                                      bubble (pp_bubble_mean) beside (p - 1) / (V M + p - 1), zb-h1 too
#   bench/gpu/pp_acceptance.sh slice70 4 GPUs, pp 2 x tp 2 on LAYERS (8) blocks of Llama 3 70B's shape
#                                      (dim 8192, ffn 28672, 64 heads, 8 kv heads), seq 4096, M 8, 1F1B:
#                                      dtrain against the pipelining peer with torchtitan's TP per
#                                      stage (loss_parallel, or gathered logits when a 1-step check of
#                                      it fails), each rank's memory estimate printed first
# Knobs: MODEL (llama-8b), SEQ (4096), BATCH (8), M (8), STEPS (10), WARMUP (4), SCHEDULES,
# CHECK_SCHEDULES, PEER_CHECK (1), LAYERS, DTRAIN_ARGS, PEER_ARGS, BUDGET_S (540), TAG (a suffix
# of the work folder, for two phases of one name at once). Results: $OUT/<phase>.tgz.
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=${1:-check}
suite=pp-acceptance${TAG:+-$TAG}
source bench/gpu/lib.sh
machine_and_build 2

bench() {  # bench NAME GPUS ARGS...: one bench run, its loss and step time in one line
  local name=$1 gpus=$2; shift 2
  "$dtrain" bench train --gpus "$gpus" "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name: exit $? $(grep -o '"loss":[^,]*' "$OUT/$name.json" | head -1) $(grep -o '"step_ms":[^,]*' "$OUT/$name.json" | head -1)"
}
schedule_flags() {  # the flags of a schedule word
  case $1 in
    interleaved-1f1b) echo "--pp-schedule interleaved-1f1b --virtual-stages 2" ;;
    *) echo "--pp-schedule $1" ;;
  esac
}
big="--model ${MODEL:-llama-8b} --seq-len ${SEQ:-4096}"
split_of() {  # split_of SCHEDULE [FLAGS...]: the stages dtrain balances, as --pp-split counts
  local s=$1; shift
  "$dtrain" train $big --pp 2 --microbatches "${M:-8}" $(schedule_flags "$s") "$@" --pp-print-schedule |
    sed -n 's/^# stages (blocks): //p' | tr '|' '\n' |
    awk -F- '{gsub(/ /, ""); if (NF == 2) printf "%s%d", (n++ ? "," : ""), $2 - $1 + 1}'
}

compare() {  # compare NAME GPUS LEFT_S FLAGS [PEER_FLAGS]: dtrain vs the pipelining peer, by lm_compare
  local name=$1 gpus=$2 left=$3 flags=$4 peer_flags=${5:-}
  python3 bench/lm_compare.py --dtrain "$dtrain" --config "${MODEL:-llama-8b}" "${SEQ:-4096}" "${BATCH:-8}" "$gpus" \
    --steps "${STEPS:-10}" --warmup "${WARMUP:-4}" --rounds 1 --deadline-s "$left" --parallel pp \
    --dtrain-args "$flags ${DTRAIN_ARGS:-}" --peer-args "$flags $peer_flags ${PEER_ARGS:-}" \
    --out "$OUT/lm_compare-$name.json" 2> "$OUT/lm_compare-$name.log" | tee "$OUT/lm_compare-$name.md"
  grep -E "FAILED|^failed|timed out|Error" "$OUT/lm_compare-$name.log" | tail -10
}

case "$phase" in
  check)
    log "correctness: pp 2 (2 GPUs) vs pp 1 (1 GPU), fp32, eager, the same batch"
    tiny="--model llama --layers 4 --dim 128 --heads 4 --kv-heads 2 --seq-len 128 --vocab-size 512 --batch-size 8 --precision fp32 --clip-grad-norm 1.0 --steps 6 --warmup 4 --no-cuda-graphs --timeout 60"
    bench "pp1" 1 $tiny
    for s in ${CHECK_SCHEDULES:-1f1b gpipe zb-h1 interleaved-1f1b}; do
      bench "pp2-$s" 2 $tiny --pp 2 --microbatches 4 $(schedule_flags $s)
    done
    bench "pp2-bf16" 2 --model llama --layers 4 --dim 256 --heads 8 --kv-heads 2 --seq-len 256 --vocab-size 1024 \
      --batch-size 8 --precision bf16 --steps 6 --warmup 4 --pp 2 --microbatches 4
    grep -h -B2 -A8 "Error\|error:" "$OUT"/*.log | head -40
    [ "${PEER_CHECK:-1}" = 1 ] || { echo "pp_acceptance check done after $(( $(date +%s) - started )) s"; exit 0; }
    log "the pipelining peer, 2 steps (--check, no compile)"
    (cd bench/peers && timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node 2 lm_pp_peer.py \
      --check --no-compile --model llama-8b --layers 4 --dim 256 --heads 8 --kv-heads 2 --vocab-size 1024 \
      --seq-len 256 --batch-size 4 --pp 2 --microbatches 4) > "$OUT/peer-check.log" 2>&1
    echo "peer check 1f1b: exit $?"; tail -3 "$OUT/peer-check.log"
    (cd bench/peers && timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node 2 lm_pp_peer.py \
      --check --no-compile --model llama-8b --layers 4 --dim 256 --heads 8 --kv-heads 2 --vocab-size 1024 \
      --seq-len 256 --batch-size 4 --pp 2 --microbatches 4 --pp-schedule interleaved-1f1b --virtual-stages 2) \
      > "$OUT/peer-check-interleaved.log" 2>&1
    echo "peer check interleaved: exit $?"; tail -3 "$OUT/peer-check-interleaved.log"
    ;;
  speed)
    for s in ${SCHEDULES:-1f1b interleaved-1f1b}; do
      left=$(( ${BUDGET_S:-540} - ($(date +%s) - started) ))
      [ "$left" -lt 120 ] && { echo "$s: skipped ($left s left)"; continue; }
      split=$(split_of "$s")
      flags="--pp 2 --microbatches ${M:-8} $(schedule_flags "$s") --pp-split $split"
      log "${MODEL:-llama-8b} seq ${SEQ:-4096}: dtrain vs the pipelining peer, $flags (${left} s left)"
      compare "$s" 2 "$left" "$flags"
    done
    ;;
  bubble)
    for s in ${SCHEDULES:-1f1b interleaved-1f1b zb-h1}; do
      [ $(( $(date +%s) - started )) -gt "${BUDGET_S:-540}" ] && { echo "$s: skipped (budget)"; continue; }
      bench "bubble-$s" 2 $big --batch-size "${BATCH:-8}" --precision bf16 --pp 2 --microbatches "${M:-8}" \
        $(schedule_flags "$s") --steps "${STEPS:-10}" --warmup "${WARMUP:-4}" --no-cuda-graphs --breakdown
    done
    python3 - "$OUT" <<'PY'
import glob, json, os, sys
print("| schedule | step ms | span ms (rank 0) | busy ms (rank 0) | optimizer ms (rank 0) | bubble rank 0 | bubble mean | theory |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "bubble-*.json"))):
    try:
        r = json.load(open(path))["results"][0]
    except Exception:
        continue
    b = r.get("breakdown", {})
    print(f"| {r.get('pp_schedule')} | {r.get('step_ms', 0):.1f} | {b.get('pp_span_ms', 0):.1f} | "
          f"{b.get('pp_busy_ms', 0):.1f} | {b.get('optimizer_ms', 0):.1f} | {b.get('pp_bubble', 0):.3f} | "
          f"{b.get('pp_bubble_mean', 0):.3f} | "
          f"{b.get('pp_bubble_theory', 0):.3f} |")
PY
    ;;
  slice70)
    [ "$ngpu" -lt 4 ] && { echo "slice70: needs 4 GPUs, this machine has $ngpu"; exit 1; }
    shape="--dim 8192 --ffn-dim 28672 --heads 64 --kv-heads 8"
    dims="$shape --layers ${LAYERS:-8}"
    "$dtrain" train $big $dims --batch-size "${BATCH:-8}" --precision bf16 --tp 2 --pp 2 --microbatches "${M:-8}" \
      --pp-print-schedule | grep -E "stages|memory" | tee "$OUT/plan.txt"
    split=$(split_of 1f1b $dims --tp 2)
    log "the peer's loss_parallel under the pipeline: one step, 2 blocks, eager"
    lp=""
    (cd bench/peers && timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node 4 lm_pp_peer.py \
      --check --no-compile --model llama-8b $shape --layers 2 --seq-len "${SEQ:-4096}" --batch-size 2 --steps 1 \
      --pp 2 --tp 2 --microbatches 2) > "$OUT/peer-check.log" 2>&1 || lp="--no-loss-parallel"
    echo "peer check exit: ${lp:-ok (loss_parallel)}"; tail -2 "$OUT/peer-check.log"
    flags="$dims --tp 2 --pp 2 --microbatches ${M:-8} --pp-split $split"
    left=$(( ${BUDGET_S:-540} - ($(date +%s) - started) ))
    log "70B slice: dtrain vs the pipelining peer, $flags ($left s left)"
    compare slice70 4 "$left" "$flags" "$lp"
    python3 - "$OUT/lm_compare-slice70.json" <<'PY'
import json, sys
for run in json.load(open(sys.argv[1])).get("runs", []):
    row = run.get("row") or {}
    est = (row.get("memory_estimate_bytes") or {}).get("total")
    print(run["impl"], "peak GiB", round((row.get("peak_memory_bytes") or 0) / 2**30, 2),
          "estimate GiB", round(est / 2**30, 2) if est else None)
PY
    ;;
  *) echo "unknown phase $phase (check | speed | bubble | slice70)"; exit 2 ;;
esac
echo "pp_acceptance $phase done after $(( $(date +%s) - started )) s"
