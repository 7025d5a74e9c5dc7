#include "data/byte_tokenizer.h"

#include "common/error.h"

namespace dtrain::data {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  encodeInto(text, ids);
  return ids;
}

void ByteTokenizer::encodeInto(std::string_view text, std::vector<uint32_t>& ids) const {
  ids.reserve(ids.size() + text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id < 256) {
      text.push_back(static_cast<char>(id));
    } else if (id == kEndOfText) {
      text += kEndOfTextText;
    } else {
      throw ConfigError("token id " + std::to_string(id) + " is not in the byte tokenizer's vocabulary (ids 0..256)");
    }
  }
  return text;
}

}  // namespace dtrain::data
