#!/usr/bin/env bash
# Runs `dtrain bench store` and bench/peers/torch_store.py (PyTorch's TCPStore)
# with the same parameters and prints them side by side with dtrain/torch
# ratios.
#
#   bench/store_compare.sh [--clients N] [--ops N] [--barriers N] [--timeout S]
#
# DTRAIN_BIN  the dtrain binary (default: the newest build*/src/cli/dtrain)
# PYTHON      a Python with torch (default: /usr/bin/python3, Debian's python3-torch)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
python=${PYTHON:-/usr/bin/python3}
dtrain=${DTRAIN_BIN:-$(ls -t "$repo"/build*/src/cli/dtrain 2>/dev/null | head -n 1 || true)}
if [[ -z $dtrain || ! -x $dtrain ]]; then
  echo "store_compare.sh: no dtrain binary found; build it or set DTRAIN_BIN" >&2
  exit 2
fi

for arg in "$@"; do
  case $arg in
    --host* | --port* | --json)
      echo "store_compare.sh: $arg is not supported; both sides start their own server" >&2
      exit 2 ;;
  esac
done

dtrain_json=$("$dtrain" bench store --json "$@")
torch_json=$("$python" "$here/peers/torch_store.py" --json "$@")

"$python" - "$dtrain_json" "$torch_json" <<'PY'
import json
import sys

d, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"store benchmark: {d['clients']} clients x {d['ops_per_client']} rounds of set+get+add, "
      f"{d['barriers']} barriers; each side starts its own server on 127.0.0.1\n")
rows = [
    ("throughput (ops/s)", "ops_per_s", "{:.0f}"),
    ("elapsed (s)", "elapsed_s", "{:.3f}"),
    ("op mean (us)", "op_mean_us", "{:.1f}"),
    ("set mean (us)", "set_mean_us", "{:.1f}"),
    ("get mean (us)", "get_mean_us", "{:.1f}"),
    ("add mean (us)", "add_mean_us", "{:.1f}"),
    ("barrier mean (ms)", "barrier_mean_ms", "{:.2f}"),
    ("barrier max (ms)", "barrier_max_ms", "{:.2f}"),
]
print(f"  {'metric':<20} {'dtrain':>12} {'torch':>12} {'dtrain/torch':>13}")
for label, key, fmt in rows:
    ratio = d[key] / t[key] if t[key] else float("nan")
    print(f"  {label:<20} {fmt.format(d[key]):>12} {fmt.format(t[key]):>12} {ratio:>12.2f}x")
print("\n  throughput: higher is better; times: lower is better")
PY
