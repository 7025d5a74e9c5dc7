#!/usr/bin/env bash
# GPU acceptance of tensor parallelism (--tp) beside PyTorch's DTensor TP,
# in device calls of at most 10 minutes (build-gpu/ from
# bench/gpu/lm_acceptance.sh build is reused when present):
#   bench/gpu/tp_acceptance.sh check   tiny gpt2 and llama (key/value heads fewer than tp and not),
#                                      fp32: tp 2 on 2 GPUs against tp 1 on one, eager and CUDA
#                                      graphs, sequence parallelism on and off; losses side by side
#   bench/gpu/tp_acceptance.sh speed   llama-8b seq 4096, tp 2 on 2 GPUs, against the DTensor peer
#                                      (bench/peers/lm_tp_peer.py: parallelize_module with torchtitan's
#                                      plan, loss parallel, FSDP2, torch.compile per block) by
#                                      bench/lm_compare.py --parallel tp
#   bench/gpu/tp_acceptance.sh overlap llama-8b's blocks (LAYERS of them, 8), seq 4096, tp 2: --tp-overlap
#                                      0 (no overlap), 1, 2 and 4 pieces (PIECES; "2:8" also caps NCCL at
#                                      8 CTAs); CUDA graphs' step time and the eager --breakdown
#                                      (tp_comm_ms, tp_comm_exposed_ms) of each
#   bench/gpu/tp_acceptance.sh longest llama-8b, batch 1, activation checkpointing, bf16: the longest
#                                      power-of-two sequence tp 2 and ZeRO-3 over 2 GPUs train at
#                                      (LAYOUTS="tp2:65536,131072 zero3:32768,65536": each layout's
#                                      sequences, ascending), the allocator's peak beside the estimate
# Knobs: MODEL (llama-8b), SEQ (4096), BATCH (1), STEPS (10), WARMUP (5), ROUNDS (1), DTRAIN_ARGS,
# PEER_ARGS, BUDGET_S (540). Results: $OUT/<phase>.tgz.
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=${1:-check}
suite=tp-acceptance
source bench/gpu/lib.sh
machine_and_build 2

# One bench run: its loss and graph status in one line.
bench() {  # bench NAME GPUS ARGS...
  local name=$1 gpus=$2; shift 2
  "$dtrain" bench train --gpus "$gpus" "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "$name: exit $? $(grep -o '"loss":[^,]*' "$OUT/$name.json" | head -1) $(grep -o '"step_ms":[^,]*' "$OUT/$name.json" | head -1) $(grep -o '"graphs":"[^"]*"' "$OUT/$name.json" | head -1)"
}

