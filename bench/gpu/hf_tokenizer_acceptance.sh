#!/usr/bin/env bash
# dtrain's tokenizer.json tokenizer against Hugging Face's tokenizers (the
# Python library of the GPU machine's image; the check runs on its CPUs, a
# minute or two): bench/peers/hf_tokenizer_check.py trains a Llama-3-style
# byte-level BPE on the repository's own Markdown, derives its
# ignore_merges, Qwen 2 (pattern and NFC) and GPT-2 variants, and compares
# the library's ids with those `dtrain tokenize` writes. build-gpu/ from
# bench/gpu/lm_acceptance.sh build is reused when present.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
phase=check
suite=hf-tokenizer-acceptance
source bench/gpu/lib.sh
machine_and_build 0
log "tokenizers vs dtrain tokenize"
python3 bench/peers/hf_tokenizer_check.py --dtrain "$dtrain" --merges 3000 --out "$OUT/tok" \
  README.md CHANGELOG.md docs/*.md 2>&1 | tee "$OUT/check.txt" | tail -12
status=${PIPESTATUS[0]}
echo "hf_tokenizer_check exit $status"
rm -rf "$OUT/tok"  # tokenizers and shards: nothing to bring back
exit "$status"
