#!/usr/bin/env bash
# Runs N copies of a command on this host as ranks 0..N-1 of one job, with the
# environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Until `dtrain launch` lands this
# is how benchmarks and tests start multi-process jobs.
#
#   scripts/spawn-local.sh 2 -- build/src/cli/dtrain bench allreduce -b 8 -e 1M
#
# Exits with the first non-zero exit code of any rank (0 if all succeed); when
# one rank fails the others are terminated, so a failed job never hangs.
set -euo pipefail
if [[ $# -lt 3 || "$2" != "--" ]]; then
  echo "usage: $0 NPROC -- COMMAND [ARGS...]" >&2
  exit 2
fi
nproc="$1"; shift 2
if ! [[ "$nproc" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: NPROC '$nproc' is not a positive integer" >&2
  exit 2
fi
port="${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
addr="${MASTER_ADDR:-127.0.0.1}"
pids=()
for ((r = 0; r < nproc; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$nproc LOCAL_WORLD_SIZE=$nproc GROUP_RANK=0 \
    MASTER_ADDR="$addr" MASTER_PORT="$port" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$@" &
  pids+=($!)
done
rc=0
remaining=$nproc
while ((remaining > 0)); do
  done_pid=
  set +e
  wait -n -p done_pid
  status=$?
  set -e
  if [ -z "$done_pid" ]; then
    # No rank reported: none left that bash has not already reaped (127; the
    # sweep below reads their statuses), or a signal interrupted the wait.
    ((status == 127)) && break
    continue
  fi
  remaining=$((remaining - 1))
  if ((status != 0 && rc == 0)); then
    rc=$status
    echo "$0: rank with pid $done_pid exited with $status; stopping the others" >&2
    kill -TERM "${pids[@]}" 2>/dev/null || true
  fi
done
# The ranks reaped without `wait -n` naming them: their statuses by pid (127
# for those already waited for above).
for pid in "${pids[@]}"; do
  set +e
  wait "$pid" 2>/dev/null
  status=$?
  set -e
  if ((status != 0 && status != 127 && rc == 0)); then
    rc=$status
    echo "$0: rank with pid $pid exited with $status" >&2
  fi
done
exit $rc
