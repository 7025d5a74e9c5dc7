#!/bin/bash
# A worker of the jobs the real-Slurm test submits: says who it is, then runs
# a small Gloo all-reduce with the other ranks (DTRAIN: the dtrain binary).
# WORKER_FAIL_RANK=<r>: rank r exits 1 instead; WORKER_SLEEP=<s>: sleeps
# until a signal; WORKER_TRAIN=<dir>: `dtrain train` checkpointing into dir.
set -u
echo "worker rank=${RANK} local_rank=${LOCAL_RANK} world_size=${WORLD_SIZE} job=${SLURM_JOB_ID:-none}"
if [[ ${WORKER_FAIL_RANK:-} == "$RANK" ]]; then
  echo "worker rank=${RANK} failing on purpose" >&2
  exit 1
fi
if [[ -n ${WORKER_TRAIN:-} ]]; then
  # A real training run (a tiny GPT on the embedded corpus) that checkpoints
  # into WORKER_TRAIN and resumes from it when the job runs again.
  exec "$DTRAIN" train --model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text \
    --tokenizer byte --batch-size 4 --seed 5 --max-steps "${WORKER_TRAIN_STEPS:-600}" --progress lines \
    --log-every 10 --checkpoint-every 100000 --resume auto --checkpoint-dir "$WORKER_TRAIN" \
    --cache-dir "$WORKER_TRAIN.corpus"
fi
if [[ -n ${WORKER_SLEEP:-} ]]; then
  # Stands in for a long training run: stopped by a signal.
  trap 'echo "worker rank=${RANK} got SIGUSR1"; exit 0' USR1
  trap 'echo "worker rank=${RANK} got SIGTERM"; exit 0' TERM
  sleep "$WORKER_SLEEP" &
  wait
  exit 0
fi
exec "$DTRAIN" bench allreduce --backend gloo --timeout 60 -b 8 -e 4K -f 8 -n 2 -w 1 -c 1
