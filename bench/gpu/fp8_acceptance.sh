#!/usr/bin/env bash
# GPU acceptance of --precision fp8, in device calls of at most 10 minutes
# (build-gpu/ from bench/gpu/lm_acceptance.sh build is reused when present):
#   bench/gpu/fp8_acceptance.sh check     models_test's Fp8* tests (the product, its gradients, zeros,
#                                         saturation, NaN, a model's loss against bf16); parallel_test's
#                                         gradients written in place, when built (BUILD_TESTS); a tiny llama and
#                                         gpt2 on 2 GPUs, fp8 beside bf16, losses side by side
#   bench/gpu/fp8_acceptance.sh converge  gpt2-124m on the embedded text, the same data order, fp8 and bf16:
#                                         STEPS_CONVERGE (1000) steps each, validation losses side by side
#                                         (goal: fp8 within 1% of bf16, no non-finite loss); CONVERGE_PRECISIONS
#                                         adds fp8:rowwise; the documented runs train on linux-doc
#                                         (bench/fp8_converge_prepare.sh, DTRAIN_ARGS="--data-dir .deps/text-gpt2")
#   bench/gpu/fp8_acceptance.sh throughput  dtrain bench train on 1 GPU, THROUGHPUT_PRECISIONS (bf16 fp8;
#                                         fp8:measured turns noted maxima off, fp8:rowwise is
#                                         --fp8-recipe rowwise) for THROUGHPUT_CONFIGS
#                                         (lines "model seq batch [extra flags]"; default gpt2-124m 1024 16,
#                                         llama-1b 2048 4, llama-8b 2048 2 --layers 8)
#   bench/gpu/fp8_acceptance.sh profile   Nsight Compute's duration of every kernel of one eager step of
#                                         PROFILE_MODEL (llama-8b --layers 2), fp8 then bf16, summed by kernel
#   bench/gpu/fp8_acceptance.sh speed     llama-8b seq 2048 --shard full on GPUS (2): dtrain bf16 and fp8
#                                         beside the FSDP2 peer in bf16 and with --float8
#                                         (bench/lm_compare.py --precision bf16, then fp8)
# Knobs: CONVERGE_MODEL (gpt2-124m), CONVERGE_SEQ (1024), CONVERGE_BATCH (16), CONVERGE_LR (6e-4),
# CONVERGE_GOAL (1.01: llama-1b's is 1.015), GPUS (2), LLAMA_BATCH (2), STEPS (20), WARMUP (8), ROUNDS (1), DTRAIN_ARGS, PEER_ARGS,
# BUDGET_S (540). Results: $OUT/<phase>.tgz.
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/../.." || exit 1
phase=${1:-check}
suite=fp8-acceptance
source bench/gpu/lib.sh
gpus=${GPUS:-2}
machine_and_build "$gpus"
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - started) )); }

tiny_pair() {  # family: fp8 and bf16 on $gpus GPUs, the losses
  local tiny="--model $1 --layers 4 --dim 256 --heads 4 --seq-len 256 --vocab-size 1024 --batch-size 8"
  [ "$1" = llama ] && tiny+=" --kv-heads 2 --ffn-dim 512"
  for run in bf16 fp8 fp8:rowwise; do
    local precision=${run%%:*} recipe="" name=${run/:/-}
    [ "$run" = fp8:rowwise ] && recipe="--fp8-recipe rowwise"
    "$dtrain" bench train --gpus "$gpus" $tiny --precision $precision $recipe --steps 10 --warmup 4 --json \
      > "$OUT/tiny-$1-$name.json" 2> "$OUT/tiny-$1-$name.log"
    echo "$1 $run: exit $? $(grep -o '"loss":[^,]*' "$OUT/tiny-$1-$name.json" | head -1)" \
      "$(grep -o '"tokens_per_s":[^,]*' "$OUT/tiny-$1-$name.json" | head -1)"
  done
}