case "$phase" in
  check)
    log "correctness: tp 2 (2 GPUs) vs tp 1 (1 GPU), fp32, the same batch"
    for family in gpt2 llama-kv1 llama-kv2; do
      tiny="--layers 4 --dim 128 --heads 4 --seq-len 128 --vocab-size 512 --batch-size 4 --precision fp32 --clip-grad-norm 1.0 --steps 6 --warmup 4"
      case $family in
        gpt2) tiny="--model gpt2 $tiny" ;;
        llama-kv1) tiny="--model llama $tiny --kv-heads 1" ;;
        llama-kv2) tiny="--model llama $tiny --kv-heads 2" ;;
      esac
      for graphs in --no-cuda-graphs ""; do
        bench "$family-tp1${graphs:+-eager}" 1 $tiny $graphs
        bench "$family-tp2${graphs:+-eager}" 2 $tiny --tp 2 $graphs
      done
      bench "$family-tp2-nosp-eager" 2 $tiny --tp 2 --no-sequence-parallel --no-cuda-graphs
    done
    log "bf16, activation checkpointing, tp 2"
    bench "gpt2-bf16-tp1" 1 --model gpt2 --layers 4 --dim 256 --heads 8 --seq-len 256 --vocab-size 1024 \
      --batch-size 4 --precision bf16 --activation-checkpointing --steps 6 --warmup 4
    bench "gpt2-bf16-tp2" 2 --model gpt2 --layers 4 --dim 256 --heads 8 --seq-len 256 --vocab-size 1024 \
      --batch-size 4 --precision bf16 --activation-checkpointing --steps 6 --warmup 4 --tp 2
    grep -h -B2 -A8 "Error\|error:" "$OUT"/*.log | head -40
    log "the DTensor peer, 2 steps (--check)"
    (cd bench/peers && timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node 2 lm_tp_peer.py \
      --check --model llama --layers 2 --dim 256 --heads 8 --kv-heads 2 --vocab-size 1024 --seq-len 256 \
      --batch-size 2 --tp 2) > "$OUT/peer-check.log" 2>&1
    echo "peer check: exit $?"; tail -5 "$OUT/peer-check.log"
    ;;
  speed)
    left=$(( ${BUDGET_S:-540} - ($(date +%s) - started) ))
    log "${MODEL:-llama-8b} seq ${SEQ:-4096}: dtrain --tp 2 vs the DTensor peer (${left} s left)"
    python3 bench/lm_compare.py --dtrain "$dtrain" --config "${MODEL:-llama-8b}" "${SEQ:-4096}" "${BATCH:-1}" 2 \
      --steps "${STEPS:-10}" --warmup "${WARMUP:-5}" --rounds "${ROUNDS:-1}" --deadline-s "$left" --parallel tp \
      --dtrain-args "--tp 2 ${DTRAIN_ARGS:-}" --peer-args "--tp 2 ${PEER_ARGS:-}" \
      --out "$OUT/lm_compare.json" 2> "$OUT/lm_compare.log" | tee "$OUT/lm_compare.md"
    grep -E "^# round|FAILED|^failed|timed out|Error" "$OUT/lm_compare.log" | tail -20
    ;;
  overlap)
    base="--model ${MODEL:-llama-8b} --layers ${LAYERS:-8} --seq-len ${SEQ:-4096} --batch-size ${BATCH:-1} --precision bf16 --tp 2 --steps ${STEPS:-10} --warmup ${WARMUP:-5}"
    for spec in ${PIECES:-0 2 1 4}; do
      pieces=${spec%%:*}; ctas=${spec#*:}; [ "$ctas" = "$spec" ] && ctas=""
      [ $(( $(date +%s) - started )) -gt "${BUDGET_S:-540}" ] && { echo "overlap $spec: skipped (budget)"; continue; }
      name=$pieces${ctas:+-ctas$ctas}
      ( [ -n "$ctas" ] && export NCCL_MAX_CTAS=$ctas NCCL_MIN_CTAS=$ctas
        bench "overlap-$name-graphs" 2 $base --tp-overlap "$pieces"
        bench "overlap-$name-eager" 2 $base --tp-overlap "$pieces" --no-cuda-graphs --breakdown )
    done
    python3 - "$OUT" <<'PY'
import glob, json, os, sys
print("| --tp-overlap | graphs step ms | eager step ms | eager tp comm ms | of it exposed ms | exposed / eager step | forward ms | backward ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
names = sorted({os.path.basename(p)[len("overlap-"):].rsplit("-", 1)[0]
                for p in glob.glob(os.path.join(sys.argv[1], "overlap-*.json"))})
for pieces in names:
    def load(kind):
        try:
            return json.load(open(os.path.join(sys.argv[1], f"overlap-{pieces}-{kind}.json")))["results"][0]
        except Exception:
            return {}
    g, e = load("graphs"), load("eager")
    if not g and not e:
        continue
    b = e.get("breakdown", {})
    step = e.get("step_ms", 0)
    exposed = b.get("tp_comm_exposed_ms", 0)
    print(f"| {pieces} | {g.get('step_ms', 0):.1f} | {step:.1f} | {b.get('tp_comm_ms', 0):.2f} | {exposed:.2f} | "
          f"{exposed / step if step else 0:.1%} | {b.get('forward_ms', 0):.1f} | {b.get('backward_ms', 0):.1f} |")
PY
    ;;
  longest)
    # The memory check is the allocator's, not the estimate's: the plan's
    # limit is lifted, and each run's peak and estimate are recorded.
    export DTRAIN_DEVICE_MEMORY_BYTES=$(( 1 << 50 ))
    base="--model ${MODEL:-llama-8b} --batch-size 1 --activation-checkpointing --precision bf16 --no-cuda-graphs --warmup 1 --steps 2"
    for spec in ${LAYOUTS:-tp2:65536,131072 zero3:32768,65536}; do
      layout=${spec%%:*}
      case $layout in tp2) flags="--tp 2" ;; zero3) flags="--shard full" ;; esac
      for seq in $(echo "${spec#*:}" | tr , ' '); do
        [ $(( $(date +%s) - started )) -gt "${BUDGET_S:-540}" ] && { echo "$layout seq $seq: skipped (budget)"; continue; }
        bench "longest-$layout-$seq" 2 $base --seq-len "$seq" $flags
        python3 - "$OUT/longest-$layout-$seq.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"][0]
except Exception:
    sys.exit(0)
est = r.get("memory_estimate_bytes", {}).get("total", 0)
peak = r.get("peak_memory_bytes", 0)
print(f"  peak {peak / 2**30:.1f} GiB, estimate {est / 2**30:.1f} GiB ({peak / est - 1:+.1%})" if est else "")
PY
        grep -q '"loss"' "$OUT/longest-$layout-$seq.json" || break
      done
    done
    ;;
  *) echo "unknown phase $phase (check | speed | overlap | longest)"; exit 2 ;;
esac
echo "tp_acceptance $phase done after $(( $(date +%s) - started )) s"
