#!/bin/bash
# dtrain against a real Slurm (Debian's slurmctld, slurmd, munge): a one-node
# cluster on loopback in a temporary directory, its node line written by
# `dtrain slurm conf`; deploy/slurm/dtrain.sbatch runs a 2-rank dtrain job
# (COMPLETED, both ranks' lines in the output), a job whose rank 1 exits 1
# (FAILED), a job that is requeued after SIGUSR1, and a real `dtrain train`
# that SIGUSR1 stops with a checkpoint and that resumes at that very step
# once requeued; deploy/slurm/healthcheck.sh
# drains and resumes the real node. The daemons are stopped by the PIDs of
# their pid files on every way out.
#
#   cluster_test.sh DTRAIN_BINARY SOURCE_DIR
#
# Runs as root (slurmd must start jobs); anything missing is a failure that
# says what to install, never a skip.
set -uo pipefail

if (($# != 2)); then
  echo "usage: $0 DTRAIN_BINARY SOURCE_DIR" >&2
  exit 2
fi
DTRAIN=$(realpath "$1")
SRC=$(realpath "$2")
SBATCH_TEMPLATE=$SRC/deploy/slurm/dtrain.sbatch
HEALTHCHECK=$SRC/deploy/slurm/healthcheck.sh
WORKER=$SRC/tests/doctor/slurm/worker.sh
FAKE_DTRAIN=$SRC/tests/doctor/slurm/fake_dtrain.sh

failures=0
pass() { echo "ok - $*"; }
fail() {
  echo "FAIL - $*" >&2
  failures=$((failures + 1))
}
fatal() {
  echo "FAIL - $*" >&2
  exit 1
}

missing=()
if [[ $(id -u) -ne 0 ]]; then missing+=("root (slurmd runs the jobs; run the test as root)"); fi
for tool in munged munge slurmctld slurmd sbatch scontrol sinfo squeue scancel python3 timeout; do
  command -v "$tool" > /dev/null || missing+=("$tool")
done
if ((${#missing[@]} > 0)); then
  fatal "cannot run a real Slurm: missing ${missing[*]} (scripts/setup.sh installs slurmctld, slurmd, slurm-client, munge)"
fi

# Clear any Slurm job environment this test itself runs under.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^SLURM_')

T=$(mktemp -d /tmp/dtrain-slurm-test.XXXXXX) || fatal "mktemp failed"
chmod 755 "$T"
mkdir -p "$T/state" "$T/spool" "$T/jobs"
stepd_before=$(pgrep -x slurmstepd | sort)
watchdog_pid=""

stop_pidfile() {  # name: TERM, wait up to 15 s, then KILL
  local file=$T/$1.pid pid
  [[ -s $file ]] || return 0
  pid=$(< "$file")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  kill -TERM "$pid" 2> /dev/null || return 0
  for _ in $(seq 150); do
    kill -0 "$pid" 2> /dev/null || return 0
    sleep 0.1
  done
  echo "cluster_test: $1 (pid $pid) ignored SIGTERM; killing it" >&2
  kill -KILL "$pid" 2> /dev/null
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $watchdog_pid ]]; then
    kill "$watchdog_pid" 2> /dev/null
    stop_pidfile watchdog-sleep
  fi
  if [[ -s $T/slurmctld.pid ]]; then
    scancel --quiet --user=root 2> /dev/null
    for _ in $(seq 100); do
      [[ -z $(squeue -h 2> /dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_pidfile slurmd
  stop_pidfile slurmctld
  stop_pidfile munged
  # A job step daemon this test started and that outlived slurmd.
  for pid in $(comm -13 <(echo "$stepd_before") <(pgrep -x slurmstepd | sort)); do
    echo "cluster_test: stopping leftover slurmstepd $pid" >&2
    kill -KILL "$pid" 2> /dev/null
  done
  if ((rc != 0 || failures != 0)); then
    for log in slurmctld.log slurmd.log munged.log; do
      echo "---- last lines of $log" >&2
      tail -n 25 "$T/$log" >&2 2> /dev/null
    done
  fi
  if [[ -z ${KEEP_SLURM_TEST_DIR:-} ]]; then rm -rf "$T"; else echo "cluster_test: kept $T" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "cluster_test: interrupted" >&2; exit 130' INT TERM
# The whole test ends within 420 s even if Slurm hangs, so cleanup runs
# before ctest's own limit would kill it without one.
(
  sleep 420 &
  echo $! > "$T/watchdog-sleep.pid"
  wait
  echo "cluster_test: 420 s watchdog fired" >&2
  kill -TERM $$
) &
watchdog_pid=$!

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.5 s.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if ((SECONDS >= deadline)); then return 1; fi
    sleep 0.5
  done
  echo "cluster_test: $what after $((SECONDS + limit - deadline)) s"
}

# --- munge with its own key, socket, pid and log files
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge.key"
munged --force --key-file="$T/munge.key" --socket="$T/munge.socket" --pid-file="$T/munged.pid" \
  --log-file="$T/munged.log" --seed-file="$T/munged.seed" || fatal "munged did not start (see $T/munged.log)"
wait_until 10 "munged answers" munge -S "$T/munge.socket" -n -o /dev/null ||
  fatal "munged does not answer on $T/munge.socket"

# --- slurm.conf: the node line from `dtrain slurm conf`
node_line=$("$DTRAIN" slurm conf --only node --no-gpus) || fatal "dtrain slurm conf failed: $node_line"
node=$(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' <<< "$node_line")
[[ -n $node ]] || fatal "dtrain slurm conf printed no NodeName: '$node_line'"
ctld_port=$(free_port)
slurmd_port=$(free_port)
cat > "$T/slurm.conf" << EOF
ClusterName=dtraintest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge.socket
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MinJobAge=600
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$T/slurm.conf

slurmctld -f "$SLURM_CONF" -c || fatal "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fatal "slurmd did not start"
node_idle() { [[ $(sinfo -h -n "$node" -o %T 2> /dev/null) == idle ]]; }
wait_until 90 "node $node idle" node_idle || fatal "node $node is not idle after 90 s: $(sinfo 2>&1)"
pass "slurmctld and slurmd up, node $node idle ($node_line)"

job_field() {  # job_field JOBID FIELD: the value of FIELD= in scontrol show job
  scontrol show job "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
job_done() {
  local state
  state=$(job_field "$1" JobState)
  [[ -n $state && $state != PENDING && $state != RUNNING && $state != CONFIGURING && $state != COMPLETING ]]
}

# submit NAME [VAR=VALUE...]: the template for 1 node x 2 CPU ranks; prints the job id.
# --time=30: the template asks for SIGUSR1 300 s before the time limit
# (--signal=B:USR1@300); a job whose limit is under 300 s gets that warning at
# slurmctld's next periodic check, whenever it falls. A requeued run got it
# mid-training so, and was requeued a second time (a CI run failed so).
submit() {
  local name=$1
  shift
  env "$@" DTRAIN="$DTRAIN" DTRAIN_NPROC_PER_NODE=2 DTRAIN_RDZV_PORT="$(free_port)" DTRAIN_MAX_RESTARTS=0 \
    DTRAIN_LAUNCH_ARGS=--no-python \
    sbatch --parsable --job-name="$name" --nodes=1 --gpus-per-node=0 --time=30 --chdir="$T/jobs" \
    --output="$T/jobs/$name-%j.out" "$SBATCH_TEMPLATE" "$WORKER"
}

expect_line() {  # expect_line FILE TEXT WHAT
  if grep -qF -- "$2" "$1"; then pass "$3"; else fail "$3: no line '$2' in $1:"$'\n'"$(cat "$1")"; fi
}

# --- a 2-rank job that completes
job=$(submit allreduce) || fatal "sbatch failed: $job"
wait_until 120 "job $job finished" job_done "$job" || fail "job $job not finished after 120 s"
out=$T/jobs/allreduce-$job.out
state=$(job_field "$job" JobState)
exit_code=$(job_field "$job" ExitCode)
if [[ $state == COMPLETED && $exit_code == 0:0 ]]; then
  pass "job $job COMPLETED with ExitCode=0:0"
else
  fail "job $job: JobState=$state ExitCode=$exit_code, expected COMPLETED 0:0; output:"$'\n'"$(cat "$out")"
fi
expect_line "$out" "[$node:0]: worker rank=0 local_rank=0 world_size=2 job=$job" "rank 0 ran under job $job"
expect_line "$out" "[$node:1]: worker rank=1 local_rank=1 world_size=2 job=$job" "rank 1 ran under job $job"
expect_line "$out" "[$node:0]: # Out of bounds values : 0 OK" "the all-reduce across both ranks checked clean"
expect_line "$out" "rendezvous $node:" "the rendezvous is on the job's first node"
expect_line "$out" "dtrain.sbatch: job $job step exited with 0" "the step exited 0"

# --- a job whose rank 1 exits 1
job=$(submit failing WORKER_FAIL_RANK=1) || fatal "sbatch failed: $job"
wait_until 120 "job $job finished" job_done "$job" || fail "job $job not finished after 120 s"
out=$T/jobs/failing-$job.out
state=$(job_field "$job" JobState)
exit_code=$(job_field "$job" ExitCode)
if [[ $state == FAILED && $exit_code == 1:0 ]]; then
  pass "job $job with a failing rank is FAILED with ExitCode=1:0"
else
  fail "job $job: JobState=$state ExitCode=$exit_code, expected FAILED 1:0; output:"$'\n'"$(cat "$out")"
fi
expect_line "$out" "rank      : 1 (local_rank: 1)" "the root cause names rank 1"
expect_line "$out" "worker rank=1 failing on purpose" "the root cause shows rank 1's stderr"

# --- the time-limit warning (SIGUSR1 to the batch script) stops the workers and requeues
job=$(submit requeue WORKER_SLEEP=300) || fatal "sbatch failed: $job"
out=$T/jobs/requeue-$job.out
workers_up() { [[ $(grep -c "worker rank=" "$out" 2> /dev/null) -ge 2 ]]; }
if wait_until 120 "job $job workers running" workers_up; then
  scancel --signal=USR1 --batch "$job"
  requeued() { [[ $(job_field "$job" Restarts) == 1 ]]; }
  if wait_until 60 "job $job requeued" requeued; then
    pass "job $job requeued after SIGUSR1 (Restarts=1, JobState=$(job_field "$job" JobState))"
  else
    fail "job $job not requeued 60 s after SIGUSR1: $(scontrol show job "$job")"$'\n'"$(cat "$out")"
  fi
  expect_line "$out" "dtrain.sbatch: SIGUSR1 received; stopping the workers" "the batch script caught SIGUSR1"
  expect_line "$out" "received SIGUSR1; forwarding it to the workers" "srun passed SIGUSR1 to dtrain launch"
  expect_line "$out" "dtrain.sbatch: requeueing job $job after SIGUSR1" "the batch script requeued the job"
else
  fail "job $job workers did not start within 120 s:"$'\n'"$(cat "$out" 2> /dev/null)"
fi
scancel "$job"
gone() { job_done "$job"; }
wait_until 60 "job $job cancelled" gone || fail "job $job still active 60 s after scancel"

# --- preemption of a real training run: SIGUSR1 stops every rank after one
# step with a checkpoint (exit 75); the requeued job resumes from exactly
# that step and completes.
job=$(submit preempt WORKER_TRAIN="$T/jobs/preempt-ckpt") || fatal "sbatch failed: $job"
out=$T/jobs/preempt-$job.out
training() { grep -q "step [1-9][0-9]*0/600" "$out" 2> /dev/null; }
if wait_until 120 "job $job training" training; then
  scancel --signal=USR1 --batch "$job"
  # Slurm holds a requeued job back (BeginTime) for a while; let it start now.
  # Restarts is 1 as soon as `scontrol requeue` runs, while the first run is
  # still ending (its JobState reads FAILED for a moment, as the batch script
  # exits with the step's code): wait for PENDING, then for the second run.
  # The hold exists because slurmd revokes the first run's credential when it
  # ends, and a credential made in the same second is revoked with it: a
  # restart in that second fails at once (FAILED, ExitCode=1:0, no output).
  # Start it 2 s after the first run has left the node instead.
  requeued() { [[ $(job_field "$job" Restarts) == 1 && $(job_field "$job" JobState) == PENDING ]]; }
  if wait_until 60 "job $job requeued" requeued; then
    wait_until 60 "node $node idle after job $job" node_idle
    sleep 2
    scontrol update JobId="$job" StartTime=now
  fi
  restarted() { grep -q "job $job (restart 1)" "$out" 2> /dev/null; }
  wait_until 120 "job $job restarted" restarted || fail "job $job did not start again 120 s after its requeue: $(scontrol show job "$job")"
  wait_until 120 "job $job finished after its requeue" job_done "$job" || fail "job $job not finished 120 s after its requeue"
  state=$(job_field "$job" JobState)
  stopped=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of 600; checkpoint of step \1 written.*/\1/p' "$out" | head -n 1)
  if [[ -n $stopped ]]; then
    pass "job $job stopped after step $stopped with a checkpoint of it"
  else
    fail "job $job: no 'stopped by SIGUSR1 after step N of 600; checkpoint of step N written' line:"$'\n'"$(cat "$out")"
  fi
  expect_line "$out" "dtrain.sbatch: requeueing job $job after SIGUSR1" "the batch script requeued the job"
  signals=$(grep -c "dtrain.sbatch: SIGUSR1 received" "$out")
  if ((signals == 1)); then
    pass "job $job got SIGUSR1 once, the test's"
  else
    fail "job $job got SIGUSR1 $signals times; only the test sends one (a time-limit warning?)"
  fi
  if [[ -n $stopped ]]; then
    expect_line "$out" "resumed at step $stopped" "the requeued job resumed at step $stopped: no step lost"
  fi
  expect_line "$out" "600 steps," "the requeued job trained to the end"
  if [[ $state == COMPLETED && $(job_field "$job" Restarts) == 1 ]]; then
    pass "job $job COMPLETED after one requeue"
  else
    fail "job $job: JobState=$state Restarts=$(job_field "$job" Restarts), expected COMPLETED after 1:"$'\n'"$(cat "$out")"
  fi
else
  fail "job $job did not start training within 120 s:"$'\n'"$(cat "$out" 2> /dev/null)"
fi
scancel "$job" 2> /dev/null

# --- the health check drains and resumes the real node
healthcheck() {  # healthcheck MODE: runs healthcheck.sh with the fake doctor
  env DTRAIN="$FAKE_DTRAIN" FAKE_DOCTOR="$1" DTRAIN_HEALTHCHECK_NODE="$node" DTRAIN_HEALTHCHECK_CONFIG=/nonexistent \
    DTRAIN_DOCTOR_TIMEOUT=20 "$HEALTHCHECK" > "$T/healthcheck.log" 2>&1
}
node_field() { scontrol show node "$node" | sed -n "s/^[[:space:]]*$1=//p" | head -n 1; }
healthcheck fail
hc_rc=$?
node_state=$(sinfo -h -n "$node" -o %T)
if [[ $hc_rc == 1 && $(node_field Reason) == "dtrain doctor: gpu.count,rdma.ports ["* && ${node_state%\*} == drained ]]; then
  pass "a failing doctor drains $node (Reason=$(node_field Reason))"
else
  fail "after a failing doctor: exit $hc_rc, state $node_state, Reason=$(node_field Reason); $(cat "$T/healthcheck.log")"
fi
healthcheck pass
hc_rc=$?
# A resumed node reads "idle*" (not responding) until slurmctld's next ping.
if [[ $hc_rc == 0 ]] && wait_until 30 "node $node idle again" node_idle; then
  pass "a passing doctor resumes the node it drained"
else
  fail "after a passing doctor: exit $hc_rc, state $(sinfo -h -n "$node" -o %T); $(cat "$T/healthcheck.log")"
fi
scontrol update NodeName="$node" State=DRAIN Reason="disk replacement"
healthcheck pass
node_state=$(sinfo -h -n "$node" -o %T)
if [[ ${node_state%\*} == drained && $(node_field Reason) == "disk replacement ["* ]]; then
  pass "a passing doctor leaves a node drained by someone else drained"
else
  fail "an admin's drain was undone: state $node_state, Reason=$(node_field Reason)"
fi
scontrol update NodeName="$node" State=RESUME

if ((failures > 0)); then
  echo "cluster_test: $failures failure(s)" >&2
  exit 1
fi
echo "cluster_test: all passed"
