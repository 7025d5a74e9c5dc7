#!/bin/bash
# Stands in for `dtrain doctor --json` in the health-check tests.
#   FAKE_DOCTOR=pass     every check passes, exit 0
#   FAKE_DOCTOR=warn     a warning, exit 0
#   FAKE_DOCTOR=fail     gpu.count and rdma.ports FAIL, exit 2
#   FAKE_DOCTOR=crash    half a report, then SIGSEGV
#   FAKE_DOCTOR=garbage  text that is not JSON, exit 0
#   FAKE_DOCTOR=hang     sleeps 60 s
#   FAKE_DOCTOR=usage    a bad-input error on stderr, exit 2
# FAKE_DOCTOR_ARGS_FILE, when set, receives the arguments.
if [[ ${1:-} != doctor ]]; then
  echo "fake dtrain: only 'doctor' is faked, got '$*'" >&2
  exit 64
fi
if [[ -n ${FAKE_DOCTOR_ARGS_FILE:-} ]]; then echo "$*" > "$FAKE_DOCTOR_ARGS_FILE"; fi

report() {  # status of gpu.count, of rdma.ports, of host.memlock; exit code
  local pass=0 warn=0 fail=0
  for s in "$1" "$2" "$3"; do
    case $s in PASS) pass=$((pass + 1)) ;; WARN) warn=$((warn + 1)) ;; FAIL) fail=$((fail + 1)) ;; esac
  done
  cat << JSON
{"host": "$(hostname)", "root": "/", "checks": [
 {"name": "gpu.count", "status": "$1", "reason": "8 GPUs", "hint": "", "detail": ""},
 {"name": "rdma.ports", "status": "$2", "reason": "mlx5_0 port 1 ACTIVE", "hint": "", "detail": ""},
 {"name": "host.memlock", "status": "$3", "reason": "unlimited", "hint": "", "detail": ""}],
 "summary": {"pass": $pass, "warn": $warn, "fail": $fail, "skip": 0}, "exit_code": $4}
JSON
  exit "$4"
}

case ${FAKE_DOCTOR:-pass} in
  pass) report PASS PASS PASS 0 ;;
  warn) report PASS PASS WARN 0 ;;
  fail) report FAIL FAIL WARN 2 ;;
  crash)
    echo '{"host": "n1", "checks": ['
    kill -SEGV $$
    ;;
  garbage)
    echo "this is not JSON"
    exit 0
    ;;
  hang) exec sleep 60 ;;
  usage)
    echo "dtrain: error: --checks 'gpu.bogus': unknown check (expected one of gpu.count, ...)" >&2
    exit 2
    ;;
  *)
    echo "fake dtrain: FAKE_DOCTOR='$FAKE_DOCTOR' is not a mode" >&2
    exit 64
    ;;
esac