case "$phase" in
  check)
    log "models_test Fp8*"
    timeout 120 build-gpu/tests/models/models_test --gtest_brief=1 --gtest_filter='Fp8*' > "$OUT/fp8_test.log" 2>&1
    echo "fp8 tests exit $?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Skipped" -A3 "$OUT/fp8_test.log" | head -40
    # The maxima the optimizer's step keeps (the weights' casts read them).
    for t in kernels_test:'AdamW*' optim_test:'AbsoluteMaxima*:FusedAdamW*'; do
      bin=$(find build-gpu/tests -name "${t%%:*}" -type f | head -1)
      [ -x "$bin" ] || { echo "${t%%:*} not built"; continue; }
      timeout 120 "$bin" --gtest_brief=1 --gtest_filter="${t#*:}" > "$OUT/${t%%:*}.log" 2>&1
      echo "${t%%:*} ${t#*:} exit $?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" -A3 "$OUT/${t%%:*}.log" | head -20
    done
    if [ -x build-gpu/tests/parallel/parallel_test ]; then
      # Gradients written over stale ones (zeroGrad(true)) and by a kernel
      # itself, on CUDA over NCCL under this libtorch (the build has no Gloo).
      log "parallel_test: gradients written in place"
      timeout 120 build-gpu/tests/parallel/parallel_test --gtest_brief=1 \
        --gtest_filter='DataParallelTest.ZeroGradSetToNone*:DataParallelTest.AKernelWrites*' > "$OUT/grad_write_test.log" 2>&1
      echo "parallel tests exit $?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" -A3 "$OUT/grad_write_test.log" | head -30
    fi
    log "tiny models, fp8 beside bf16"
    for family in llama gpt2; do tiny_pair "$family"; done
    grep -h -B2 -A8 "Error\|error:" "$OUT"/tiny-*.log | head -30
    ;;
  converge)
    steps=${STEPS_CONVERGE:-1000} model=${CONVERGE_MODEL:-gpt2-124m}
    runs=${CONVERGE_PRECISIONS:-bf16 fp8}  # fp8:rowwise: --fp8-recipe rowwise
    for run in $runs; do
      precision=${run%%:*} recipe="" name=${run/:/-}
      [ "$run" = fp8:rowwise ] && recipe="--fp8-recipe rowwise"
      log "$model $run, $steps steps ($(left) s left)"
      "$dtrain" launch --nproc-per-node "$gpus" "$dtrain" train --model "$model" --dataset text \
        --seq-len "${CONVERGE_SEQ:-1024}" --batch-size "${CONVERGE_BATCH:-16}" --optimizer adamw --lr "${CONVERGE_LR:-6e-4}" \
        --warmup 0.02 --schedule cosine --clip-grad-norm 1.0 --seed 7 \
        --precision $precision $recipe --max-steps "$steps" --eval-batches 20 --log-every 20 --progress lines \
        --metrics-jsonl "$OUT/converge-$model-$name.jsonl" ${DTRAIN_ARGS:-} > "$OUT/converge-$model-$name.txt" 2>&1
      echo "exit $?"; grep -E "val loss|nan|inf" "$OUT/converge-$model-$name.txt" | tail -3
    done
    python3 - "$OUT" "$model" "${CONVERGE_GOAL:-1.01}" ${runs//:/-} <<'EOF'
import json, math, sys
out, model, goal, runs = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
val = {}
for precision in runs:
    steps = []
    for line in open(f"{out}/converge-{model}-{precision}.jsonl"):
        r = json.loads(line)
        if r.get("event") == "step":
            steps.append(r["loss"])
        if r.get("event") == "summary":
            val[precision] = r.get("val_loss")
    bad = sum(1 for x in steps if not math.isfinite(x))
    print(f"{precision}: {len(steps)} step records, {bad} non-finite, val loss {val.get(precision)}")
for run in runs:
    if run != "bf16" and val.get("bf16") and val.get(run):
        print(f"{model} {run} / bf16 validation loss: {val[run] / val['bf16']:.4f} (goal <= {goal})")
EOF
    ;;
  speed)
    for precision in ${SPEED_PRECISIONS:-bf16 fp8}; do
      log "llama-8b seq 2048, --shard full, $precision ($(left) s left)"
      python3 bench/lm_compare.py --dtrain "$dtrain" --config llama-8b 2048 "${LLAMA_BATCH:-2}" "$gpus" \
        --steps "${STEPS:-20}" --warmup "${WARMUP:-8}" --rounds "${ROUNDS:-1}" --deadline-s "$(left)" \
        --parallel fsdp2 --precision $precision --dtrain-args "--shard full ${DTRAIN_ARGS:-}" \
        --peer-args "${PEER_ARGS:-}" --out "$OUT/lm_compare-$precision.json" 2> "$OUT/lm_compare-$precision.log" \
        | tee "$OUT/lm_compare-$precision.md"
      grep -E "FAILED|^failed|timed out|Error|note" "$OUT/lm_compare-$precision.log" | tail -10
    done
    ;;
  throughput)
    # dtrain alone, bf16 then fp8 on one GPU, each shape back to back.
    # THROUGHPUT_PRECISIONS: bf16, fp8, fp8:measured (fp8 with
    # DTRAIN_FP8_NOTED_MAXIMA=0: every cast measures its own maximum) and
    # fp8:rowwise (--fp8-recipe rowwise).
    while read -r model seq batch extra; do
      for run in ${THROUGHPUT_PRECISIONS:-bf16 fp8}; do
        precision=${run%%:*} noted=1 recipe=""
        [ "$run" = fp8:measured ] && noted=0
        [ "$run" = fp8:rowwise ] && recipe="--fp8-recipe rowwise"
        [ "$(left)" -lt 40 ] && { echo "out of time before $model $run"; break 2; }
        DTRAIN_FP8_NOTED_MAXIMA=$noted "$dtrain" bench train --gpus 1 --model "$model" $extra --seq-len "$seq" \
          --batch-size "$batch" --precision $precision $recipe --steps "${STEPS:-20}" --warmup "${WARMUP:-8}" --json \
          ${DTRAIN_ARGS:-} > "$OUT/tp-$model$extra-${run/:/-}.json" 2> "$OUT/tp-$model$extra-${run/:/-}.log"
        echo "$model $extra seq $seq batch $batch $run: exit $?" \
          "$(grep -oE '"(tokens_per_s|mfu|peak_memory_bytes|fp8_flops_share|step_ms)":[^,}]*' "$OUT/tp-$model$extra-${run/:/-}.json" | tr '\n' ' ')"
      done
    done <<< "${THROUGHPUT_CONFIGS:-gpt2-124m 1024 16
