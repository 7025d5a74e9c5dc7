// How a text file divides into documents (torch-free; library dtrain_text).
//
//   kWholeFile       the file is one document
//   kBlankLines      blocks separated by blank lines (lines of nothing but
//                    spaces, tabs and a carriage return)
//   kSeparatorLine   blocks separated by lines equal to `separator` (a line
//                    "%" in Debian's fortunes files; a trailing "\r" of the
//                    line is ignored)
//
// A document keeps its lines as they are, the newline of its last line
// included; separator lines belong to no document. Documents that are empty
// or nothing but whitespace are left out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

struct DocumentSplit {
  enum class Mode { kWholeFile, kBlankLines, kSeparatorLine };
  Mode mode = Mode::kWholeFile;
  std::string separator;  // kSeparatorLine only; without its newline
};

// Appends the documents of `text` to `documents`, as views into `text`.
void splitDocuments(std::string_view text, const DocumentSplit& split, std::vector<std::string_view>& documents);

}  // namespace dtrain::data
