#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu/chat_acceptance.sh times on the
# GPU machine (SFT tokens/s on packed chat data against pretraining tokens/s,
# the same model): into $DIR (.deps/chat-speed)
#   tok/         a byte-level tokenizer.json with Llama 3's special tokens
#                (and tokenizer_config.json naming them)
#   chat/        conversations.jsonl: every fortune of Debian's fortunes
#                package as a user's request and the assistant's answer
#                (the fortune), 20% as {"prompt", "completion"}
#   shards/      the same fortunes as plain text, `dtrain tokenize`d with
#                the same tokenizer (the pretraining data)
# Needs build/ (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
dtrain=${DTRAIN:-build/src/cli/dtrain}
dir=${DIR:-.deps/chat-speed}
rm -rf "$dir"; mkdir -p "$dir/tok" "$dir/chat" "$dir/text"
python3 - "$dir" <<'PY'
import glob, json, sys
d = sys.argv[1]
# GPT-2's printable-byte alphabet, as tokenizer.json spells byte-level tokens.
keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
alphabet, extra = {}, 0
for b in range(256):
    if b in keep:
        alphabet[b] = chr(b)
    else:
        alphabet[b] = chr(256 + extra)
        extra += 1
vocab = {alphabet[b]: b for b in range(256)}
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
added = [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for i, t in enumerate(specials)]
level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": level, "decoder": level,
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(f"{d}/tok/tokenizer.json", "w"))
json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, open(f"{d}/tok/tokenizer_config.json", "w"))
fortunes = []
for path in sorted(glob.glob("/usr/share/games/fortunes/*.u8")):
    for text in open(path, encoding="utf-8", errors="replace").read().split("\n%\n"):
        text = text.strip()
        if 20 <= len(text) <= 1500:
            fortunes.append((path.rsplit("/", 1)[1][:-3], text))
with open(f"{d}/chat/conversations.jsonl", "w") as out, open(f"{d}/text/fortunes.txt", "w") as plain:
    for i, (topic, text) in enumerate(fortunes):
        ask = f"Tell me something from the {topic} collection."
        record = ({"prompt": ask, "completion": text} if i % 5 == 0 else
                  {"messages": [{"role": "user", "content": ask}, {"role": "assistant", "content": text}]})
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        plain.write(text + "\n%\n")
print(f"{len(fortunes)} conversations")
PY
"$dtrain" tokenize --tokenizer-dir "$PWD/$dir/tok" --doc-separator % --val-fraction 0.05 --out "$dir/shards" \
  "$dir/text/fortunes.txt" 2>&1 | tail -2
rm -rf "$dir/text"
du -sh "$dir"/*
