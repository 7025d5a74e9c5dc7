#include "data/document_split.h"

#include <algorithm>

namespace dtrain::data {
namespace {

bool isAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool allSpace(std::string_view text) { return std::all_of(text.begin(), text.end(), isAsciiSpace); }

bool isSeparator(std::string_view line, const DocumentSplit& split) {
  if (line.ends_with('\n')) line.remove_suffix(1);
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (split.mode == DocumentSplit::Mode::kBlankLines) {
    return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; });
  }
  return line == split.separator;
}

void addDocument(std::string_view document, std::vector<std::string_view>& documents) {
  if (!allSpace(document)) documents.push_back(document);
}

}  // namespace

void splitDocuments(std::string_view text, const DocumentSplit& split, std::vector<std::string_view>& documents) {
  if (split.mode == DocumentSplit::Mode::kWholeFile) {
    addDocument(text, documents);
    return;
  }
  size_t start = 0;  // of the document being gathered
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    if (isSeparator(text.substr(pos, end - pos), split)) {
      addDocument(text.substr(start, pos - start), documents);
      start = end;
    }
    pos = end;
  }
  addDocument(text.substr(start), documents);
}

}  // namespace dtrain::data
