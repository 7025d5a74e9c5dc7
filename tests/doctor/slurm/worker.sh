#!/bin/bash
# A worker of the jobs the real-Slurm test submits: says who it is, then runs
# a small Gloo all-reduce with the other ranks (DTRAIN: the dtrain binary).
# WORKER_FAIL_RANK=<r>: rank r exits 1 instead.
set -u
echo "worker rank=${RANK} local_rank=${LOCAL_RANK} world_size=${WORLD_SIZE} job=${SLURM_JOB_ID:-none}"
if [[ ${WORKER_FAIL_RANK:-} == "$RANK" ]]; then
  echo "worker rank=${RANK} failing on purpose" >&2
  exit 1
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
