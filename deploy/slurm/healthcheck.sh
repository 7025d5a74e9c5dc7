#!/bin/bash
# A Slurm HealthCheckProgram: runs `dtrain doctor --json` on this node and
# drains the node when a check fails, so that no job lands on it.
#
#   slurm.conf:  HealthCheckProgram=/opt/dtrain/deploy/slurm/healthcheck.sh
#                HealthCheckInterval=300
#                HealthCheckNodeState=IDLE   # a running job's GPU processes are not foreign
#
#   doctor exit 2 (a check FAILed)  drain, Reason="dtrain doctor: <failed checks>"
#   doctor crashed, timed out, or   drain, Reason="dtrain doctor: crashed ..." /
#   printed no valid JSON report    "... timed out ..." / "... no valid JSON ..."
#   doctor exit 0 or 1 (passes,     resume the node if this script drained it
#   warnings)                       (its Reason starts with "dtrain doctor");
#                                   a node drained by anyone else stays drained
# A node already drained for another reason keeps that reason.
#
# Settings: the environment, else /etc/default/dtrain-healthcheck (sourced
# when present; slurmd runs this script with a bare environment):
#   DTRAIN                 the dtrain binary [/usr/local/bin/dtrain]
#   DTRAIN_DOCTOR_ARGS     more `dtrain doctor` flags, split on spaces, e.g.
#                          "--expect-gpus 8" [none]
#   DTRAIN_DOCTOR_TIMEOUT  seconds before the doctor counts as hung [120]
#   DTRAIN_HEALTHCHECK_NODE  this node's Slurm name [the short host name]
#   SCONTROL               the scontrol binary [scontrol]
# Needs python3 (the JSON report is read with its json module).
# Exit status: 0 node healthy, 1 node drained (or left drained), 2 bad setup.
set -uo pipefail

config=${DTRAIN_HEALTHCHECK_CONFIG:-/etc/default/dtrain-healthcheck}
# shellcheck source=/dev/null
if [[ -r $config ]]; then source "$config"; fi
DTRAIN=${DTRAIN:-/usr/local/bin/dtrain}
DTRAIN_DOCTOR_TIMEOUT=${DTRAIN_DOCTOR_TIMEOUT:-120}
SCONTROL=${SCONTROL:-scontrol}
node=${DTRAIN_HEALTHCHECK_NODE:-$(hostname -s)}
read -r -a doctor_args <<< "${DTRAIN_DOCTOR_ARGS:-}"
readonly reason_prefix="dtrain doctor"

log() { echo "dtrain healthcheck ($node): $*" >&2; }

if ! [[ $DTRAIN_DOCTOR_TIMEOUT =~ ^[0-9]+$ ]] || ((DTRAIN_DOCTOR_TIMEOUT == 0)); then
  log "DTRAIN_DOCTOR_TIMEOUT='$DTRAIN_DOCTOR_TIMEOUT': expected a whole number of seconds > 0"
  exit 2
fi
if ! command -v python3 > /dev/null; then
  log "python3 not found: it reads the doctor's JSON report"
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-healthcheck.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

# The node's state ("IDLE+DRAIN") and drain reason, from scontrol show node.
node_state=""
node_reason=""
read_node() {
  local text
  if ! text=$("$SCONTROL" show node "$node" 2> "$work/scontrol.err"); then
    log "'$SCONTROL show node $node' failed: $(head -c 300 "$work/scontrol.err")"
    return 1
  fi
  node_state=$(sed -n 's/^[[:space:]]*State=\([^[:space:]]*\).*/\1/p' <<< "$text" | head -n 1)
  node_reason=$(sed -n 's/^[[:space:]]*Reason=//p' <<< "$text" | head -n 1)
}

drain() {
  local reason=${1:0:250}
  if read_node && [[ $node_state == *DRAIN* && -n $node_reason && $node_reason != "$reason_prefix"* ]]; then
    log "unhealthy ($reason) but already drained by someone else (Reason=$node_reason); left as it is"
    exit 1
  fi
  log "draining: $reason"
  if ! "$SCONTROL" update NodeName="$node" State=DRAIN Reason="$reason"; then
    log "'$SCONTROL update NodeName=$node State=DRAIN' failed"
  fi
  exit 1
}

resume_if_ours() {
  read_node || exit 0
  if [[ $node_state == *DRAIN* && $node_reason == "$reason_prefix"* ]]; then
    log "healthy again; resuming (was: $node_reason)"
    "$SCONTROL" update NodeName="$node" State=RESUME || log "'$SCONTROL update NodeName=$node State=RESUME' failed"
  fi
  exit 0
}

timeout --kill-after=10 "$DTRAIN_DOCTOR_TIMEOUT" "$DTRAIN" doctor --json "${doctor_args[@]}" \
  > "$work/report.json" 2> "$work/stderr"
rc=$?
first_error=$(grep -m 1 -v '^[[:space:]]*$' "$work/stderr" | head -c 120)

case $rc in
  0 | 1 | 2) ;;
  124) drain "$reason_prefix: timed out after ${DTRAIN_DOCTOR_TIMEOUT}s" ;;
  126 | 127) drain "$reason_prefix: cannot run $DTRAIN (exit $rc)" ;;
  *)
    if ((rc > 128)); then
      drain "$reason_prefix: crashed (signal $((rc - 128)))${first_error:+: $first_error}"
    fi
    drain "$reason_prefix: crashed (exit $rc)${first_error:+: $first_error}"
    ;;
esac

# "ok", "fail NAME,NAME" or "invalid WHY" from the report.
verdict=$(python3 - "$work/report.json" << 'EOF'
import json
import sys

try:
    with open(sys.argv[1]) as f:
        report = json.load(f)
    checks = report["checks"]
    if not isinstance(checks, list) or not isinstance(report["summary"], dict):
        raise TypeError("checks is not a list or summary not an object")
    failed = []
    for check in checks:
        name, status = check["name"], check["status"]
        if not isinstance(name, str) or status not in ("PASS", "WARN", "FAIL", "SKIP"):
            raise ValueError("a check without a name or with status %r" % (status,))
        if status == "FAIL":
            failed.append(name)
except (OSError, ValueError, KeyError, TypeError) as e:
    print("invalid %s" % str(e).replace("\n", " ")[:80])
    sys.exit(0)
print("fail " + ",".join(failed) if failed else "ok")
EOF
)

case $verdict in
  invalid*) drain "$reason_prefix: printed no valid JSON report (exit $rc): ${first_error:-${verdict#invalid }}" ;;
  fail*) drain "$reason_prefix: ${verdict#fail }" ;;
esac
if ((rc == 2)); then
  drain "$reason_prefix: exit 2 without a failed check${first_error:+: $first_error}"
fi
resume_if_ours
