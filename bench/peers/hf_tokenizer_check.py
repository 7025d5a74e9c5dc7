"""dtrain's tokenizer.json reader (src/data/hf_tokenizer.h) against Hugging
Face's tokenizers library, which must be installed (the GPU machine's image
has it; no network is needed).

    python3 bench/peers/hf_tokenizer_check.py --dtrain build/src/cli/dtrain \
        [--merges 3000] [--out DIR] CORPUS_FILE...

1. Trains a byte-level BPE with tokenizers on the corpus files: Llama 3's
   split pattern, then ByteLevel without its own regex; all 256 bytes, about
   --merges merges, the special tokens <|begin_of_text|> and <|end_of_text|>.
   Saves it as DIR/llama3/tokenizer.json with a tokenizer_config.json naming
   the two as bos_token and eos_token.
2. Derives three more tokenizer.json files from it: the same with
   ignore_merges (as Llama 3's own has), with Qwen 2's pattern (one digit at
   a time) and NFC normalizer, and with GPT-2's pre-tokenizer (a lone
   ByteLevel, use_regex).
3. For each tokenizer and each corpus file (plus DIR/tricky.txt, written
   here: digits, contractions in either case, newlines, trailing spaces,
   unicode, the special tokens in the text), encodes the file with
   tokenizers (add_special_tokens=False) and with
   `dtrain tokenize FILE --tokenizer-dir DIR/<name> --out ...`, whose one
   shard (llm.c's format: 256 int32 header, then uint16 or uint32 tokens)
   holds <|begin_of_text|>, the file's ids, <|end_of_text|>.
4. Prints, per tokenizer, the count of ids that differ (and the first
   difference with its text), and exits 1 on any difference.

Each file is one document; files that are empty or only ASCII whitespace
are skipped (dtrain tokenize leaves such documents out). Files must be
UTF-8.

CI compares the same C++ with the npm package tokenizers (the library's Rust
core) on GPT-2's merges (tests/data/hf_tokenizer_reference_test.cc); this
script adds merges trained by the Python library, and the whole path through
`dtrain tokenize`: the tokenizer found from --tokenizer-dir alone, the
documents framed by the config's bos and eos, the shards.
"""
import argparse
import copy
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"

TRICKY = "".join([
    "Numbers: 1 12 123 1234 12345 1234567 3.14159 1,000,000 2024-06-01 0x1F ٣٤٥٦ ½ Ⅻ\n",
    "Contractions: I'm you're it's we'll I'd they've IT'S YOU'RE We'Ll don'T 'sup ''s it'ſ\n",
    "Spaces:  two   three    four\t\ttabs \u00a0nbsp \u3000ideographic trailing   \n",
    "Newlines:\n\n\nthree\r\n\r\nwindows \n \n  \n\nend.\n\n",
    "Punctuation: (hello) [x] {y} !!! ??? ... --- ``` ### @user #tag http://example.com/a?b=c&d=e\n",
    "Unicode: café naïve Ångström cafe\u0301 A\u030a \u212b a\u0302\u0323 \u1100\u1161\u11a8 你好，世界！ 안녕하세요 "
    "Привет мир Γειά σου 😀👍🏽 👨‍👩‍👧‍👦\n",
    "Special: ", BOS, "text", EOS, " more ", EOS, EOS, " <|begin_of_text| <|end_of_text|>x\n",
    "Code:\n    def f(x):\n        return x ** 2  # square\n\n\n",
    "trailing spaces at the very end   ",
])


def ascii_blank(text):
    return all(c in " \t\n\r\f\v" for c in text)


def train(files, merges, out):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2 + 256 + merges, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train(files, trainer)
    os.makedirs(out, exist_ok=True)
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f)


def variants(trained):
    """name -> tokenizer.json (as a dict): the trained one and three derived."""
    with_ignore = copy.deepcopy(trained)
    with_ignore["model"]["ignore_merges"] = True
    qwen = copy.deepcopy(trained)
    qwen["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": QWEN2_PATTERN}
    qwen["normalizer"] = {"type": "NFC"}
    gpt2 = copy.deepcopy(trained)
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"llama3": trained, "llama3_ignore_merges": with_ignore, "qwen2": qwen, "gpt2": gpt2}


