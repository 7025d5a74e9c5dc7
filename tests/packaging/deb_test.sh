#!/usr/bin/env bash
# `cpack -G DEB` of this build, then the package installed on this machine
# with apt (which installs what its Depends line names, or refuses), the
# installed /usr/bin/dtrain run (--version, the main job for a few steps),
# and the package removed again. Needs root and apt; skipped (exit 77)
# otherwise.
#   deb_test.sh BUILD_DIR
set -uo pipefail
build=$1
if [[ $(id -u) != 0 ]] || ! command -v apt-get > /dev/null || ! command -v dpkg-shlibdeps > /dev/null; then
  echo "skipped: needs root, apt-get and dpkg-shlibdeps (dpkg-dev)"
  exit 77
fi
if dpkg-query -W -f='${Status}' dtrain 2> /dev/null | grep -q "install ok installed"; then
  echo "skipped: a dtrain package is already installed on this machine; this test installs and removes its own"
  exit 77
fi
T=$(mktemp -d /tmp/dtrain-deb-test.XXXXXX)
cleanup() {
  dpkg -r dtrain > /dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT
failures=0
pass() { echo "ok - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }
fatal() { echo "FAIL - $1"; exit 1; }

(cd "$build" && DEBFULLNAME="Jane Packager" DEBEMAIL=jane@example.org cpack -G DEB -B "$T/package") > "$T/cpack.log" 2>&1 \
  || fatal "cpack -G DEB failed:"$'\n'"$(tail -n 40 "$T/cpack.log")"
deb=$(ls "$T"/package/dtrain_*_*.deb 2> /dev/null | head -n 1)
[[ -n $deb ]] || fatal "cpack made no dtrain_<version>_<arch>.deb: $(ls "$T/package")"
pass "cpack made $(basename "$deb") ($(du -h "$deb" | cut -f1))"
echo "Depends: $(dpkg-deb -f "$deb" Depends)"
maintainer=$(dpkg-deb -f "$deb" Maintainer)
if [[ $maintainer == "Jane Packager <jane@example.org>" ]]; then pass "Maintainer is whoever built it (DEBFULLNAME, DEBEMAIL)"
else fail "Maintainer is '$maintainer', expected the builder's DEBFULLNAME <DEBEMAIL>"; fi

depends=$(dpkg-deb -f "$deb" Depends)
for lib in libtorch libc6 libstdc++6; do
  if grep -q "$lib" <<< "$depends"; then pass "Depends names $lib"; else fail "Depends lacks $lib: $depends"; fi
done
# What the package needs, it names; what it does not name, nothing but the
# on-demand NCCL backend may need.
mkdir -p "$T/x" && dpkg-deb -x "$deb" "$T/x"
for f in $(dpkg-deb -c "$deb" | awk '{print $6}' | grep -E '\.so(\.[0-9.]+)?$|/bin/dtrain$'); do
  # The NCCL backend is loaded on demand; the fused kernels only by a CUDA libtorch's runtime.
  [[ $f == *libdtrain_nccl.so* || $f == *libdtrain_kernels.so* ]] && continue
  cuda=$(readelf -d "$T/x/$f" 2> /dev/null | grep NEEDED | grep -E "libcudart|libnccl|libcuda\." || true)
  [[ -z $cuda ]] || fail "$f needs CUDA, which the package does not name: $cuda"
done
contents=$(dpkg-deb -c "$deb")
if grep -q "usr/lib/.*cmake/dtrain/dtrainConfig.cmake" <<< "$contents"; then
  pass "the package carries the CMake package"
else
  fail "no cmake/dtrain/dtrainConfig.cmake in the package"
fi

if apt-get install -y --no-install-recommends "$deb" > "$T/apt.log" 2>&1; then
  pass "apt-get installed the package and its dependencies"
else
  fatal "apt-get install of $deb failed:"$'\n'"$(tail -n 30 "$T/apt.log")"
fi
version=$(/usr/bin/dtrain --version 2>&1)
if grep -q "^dtrain " <<< "$version"; then pass "/usr/bin/dtrain --version: $(head -n 1 <<< "$version")"; else fail "/usr/bin/dtrain --version: $version"; fi
out=$(cd "$T" && /usr/bin/dtrain launch --nproc-per-node 2 --standalone /usr/bin/dtrain train --max-steps 20 --eval-every 0 2>&1)
rc=$?
if [[ $rc == 0 ]] && grep -q "accuracy" <<< "$out"; then
  pass "the installed package ran the main job (20 steps)"
else
  fail "the installed package's main job exited $rc:"$'\n'"$out"
fi
# A clean machine has no CUDA: the installed package runs with the CUDA
# toolkit (its runtime and NCCL) hidden under an empty directory, in a mount
# namespace of its own. The NCCL backend is a library loaded on demand
# (libdtrain_nccl.so), so nothing else needs them.
cuda_dir=$(readlink -f /usr/local/cuda 2> /dev/null)
if [[ -n $cuda_dir && -d $cuda_dir ]] && command -v unshare > /dev/null; then
  mkdir -p "$T/empty" "$T/clean"
  out=$(cd "$T/clean" && unshare --mount --propagation private bash -c '
      mount --bind "$1" "$2" || { echo "cannot hide $2"; exit 90; }
      echo "== version"; /usr/bin/dtrain --version || exit 91
      echo "== doctor"; /usr/bin/dtrain doctor; echo "doctor exit $?"
      echo "== main job"
      /usr/bin/dtrain launch --nproc-per-node 2 --standalone /usr/bin/dtrain train --max-steps 20 --eval-every 0 ||
        exit 92' _ "$T/empty" "$cuda_dir" 2>&1)
  rc=$?
  # (doctor's own dlopen of NVML and NCCL says "cannot open shared object file" and skips those checks.)
  if [[ $rc == 0 ]] && ! grep -q "error while loading shared libraries" <<< "$out" && grep -q "accuracy" <<< "$out" &&
     grep -q "^dtrain " <<< "$out" && grep -q "doctor exit [01]$" <<< "$out"; then
    pass "with $cuda_dir hidden: dtrain --version, dtrain doctor and the main job ran"
  else
    fail "with $cuda_dir hidden, the installed package exited $rc:"$'\n'"$out"
  fi
else
  echo "ok - (no CUDA toolkit here to hide: the machine is clean already)"
fi
if dpkg -r dtrain > "$T/remove.log" 2>&1 && [[ ! -e /usr/bin/dtrain ]]; then
  pass "dpkg -r removed the package"
else
  fail "dpkg -r dtrain: $(cat "$T/remove.log")"
fi
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
