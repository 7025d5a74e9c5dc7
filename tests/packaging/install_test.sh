#!/usr/bin/env bash
# `cmake --install` of this build into a scratch prefix, then, from outside
# the source tree: examples/ configured with find_package(dtrain) and built
# against the installed tree, run under the installed `dtrain launch`; the
# installed headers include only each other and system/libtorch headers;
# the installed `dtrain --version` names this checkout's revision; the
# installed `dtrain train` (the main job, a few steps) runs its own runtime.
#   install_test.sh BUILD_DIR SOURCE_DIR [TORCH_DIR]
set -uo pipefail
build=$1 source=$2 torch_dir=${3:-}
T=$(mktemp -d /tmp/dtrain-install-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
pass() { echo "ok - $1"; }
fail() { echo "FAIL - $1"; failures=$((failures + 1)); }
fatal() { echo "FAIL - $1"; exit 1; }

prefix=$T/prefix
cmake --install "$build" --prefix "$prefix" > "$T/install.log" 2>&1 || fatal "cmake --install failed: $(cat "$T/install.log")"
[[ -x $prefix/bin/dtrain ]] || fatal "no $prefix/bin/dtrain after cmake --install"
pass "cmake --install put the binary, $(find "$prefix/lib" -name 'libdtrain_*.so.*.*.*' -type f | wc -l) libraries and $(ls "$prefix/include/dtrain" | wc -l) headers under the prefix"
# Versioned SONAMEs: every installed library names its major.minor version.
for lib in $(find "$prefix/lib" -name 'libdtrain_*.so.*.*.*' -type f); do
  soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ $soname =~ ^libdtrain_[a-z_]+\.so\.[0-9]+\.[0-9]+$ ]] || fail "$lib has SONAME '$soname', expected libdtrain_<name>.so.<major>.<minor>"
done

# The public headers name no private header.
private=$(grep -Hn '#include "' "$prefix"/include/dtrain/*.h | grep -v '#include "dtrain/')
if [[ -z $private ]]; then pass "the installed headers include only dtrain/ headers"; else fail "private includes in installed headers:"$'\n'"$private"; fi

# --version: the revision of this checkout.
version=$("$prefix/bin/dtrain" --version 2>&1) || fail "dtrain --version exited $?: $version"
if git -C "$source" rev-parse HEAD > /dev/null 2>&1; then
  rev=$(git -C "$source" rev-parse --short=12 HEAD)
  if grep -q "^dtrain [0-9.]* (git $rev" <<< "$version"; then pass "dtrain --version names revision $rev"; else fail "dtrain --version does not name $rev: $version"; fi
else
  pass "dtrain --version (no git checkout): $version"
fi

# examples/ as a project of its own, against the installed package.
args=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g0)
[[ -n $torch_dir ]] && args+=(-DTorch_DIR="$torch_dir")
cp -r "$source/examples" "$T/examples"
# A consumer without CUDA: configured and built with the CUDA toolkit hidden
# (an empty directory mounted over it in a mount namespace of its own), as on
# a machine that never had it (with a CPU libtorch; root only).
hide=()
cuda_dir=$(readlink -f /usr/local/cuda 2> /dev/null)
if [[ $(id -u) == 0 && -n $cuda_dir && -d $cuda_dir ]] && command -v unshare > /dev/null &&
   ! grep -qs "c10_cuda" "$build/CMakeCache.txt"; then
  mkdir -p "$T/empty"
  hide=(unshare --mount --propagation private bash -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' _ "$T/empty" "$cuda_dir")
fi
if "${hide[@]}" cmake -S "$T/examples" -B "$T/examples-build" -G Ninja "${args[@]}" > "$T/configure.log" 2>&1 &&
   "${hide[@]}" cmake --build "$T/examples-build" > "$T/build.log" 2>&1; then
  pass "examples/ configured with find_package(dtrain) and built against the installed tree${hide:+ with $cuda_dir hidden}"
else
  fatal "examples/ did not build against the installed tree:"$'\n'"$(tail -n 40 "$T/configure.log" "$T/build.log" 2> /dev/null)"
fi
# ldd's whole output first: `ldd | grep -q` under pipefail fails when grep
# stops reading at its match and ldd dies of SIGPIPE.
libs=$(ldd "$T/examples-build/custom_loop" 2>&1)
if grep -qE "libdtrain_train\.so\.[0-9]+\.[0-9]+ => $prefix/" <<< "$libs"; then
  pass "custom_loop loads libdtrain_train.so from the installed tree"
else
  fail "custom_loop does not load the installed libdtrain_train.so: $(grep dtrain <<< "$libs")"
fi
out=$(cd "$T" && "$prefix/bin/dtrain" launch --nproc-per-node 2 --standalone "$T/examples-build/custom_loop" 40 2>&1)
rc=$?
if [[ $rc == 0 ]] && grep -q "steps 40, loss .* (mean of the last over 2 ranks" <<< "$out"; then
  pass "custom_loop trained 40 steps on 2 ranks under the installed dtrain launch"
else
  fail "custom_loop under the installed dtrain launch exited $rc:"$'\n'"$out"
fi

# The main job from the installed binary, its runtime loaded from the prefix.
out=$(cd "$T" && "$prefix/bin/dtrain" launch --nproc-per-node 2 --standalone \
        "$prefix/bin/dtrain" train --max-steps 20 --eval-every 0 2>&1)
rc=$?
if [[ $rc == 0 ]] && grep -q "accuracy" <<< "$out"; then
  pass "the installed dtrain train ran the main job (20 steps)"
else
  fail "the installed dtrain train exited $rc:"$'\n'"$out"
fi

((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
