// The Unicode classes of the GPT-2 pre-tokenizer's regular expression
// (torch-free; library dtrain_text).
//
// Letters are general category L (Lu Ll Lt Lm Lo), numbers N (Nd Nl No),
// spaces the White_Space property (what \s means in Python's `regex` module,
// which GPT-2's encoder.py uses, and in tiktoken). The table is generated
// from the Unicode 15.0 Character Database by scripts/gen-unicode-classes.py.
// Note: JavaScript's \s differs on two code points: it includes U+FEFF and
// excludes U+0085; here U+FEFF is "other" and U+0085 a space.
#pragma once

namespace dtrain::data {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

// Unassigned code points are kOther.
CharClass classifyCodePoint(char32_t code_point);

}  // namespace dtrain::data
