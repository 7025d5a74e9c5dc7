// Hugging Face's tokenizers (the npm package tokenizers: the library's Rust
// core) as the reference the C++ tokenizer.json tokenizer is compared with
// (tests/data/hf_tokenizer_reference_test.cc).
//
//   node hf_reference.js PACKAGE_DIR TOKENIZER.json TEXTS.json
//
// TEXTS.json is a JSON array of strings; prints a JSON array holding the ids
// of each string, without the special tokens a post-processor would add.
const fs = require('fs');
const path = require('path');

const [packageDir, tokenizerPath, textsPath] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(packageDir));

(async () => {
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const texts = JSON.parse(fs.readFileSync(textsPath, 'utf-8'));
  const ids = [];
  for (const text of texts) ids.push((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
  process.stdout.write(JSON.stringify(ids));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
