// UTF-8 decoding, the Unicode classes, NFC (when it was written, checked
// against Unicode 15.0's NormalizationTest.txt for the characters of 9.0,
// whose tables it has, and against Hugging Face's tokenizers for every code
// point) and the pre-tokenizers of GPT-2 and of Llama 3 / Qwen 2, each
// against hand-checked cases (GPT-2's tokenizer as a
// whole is compared with the npm encoder in gpt2_tokenizer_test.cc; Llama
// 3's with Hugging Face's tokenizers by bench/peers/hf_tokenizer_check.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/gpt2_pretokenizer.h"
#include "data/llama3_pretokenizer.h"
#include "data/unicode_classes.h"
#include "data/unicode_nfc.h"
#include "data/utf8.h"

namespace dtrain::data {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string_view> views;
  splitGpt2Pieces(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(Utf8, DecodesEveryLength) {
  char32_t cp = 0;
  EXPECT_EQ(decodeUtf8("A", 0, &cp), 1u);
  EXPECT_EQ(cp, U'A');
  EXPECT_EQ(decodeUtf8("\xC3\xA9", 0, &cp), 2u);
  EXPECT_EQ(cp, U'é');
  EXPECT_EQ(decodeUtf8("\xE4\xBD\xA0", 0, &cp), 3u);
  EXPECT_EQ(cp, U'你');
  EXPECT_EQ(decodeUtf8("\xF0\x9F\x98\x80", 0, &cp), 4u);
  EXPECT_EQ(cp, U'😀');
}

TEST(Utf8, RefusesMalformedSequencesAtTheirOffset) {
  EXPECT_EQ(firstInvalidUtf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(firstInvalidUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(firstInvalidUtf8("ab\xFF"), 2u);                  // never a UTF-8 byte
  EXPECT_EQ(firstInvalidUtf8("ab\x80z"), 2u);                 // a lone continuation byte
  EXPECT_EQ(firstInvalidUtf8("ab\xC3"), 2u);                  // truncated at the end
  EXPECT_EQ(firstInvalidUtf8("ab\xC3z"), 2u);                 // truncated in the middle
  EXPECT_EQ(firstInvalidUtf8("\xC0\xAF"), 0u);                // overlong '/'
  EXPECT_EQ(firstInvalidUtf8("\xE0\x80\xAF"), 0u);            // overlong, 3 bytes
  EXPECT_EQ(firstInvalidUtf8("x\xED\xA0\x80"), 1u);           // a surrogate (U+D800)
  EXPECT_EQ(firstInvalidUtf8("xy\xF4\x90\x80\x80"), 2u);      // above U+10FFFF
  EXPECT_EQ(firstInvalidUtf8("\xE9t\xE9"), 0u);               // Latin-1, not UTF-8
}

TEST(UnicodeClasses, LettersNumbersSpacesAndTheRest) {
  for (char32_t c : {U'a', U'Z', U'é', U'ǅ', U'ʰ', U'ª', U'µ', U'Ж', U'你', U'한', U'ا', U'न', U'𝒜'}) {
    EXPECT_EQ(classifyCodePoint(c), CharClass::kLetter) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'0', U'9', U'½', U'²', U'Ⅻ', U'〇', U'٣', U'𝟘'}) {
    EXPECT_EQ(classifyCodePoint(c), CharClass::kNumber) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U' ', U'\t', U'\n', U'\v', U'\f', U'\r', U'\u0085', U'\u00A0', U'\u2003', U'\u2028', U'\u3000'}) {
    EXPECT_EQ(classifyCodePoint(c), CharClass::kSpace) << static_cast<uint32_t>(c);
  }
  // Marks, symbols, punctuation, format characters (U+FEFF is not
  // White_Space), controls, unassigned and private-use code points.
  for (char32_t c : {U'\u0301', U'\u0947', U'😀', U'!', U'€', U'\uFEFF', U'\u200D', U'\x1E', U'\U000E0001',
                     U'\U0010FFFF', U'\uE000'}) {
    EXPECT_EQ(classifyCodePoint(c), CharClass::kOther) << static_cast<uint32_t>(c);
  }
}

TEST(Gpt2Pretokenizer, WordsLeadWithTheirSpace) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(pieces(""), Pieces{});
}

TEST(Gpt2Pretokenizer, Contractions) {
  EXPECT_EQ(pieces("I'm you're it's can't we'll I'd they've"),
            (Pieces{"I", "'m", " you", "'re", " it", "'s", " can", "'t", " we", "'ll", " I", "'d", " they", "'ve"}));
  // Only lower case, only right after the apostrophe.
  EXPECT_EQ(pieces("IT'S"), (Pieces{"IT", "'", "S"}));
  EXPECT_EQ(pieces(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(pieces("'''s"), (Pieces{"'''", "s"}));
}

TEST(Gpt2Pretokenizer, SpaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces("   "), (Pieces{"   "}));
  EXPECT_EQ(pieces(" "), (Pieces{" "}));
  // Only an ASCII space joins the next word; other spaces stand alone.
  EXPECT_EQ(pieces("x\u3000y"), (Pieces{"x", "\u3000", "y"}));
  EXPECT_EQ(pieces("x \u00A0y"), (Pieces{"x", " ", "\u00A0", "y"}));
}

TEST(Gpt2Pretokenizer, NumbersPunctuationAndScripts) {
  EXPECT_EQ(pieces("pi is 3.14159!"), (Pieces{"pi", " is", " 3", ".", "14159", "!"}));
  EXPECT_EQ(pieces("x2y"), (Pieces{"x", "2", "y"}));
  EXPECT_EQ(pieces("<|endoftext|>"), (Pieces{"<|", "endoftext", "|>"}));
  EXPECT_EQ(pieces("你好，世界"), (Pieces{"你好", "，", "世界"}));
  EXPECT_EQ(pieces("cafe\u0301 ok"), (Pieces{"cafe", "\u0301", " ok"}));
  EXPECT_EQ(pieces(" 😀👍"), (Pieces{" 😀👍"}));
}

TEST(Gpt2Pretokenizer, FollowsWhiteSpaceNotJavaScriptOnFeffAnd0085) {
  EXPECT_EQ(pieces("\uFEFFHello"), (Pieces{"\uFEFF", "Hello"}));
  EXPECT_EQ(pieces("a\u0085\u0085b"), (Pieces{"a", "\u0085", "\u0085", "b"}));
}

TEST(Gpt2Pretokenizer, InvalidBytesAreOtherCharactersAndNothingIsLost) {
  EXPECT_EQ(pieces("ab\xFF\xFE cd"), (Pieces{"ab", "\xFF\xFE", " cd"}));
  const std::string text = "mixed \xC3 bytes\x80\n\n  and text";
  std::string joined;
  for (const std::string& piece : pieces(text)) joined += piece;
  EXPECT_EQ(joined, text);
}

TEST(UnicodeNfc, ComposesDecomposesAndReorders) {
  EXPECT_EQ(toNfc("plain ASCII, unchanged"), "plain ASCII, unchanged");
  EXPECT_EQ(toNfc("cafe\u0301"), "caf\u00E9");
  EXPECT_EQ(toNfc("A\u030A \u212B"), "\u00C5 \u00C5");  // the Angstrom sign is a singleton
  EXPECT_EQ(toNfc("\u2126"), "\u03A9");                    // so is the Ohm sign
  EXPECT_EQ(toNfc("a\u0302\u0323 a\u0323\u0302"), "\u1EAD \u1EAD");  // reordered by class, then composed
  EXPECT_EQ(toNfc("a\u0301\u0301"), "\u00E1\u0301");     // the second is blocked by the first
  EXPECT_EQ(toNfc("\u0958"), "\u0915\u093C");              // excluded from composition
  EXPECT_EQ(toNfc("\u0344"), "\u0308\u0301");              // a non-starter decomposition
  EXPECT_EQ(toNfc("\u0B47\u0B3E"), "\u0B4B");              // two starters compose
  EXPECT_EQ(toNfc("\u1100\u1161\u11A8 \uAC00\u11A8"), "\uAC01 \uAC01");  // Hangul, by arithmetic
  EXPECT_EQ(toNfc("\uD55C\uAE00"), "\uD55C\uAE00");       // already composed
  EXPECT_EQ(toNfc("\u0301leading mark"), "\u0301leading mark");
  EXPECT_EQ(toNfc("\u1E0B\u0323"), "\u1E0D\u0307");       // d with dot above + dot below
  // Unicode 9.0's tables, as Hugging Face's tokenizers: U+1DFA (10.0, class
  // 218 since) is of class 0 here, so it blocks what follows.
  EXPECT_EQ(toNfc("a\u1DFA\u0301"), "a\u1DFA\u0301");
}

TEST(UnicodeNfc, InvalidBytesStayAndNothingComposesAcrossThem) {
  EXPECT_EQ(toNfc("e\xFF\u0301"), "e\xFF\u0301");
  EXPECT_EQ(toNfc("\xC3" "e\u0301\x80"), "\xC3\u00E9\x80");
}

std::vector<std::string> llama3(std::string_view text, size_t max_digits = 3) {
  std::vector<std::string_view> views;
  splitLlama3Pieces(text, max_digits, views);
  return {views.begin(), views.end()};
}

TEST(Llama3Pretokenizer, DigitsGoInGroupsOfThree) {
  EXPECT_EQ(llama3("12345678"), (Pieces{"123", "456", "78"}));
  EXPECT_EQ(llama3("pi 3.14159"), (Pieces{"pi", " ", "3", ".", "141", "59"}));
  EXPECT_EQ(llama3("x2024y"), (Pieces{"x", "202", "4", "y"}));
  EXPECT_EQ(llama3("٣٤٥٦"), (Pieces{"٣٤٥", "٦"}));  // any \p{N}
  // Qwen 2's pattern: one digit at a time.
  EXPECT_EQ(llama3("12345", 1), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(llama3(" 42", 1), (Pieces{" ", "4", "2"}));
}

TEST(Llama3Pretokenizer, ContractionsInEitherCase) {
  EXPECT_EQ(llama3("I'M they'RE it'S we'Ll I'd you've"),
            (Pieces{"I", "'M", " they", "'RE", " it", "'S", " we", "'Ll", " I", "'d", " you", "'ve"}));
  EXPECT_EQ(llama3("don't DON'T"), (Pieces{"don", "'t", " DON", "'T"}));
  EXPECT_EQ(llama3("it'\u017F"), (Pieces{"it", "'\u017F"}));  // long s folds to s
  // After a space the apostrophe is punctuation: " '" then the letters.
  EXPECT_EQ(llama3(" 'S"), (Pieces{" '", "S"}));
  EXPECT_EQ(llama3("'sup"), (Pieces{"'s", "up"}));
  EXPECT_EQ(llama3("'hello"), (Pieces{"'hello"}));  // one non-letter leads a word
}

TEST(Llama3Pretokenizer, AWordTakesOneCharacterBeforeIt) {
  EXPECT_EQ(llama3("Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(llama3("(hello) \tindent"), (Pieces{"(hello", ")", " ", "\tindent"}));
  EXPECT_EQ(llama3("((x"), (Pieces{"((", "x"}));
  EXPECT_EQ(llama3("x\u00A0y"), (Pieces{"x", "\u00A0y"}));
  EXPECT_EQ(llama3("héllo wörld 你好"), (Pieces{"héllo", " wörld", " 你好"}));
  EXPECT_EQ(llama3("<|endoftext|>"), (Pieces{"<|", "endoftext", "|>"}));
}

TEST(Llama3Pretokenizer, NewlinesAndTrailingSpaces) {
  EXPECT_EQ(llama3("hello\n\nworld"), (Pieces{"hello", "\n\n", "world"}));
  EXPECT_EQ(llama3("end.\r\n\r\nNext"), (Pieces{"end", ".\r\n\r\n", "Next"}));  // punctuation takes them
  EXPECT_EQ(llama3("x \n y"), (Pieces{"x", " \n", " y"}));
  EXPECT_EQ(llama3("x  \n\n  y"), (Pieces{"x", "  \n\n", " ", " y"}));  // up to the last line break
  EXPECT_EQ(llama3("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(llama3("trailing   "), (Pieces{"trailing", "   "}));
  EXPECT_EQ(llama3("end \n"), (Pieces{"end", " \n"}));
  EXPECT_EQ(llama3("\t\tx"), (Pieces{"\t", "\tx"}));
  EXPECT_EQ(llama3(" 1"), (Pieces{" ", "1"}));
  EXPECT_EQ(llama3(""), Pieces{});
}

TEST(Llama3Pretokenizer, InvalidBytesAreOtherCharactersAndNothingIsLost) {
  EXPECT_EQ(llama3("ab\xFF\xFE cd"), (Pieces{"ab", "\xFF\xFE", " cd"}));
  const std::string text = "mixed \xC3 bytes\x80\n\n  and 12345 it's text \r\n";
  std::string joined;
  for (const std::string& piece : llama3(text)) joined += piece;
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace dtrain::data
