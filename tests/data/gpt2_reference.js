// The npm package gpt-3-encoder's own GPT-2 encoder, as the reference the
// C++ tokenizer is compared with (tests/data/gpt2_tokenizer_test.cc).
//
//   node gpt2_reference.js PACKAGE_DIR TEXTS.json
//
// TEXTS.json is a JSON array of strings; prints a JSON array holding the ids
// of each string. The encoder is called once per string: it concatenates
// arrays per token, so one long string would take quadratic time.
const fs = require('fs');
const path = require('path');

const [packageDir, textsPath] = process.argv.slice(2);
const { encode } = require(path.resolve(packageDir));
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf-8'));
process.stdout.write(JSON.stringify(texts.map((text) => encode(text))));