llama-1b 2048 4
llama-8b 2048 2 --layers 8}"
    ;;
  profile)
    # Every kernel of one eager step under Nsight Compute (its duration
    # only), bf16 and fp8: where FP8's time goes (bench/gpu/kernel_table.py).
    for precision in ${PROFILE_PRECISIONS:-fp8 bf16}; do
      [ "$(left)" -lt 40 ] && { echo "out of time before the $precision profile"; break; }
      log "ncu: ${PROFILE_MODEL:-llama-8b --layers 2} $precision ($(left) s left)"
      RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29613 \
        timeout "$(left)" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --page raw --log-file "$OUT/ncu-$precision.log" "$dtrain" bench train --model ${PROFILE_MODEL:-llama-8b --layers 2} \
        --seq-len 2048 --batch-size 2 --precision $precision --no-cuda-graphs --steps 1 --warmup 1 \
        > "$OUT/kernels-$precision.csv" 2> "$OUT/ncu-$precision.err"
      echo "ncu exit $?"
      python3 bench/gpu/kernel_table.py "$OUT/kernels-$precision.csv" "$OUT/ncu-$precision.log" --top 25 2>&1 \
        | tee "$OUT/kernel-table-$precision.txt" | head -45
    done
    ;;
  *) echo "unknown phase $phase (check | converge | speed | throughput | profile)"; exit 2 ;;
esac
echo "fp8_acceptance $phase done after $(( $(date +%s) - started )) s"