def read_shards(out_dir):
    ids = []
    for path in sorted(glob.glob(os.path.join(out_dir, "*_train_*.bin"))):
        with open(path, "rb") as f:
            data = f.read()
        magic, version, count = struct.unpack_from("<3i", data, 0)
        if magic != 20240520 or version not in (1, 2):
            raise SystemExit(f"{path}: not a token shard (magic {magic}, version {version})")
        fmt = "H" if version == 1 else "I"
        ids.extend(struct.unpack_from(f"<{count}{fmt}", data, 1024))
    return ids


def dtrain_ids(dtrain, tokenizer_dir, path, out_dir):
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [dtrain, "tokenize", path, "--tokenizer-dir", tokenizer_dir, "--out", out_dir, "--name", "check",
           "--threads", "2"]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}")
    return read_shards(out_dir)


def first_difference(expected, got):
    for i, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return i
    return min(len(expected), len(got))


def check(name, spec, files, dtrain, out):
    from tokenizers import Tokenizer
    tokenizer_dir = os.path.join(out, name)
    os.makedirs(tokenizer_dir, exist_ok=True)
    with open(os.path.join(tokenizer_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS}, f)
    try:
        tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    except Exception as e:  # an older tokenizers that does not know a field (ignore_merges)
        print(f"{name}: skipped: this tokenizers cannot read it ({e})")
        return 0
    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    differing = total = 0
    for index, path in enumerate(files):
        with open(path, encoding="utf-8", newline="") as f:  # the bytes as they are: "\r\n" stays
            text = f.read()
        expected = [bos] + tokenizer.encode(text, add_special_tokens=False).ids + [eos]
        got = dtrain_ids(dtrain, tokenizer_dir, path, os.path.join(out, f"shards-{name}-{index}"))
        total += len(expected)
        bad = sum(a != b for a, b in zip(expected, got)) + abs(len(expected) - len(got))
        if bad:
            at = first_difference(expected, got)
            piece = tokenizer.decode(expected[max(0, at - 5):at + 5], skip_special_tokens=False)
            print(f"  {name}: {path}: {bad} of {len(expected)} ids differ, first at {at}: tokenizers "
                  f"{expected[max(0, at - 3):at + 5]}, dtrain {got[max(0, at - 3):at + 5]} (near {piece!r})")
        differing += bad
    print(f"{name}: {differing} differing ids of {total} ({len(files)} files)")
    return differing


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtrain", required=True, help="the dtrain binary")
    parser.add_argument("--merges", type=int, default=3000, help="merges to train (about)")
    parser.add_argument("--out", default="/tmp/hf-tokenizer-check", help="where the tokenizers and shards go")
    parser.add_argument("corpus", nargs="+", help="UTF-8 text files to train on and to compare")
    args = parser.parse_args()
    import tokenizers
    print(f"tokenizers {tokenizers.__version__}")
    os.makedirs(args.out, exist_ok=True)
    tricky = os.path.join(args.out, "tricky.txt")
    with open(tricky, "w", encoding="utf-8", newline="") as f:
        f.write(TRICKY)
    files = []
    for path in args.corpus + [tricky]:
        with open(path, encoding="utf-8", newline="") as f:  # raises on a file that is not UTF-8
            if not ascii_blank(f.read()):
                files.append(path)
    trained = train(files, args.merges, os.path.join(args.out, "trained"))
    print(f"trained: {len(trained['model']['merges'])} merges, vocabulary {len(trained['model']['vocab'])}")
    differing = sum(check(name, spec, files, args.dtrain, args.out) for name, spec in variants(trained).items())
    print("PASS: dtrain's ids are tokenizers' ids" if differing == 0 else f"FAIL: {differing} ids differ")
    return 0 if differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
