#!/usr/bin/env bash
# False alarms of the rendezvous keep-alive under load: three `dtrain
# launch` agents on loopback (c10d, each its own session), whose workers
# only sleep, run for DURATION seconds while the machine does whatever else
# it does (run it beside `scripts/test.sh` to load both cores). No node
# ever fails, so every re-formation or restart the agents log is a false
# alarm of the keep-alive settings under test.
#
#   bench/reliability/keepalive_false_alarms.sh DTRAIN DURATION_S [RDZV_CONF]
#     RDZV_CONF: e.g. keep_alive_interval=2,keep_alive_max_attempt=3 (default: none, the defaults)
# Prints one line: agents, seconds, keep-alive settings, false alarms, and
# the load average seen.
set -uo pipefail
dtrain=$1
duration=$2
conf=${3:-}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
T=$(mktemp -d /tmp/keepalive-alarms.XXXXXX)
pids=()
for node in 0 1 2; do
  args=(launch --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port"
        --rdzv-id "alarms$port" --max-restarts 100 --monitor-interval 0.5)
  [[ -n $conf ]] && args+=(--rdzv-conf "$conf")
  setsid "$dtrain" "${args[@]}" --no-python sleep "$((duration + 120))" > "$T/agent$node.log" 2>&1 &
  pids+=($!)
done
loads=()
for ((t = 0; t < duration; t += 30)); do
  sleep 30
  loads+=("$(cut -d' ' -f1 /proc/loadavg)")
done
for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2> /dev/null; done
sleep 5
for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2> /dev/null; done
# A false alarm: an agent forming a round after the first (generation 1 and
# on: a peer was thought lost, or its workers restarted), or saying it lost
# the store or a peer.
pattern="generation [1-9]|lost the job store|dropped|no heartbeat|stopped publishing"
alarms=$(cat "$T"/agent*.log | grep -ciE "$pattern")
max_load=$(printf '%s\n' "${loads[@]}" | sort -n | tail -n 1)
echo "agents 3, ${duration} s, rdzv-conf '${conf:-defaults}', false alarms ${alarms}, load average up to ${max_load}"
if ((alarms > 0)); then grep -iE "$pattern" "$T"/agent*.log | head -n 20; fi
rm -rf "$T"
