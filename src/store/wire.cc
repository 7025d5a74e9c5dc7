#include "store/wire.h"

#include <cstring>

namespace dtrain {
namespace {

// A buffer this small is kept between frames; a larger one is given back
// once it drains (a quiet connection should cost almost nothing).
constexpr size_t kRetainedBufferBytes = 64 << 10;

void putBigEndian(std::string& out, uint64_t value, int bytes) {
  for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

uint64_t getBigEndian(std::string_view in) {
  uint64_t value = 0;
  for (char c : in) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

}  // namespace

std::string storeOpName(uint8_t op) {
  switch (static_cast<StoreOp>(op)) {
    case StoreOp::kHello: return "HELLO";
    case StoreOp::kSet: return "SET";
    case StoreOp::kGet: return "GET";
    case StoreOp::kAdd: return "ADD";
    case StoreOp::kCompareSet: return "COMPARE_SET";
    case StoreOp::kWait: return "WAIT";
    case StoreOp::kCheck: return "CHECK";
    case StoreOp::kDeleteKey: return "DELETE_KEY";
    case StoreOp::kNumKeys: return "NUM_KEYS";
    case StoreOp::kSetEphemeral: return "SET_EPHEMERAL";
  }
  return "op " + std::to_string(op);
}

FrameWriter::FrameWriter(uint8_t first_byte) {
  frame_.assign(kStoreFrameHeaderBytes, '\0');
  frame_.push_back(static_cast<char>(first_byte));
}

FrameWriter& FrameWriter::u8(uint8_t value) {
  frame_.push_back(static_cast<char>(value));
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t value) {
  putBigEndian(frame_, value, 4);
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t value) {
  putBigEndian(frame_, static_cast<uint64_t>(value), 8);
  return *this;
}

FrameWriter& FrameWriter::bytes(std::string_view value) {
  u32(static_cast<uint32_t>(value.size()));
  frame_.append(value);
  return *this;
}

FrameWriter& FrameWriter::strings(const std::vector<std::string>& values) {
  u32(static_cast<uint32_t>(values.size()));
  for (const auto& value : values) bytes(value);
  return *this;
}

std::string FrameWriter::finish() {
  uint64_t payload = frame_.size() - kStoreFrameHeaderBytes;
  for (size_t i = 0; i < kStoreFrameHeaderBytes; ++i) {
    frame_[i] = static_cast<char>((payload >> (8 * (kStoreFrameHeaderBytes - 1 - i))) & 0xff);
  }
  return std::move(frame_);
}

std::string_view PayloadReader::take(size_t n, const char* field) {
  if (rest_.size() < n) {
    throw WireError("truncated field '" + std::string(field) + "': needs " + std::to_string(n) +
                    " bytes, " + std::to_string(rest_.size()) + " left in the frame");
  }
  std::string_view out = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return out;
}

uint8_t PayloadReader::u8(const char* field) { return static_cast<uint8_t>(take(1, field)[0]); }
uint32_t PayloadReader::u32(const char* field) {
  return static_cast<uint32_t>(getBigEndian(take(4, field)));
}
int64_t PayloadReader::i64(const char* field) {
  return static_cast<int64_t>(getBigEndian(take(8, field)));
}

std::string PayloadReader::bytes(const char* field) {
  uint32_t length = u32(field);
  return std::string(take(length, field));
}

std::vector<std::string> PayloadReader::strings(const char* field) {
  uint32_t count = u32(field);
  // Each entry needs at least its 4-byte length; checking first keeps a
  // hostile count from reserving gigabytes.
  if (count > rest_.size() / 4) {
    throw WireError("truncated field '" + std::string(field) + "': " + std::to_string(count) +
                    " entries announced, only " + std::to_string(rest_.size()) + " bytes left");
  }
  std::vector<std::string> values;
  values.reserve(count);
  for (uint32_t i = 0; i < count; ++i) values.push_back(bytes(field));
  return values;
}

void PayloadReader::expectEnd(const char* frame_name) const {
  if (!rest_.empty()) {
    throw WireError(std::to_string(rest_.size()) + " unexpected bytes after the fields of a " +
                    frame_name + " frame");
  }
}

void FrameDecoder::shrinkIfIdle() {
  if (begin_ == end_ && buffer_.capacity() > kRetainedBufferBytes) {
    std::vector<char>().swap(buffer_);
    begin_ = end_ = 0;
  }
}

bool FrameDecoder::hasFrame() const {
  size_t available = end_ - begin_;
  if (available < kStoreFrameHeaderBytes) return false;
  uint64_t length = getBigEndian(std::string_view(buffer_.data() + begin_, kStoreFrameHeaderBytes));
  return length > max_frame_bytes_ || available >= kStoreFrameHeaderBytes + length;
}

char* FrameDecoder::prepare(size_t n) {
  // Hand back the memory of an unusually large frame rather than keep it
  // for the life of the connection.
  if (n <= kRetainedBufferBytes) shrinkIfIdle();
  if (buffer_.size() - end_ < n && begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() - end_ < n) buffer_.resize(end_ + n);
  return buffer_.data() + end_;
}

void FrameDecoder::append(std::string_view bytes) {
  // A decoder with no buffer yet would hand memcpy a null pointer.
  if (bytes.empty()) return;
  std::memcpy(prepare(bytes.size()), bytes.data(), bytes.size());
  commit(bytes.size());
}

std::optional<std::string_view> FrameDecoder::next() {
  size_t available = end_ - begin_;
  if (available < kStoreFrameHeaderBytes) return std::nullopt;
  uint64_t length = getBigEndian(std::string_view(buffer_.data() + begin_, kStoreFrameHeaderBytes));
  if (length > max_frame_bytes_) {
    throw WireError("frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                    std::to_string(max_frame_bytes_) + " bytes");
  }
  if (available < kStoreFrameHeaderBytes + length) return std::nullopt;
  std::string_view payload(buffer_.data() + begin_ + kStoreFrameHeaderBytes, length);
  begin_ += kStoreFrameHeaderBytes + length;
  if (begin_ == end_) begin_ = end_ = 0;  // bytes stay valid until prepare()
  return payload;
}

}  // namespace dtrain
