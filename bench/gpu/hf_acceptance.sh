#!/usr/bin/env bash
# Hugging Face import and export against transformers itself, on the GPU
# machine (whose image has transformers; the check runs on its CPUs, a
# minute at most): transformers writes small random LlamaForCausalLM (GQA,
# tied + sharded, bf16, Llama 3.1's scaled rotary frequencies) and
# GPT2LMHeadModel directories and their logits;
# models_test's HfCheckpointTest.TransformersWrittenDirectories* imports
# each into dtrain (logits within 1e-4) and exports it back; from_pretrained
# loads every export and its logits are compared with transformers' own.
# With .deps/hf-export (bench/hf_export_prepare.sh, run before on the
# CPU machine and carried), also dtrain's bf16 sharded export and its
# tokenizer files through from_pretrained and AutoTokenizer.
# build-gpu/ from bench/gpu/lm_acceptance.sh build is reused when present.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
phase=check
suite=hf-acceptance
source bench/gpu/lib.sh
machine_and_build 0
dirs=$OUT/hf
log "transformers writes the models"
python3 bench/peers/hf_transformers_check.py write "$dirs" 2>&1 | tail -8
log "dtrain imports (logits vs transformers) and exports"
DTRAIN_TEST_PYTHON=$(command -v python3) DTRAIN_HF_CHECK_DIR=$dirs timeout 120 build-gpu/tests/models/models_test --gtest_brief=1 \
  --gtest_filter='HfCheckpoint*' > "$OUT/hf_test.log" 2>&1
echo "models_test HfCheckpoint* exit $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|relative" -A3 "$OUT/hf_test.log" | head -30
log "from_pretrained of dtrain's exports"
python3 bench/peers/hf_transformers_check.py load "$dirs" 2>&1 | tail -8
if [ -d .deps/hf-export/model ]; then
  log "dtrain's bf16 sharded export with its tokenizer (bench/hf_export_prepare.sh) in transformers"
  python3 bench/peers/hf_transformers_check.py export .deps/hf-export 2>&1 | tee "$OUT/export_check.txt" | tail -4
fi
# The configs each side wrote, for the record; the weights stay behind.
(cd "$dirs" && find . -name config.json | tar czf "$OUT/configs.tgz" -T -)
rm -rf "$dirs"
