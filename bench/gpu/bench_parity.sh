#!/usr/bin/env bash
# GPU checks of `dtrain bench`'s nccl-tests parity, in one device call:
# - all_reduce with -g 1 (one process per GPU), -g 2 (half the processes, two
#   GPUs each) and one process driving every GPU, each checked (-c 1) and its
#   first line naming nccl and the GPUs;
# - rows as they are measured: the time of the first row against the end;
# - -G 10 (CUDA graph) beside no graph, -z 1/2/3, -a 0..3;
# - under mpirun when it is installed (ranks from OMPI_COMM_WORLD_*);
# - one table beside nccl-tests' all_reduce_perf when it is installed
#   ($NCCL_TESTS_DIR/all_reduce_perf, or on PATH).
# Needs .deps/ (see docs/benchmarks.md). Logs go to $OUT/bench-parity.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=bench-parity
suite=bench-parity
source bench/gpu/lib.sh
failures=0

log "build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTRAIN_WITH_GLOO=OFF -DDTRAIN_WITH_TORCH=OFF \
  -DDTRAIN_WITH_NCCL=ON -DDTRAIN_DEPS_PREFIX="$PWD/.deps" -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_home/include" -DNCCL_LIBRARY="$nccl_home/lib/libnccl.so.2" > "$OUT/build.log" 2>&1 \
  && ninja -C build-gpu dtrain >> "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -60; tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"

# run NAME NPROC ARGS...: a checked all-reduce table of NPROC processes.
run() {
  local name=$1 nproc=$2; shift 2
  timeout 240 scripts/spawn-local.sh "$nproc" -- "$dtrain" bench allreduce --timeout 120 "$@" \
    > "$OUT/$name.txt" 2> "$OUT/$name.err"
  local rc=$? rows first bounds
  rows=$(grep -c '^ ' "$OUT/$name.txt")
  first=$(head -1 "$OUT/$name.txt")
  bounds=$(grep 'Out of bounds' "$OUT/$name.txt")
  echo "$name ($nproc processes, $*): exit $rc, $rows rows, $bounds"
  echo "    $first"
  if [[ $rc -ne 0 || $rows -eq 0 || "$bounds" != *"0 OK"* || "$first" != "# dtrain bench allreduce: nccl on "* ]]; then
    failures=$((failures + 1)); tail -5 "$OUT/$name.err"
  fi
}
sizes="-b 8 -e 256M -f 4 -n 20 -w 5 -c 1"

log "-g: GPUs per process ($ngpu GPUs)"
run g1 "$ngpu" $sizes -g 1
if ((ngpu >= 2)); then
  run g2 $((ngpu / 2)) $sizes -g 2
  run g_all 1 $sizes -g "$ngpu"
fi

log "rows as they are measured: 8 B .. 1 GiB, time of each line"
timeout 240 scripts/spawn-local.sh "$ngpu" -- "$dtrain" bench allreduce -b 8 -e 1G -f 2 -n 20 -w 5 -c 0 \
  2> "$OUT/stream.err" \
  | while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$OUT/stream.txt"
end=$EPOCHREALTIME
first_row=$(awk '$2 ~ /^[0-9]+$/ { print $1; exit }' "$OUT/stream.txt")
ahead=$(python3 -c "print(round($end - ${first_row:-$end}, 2))")
echo "first row $ahead s before the end"
python3 -c "import sys; sys.exit(0 if $ahead >= 0.5 else 1)" || { echo "the first row came only at the end"; failures=$((failures + 1)); }

log "-G 10 (CUDA graph) beside no graph, -z 1/2/3"
run graph "$ngpu" $sizes -G 10
run nograph "$ngpu" $sizes
for z in 1 2 3; do run "z$z" "$ngpu" $sizes -z "$z"; done
python3 - "$OUT/nograph.txt" "$OUT/graph.txt" <<'PY'
import sys
def rows(path):
    return {int(l.split()[0]): float(l.split()[5]) for l in open(path) if l[:1] == " " and l.split()[0].isdigit()}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
print("size        no graph (us)   -G 10 (us)")
for size in sorted(a):
    print(f"{size:>11}  {a[size]:>13.2f}  {b.get(size, float('nan')):>11.2f}")
PY

log "-a 0..3: time across ranks"
for a in 0 1 2 3; do run "a$a" "$ngpu" $sizes -a "$a"; grep 'Time across ranks' "$OUT/a$a.txt"; done

if command -v mpirun > /dev/null; then
  log "under mpirun (ranks from OMPI_COMM_WORLD_*)"
  mpirun --allow-run-as-root --oversubscribe -np "$ngpu" -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    env -u RANK -u WORLD_SIZE "$dtrain" bench allreduce $sizes > "$OUT/mpirun.txt" 2> "$OUT/mpirun.err"
  echo "mpirun: exit $?, $(grep -c '^ ' "$OUT/mpirun.txt") rows, $(grep 'Out of bounds' "$OUT/mpirun.txt")"
  head -1 "$OUT/mpirun.txt"
else
  log "mpirun not installed: skipped"
fi

nccl_tests=${NCCL_TESTS_DIR:+$NCCL_TESTS_DIR/all_reduce_perf}
nccl_tests=${nccl_tests:-$(command -v all_reduce_perf || true)}
if [[ -n "$nccl_tests" && -x "$nccl_tests" ]]; then
  log "one table beside nccl-tests ($nccl_tests), one process driving $ngpu GPUs"
  "$nccl_tests" -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 -g "$ngpu" > "$OUT/nccl_tests.txt" 2>&1
  scripts/spawn-local.sh 1 -- "$dtrain" bench allreduce -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 -g "$ngpu" \
    > "$OUT/dtrain_g_all.txt" 2>&1
  python3 - "$OUT/nccl_tests.txt" "$OUT/dtrain_g_all.txt" <<'PY'
import sys
def rows(path):
    out = {}
    for l in open(path):
        f = l.split()
        if f and f[0].isdigit() and len(f) >= 8: out[int(f[0])] = (float(f[5]), float(f[7]))
    return out
n, d = rows(sys.argv[1]), rows(sys.argv[2])
print("size        nccl-tests us  dtrain us   nccl-tests busbw  dtrain busbw  dtrain/nccl-tests busbw")
for size in sorted(n):
    if size in d:
        ratio = d[size][1] / n[size][1] if n[size][1] else float("nan")
        print(f"{size:>11}  {n[size][0]:>12.2f}  {d[size][0]:>9.2f}  {n[size][1]:>16.2f}  {d[size][1]:>12.2f}  {ratio:>8.2f}")
PY
else
  log "nccl-tests not found (set NCCL_TESTS_DIR): comparison skipped"
fi

log "done: $failures failure(s)"
exit $((failures > 0))
