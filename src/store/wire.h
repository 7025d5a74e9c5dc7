// The TcpStore wire format, shared by server and client (private to store/).
//
// A frame is `u32 length (big-endian) | payload`, length <= the limit.
// A request payload is `u8 op | fields`; a reply payload is `u8 status | fields`.
// Fields: u8, u32 and i64 are fixed-width big-endian; bytes are
// `u32 length | bytes`; a string list is `u32 count | bytes...`.
//
//   request                                   OK reply fields
//   HELLO   u32 version, bytes token          u32 server version
//   SET     bytes key, bytes value            -
//   GET     bytes key, i64 timeout_ms         bytes value        (deferred until set)
//   ADD     bytes key, i64 delta              i64 new value
//   CAS     bytes key, bytes expected, desired  bytes value after the call
//   WAIT    list keys, i64 timeout_ms         -                  (deferred until set)
//   CHECK   list keys                         u8 all present
//   DELETE  bytes key                         u8 existed
//   NUMKEYS -                                 i64 count
//
// Other replies: TIMEOUT {list missing keys, i64 timeout_ms},
// ERROR {bytes message}, REFUSED {u8 reason, bytes message}.
// HELLO's layout never changes between versions, so any two versions can
// tell each other that they disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace dtrain {

enum class StoreOp : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDeleteKey = 8,
  kNumKeys = 9,
  kSetEphemeral = 10,  // a SET whose key the server deletes when this connection closes
};

enum class ReplyStatus : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kRefused = 3 };
enum class RefusalReason : uint8_t {
  kProtocolVersion = 1,
  kAuthentication = 2,
  kTooManyConnections = 3,  // the server is at its connection limit; try later
};

// A frame's length prefix (u32, big-endian).
inline constexpr size_t kStoreFrameHeaderBytes = 4;

// The largest frame a server reads before a connection has said HELLO: a
// HELLO is a version and a token, and a stranger gets no more memory than that.
inline constexpr uint32_t kStoreMaxHelloFrameBytes = 8u << 10;

// "SET", "GET", ...; "op <n>" for a byte that is no op.
std::string storeOpName(uint8_t op);

// Bytes that break the wire format: a truncated field, an oversized frame,
// an unknown op. The server closes the offending connection; the client
// treats it as a lost connection.
class WireError : public IoError {
 public:
  using IoError::IoError;
};

// Builds one frame: the header is reserved up front and patched by finish().
class FrameWriter {
 public:
  explicit FrameWriter(StoreOp op) : FrameWriter(static_cast<uint8_t>(op)) {}
  explicit FrameWriter(ReplyStatus status) : FrameWriter(static_cast<uint8_t>(status)) {}

  FrameWriter& u8(uint8_t value);
  FrameWriter& u32(uint32_t value);
  FrameWriter& i64(int64_t value);
  FrameWriter& bytes(std::string_view value);
  FrameWriter& strings(const std::vector<std::string>& values);
  // The complete frame (header + payload). The writer is spent afterwards.
  std::string finish();

 private:
  explicit FrameWriter(uint8_t first_byte);
  std::string frame_;
};

// Reads the fields of one payload in order; each read names its field so a
// truncated frame says which field was cut off.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view payload) : rest_(payload) {}

  uint8_t u8(const char* field);
  uint32_t u32(const char* field);
  int64_t i64(const char* field);
  std::string bytes(const char* field);
  std::vector<std::string> strings(const char* field);
  // WireError when bytes are left over (a sender that disagrees on the layout).
  void expectEnd(const char* frame_name) const;

 private:
  std::string_view take(size_t n, const char* field);
  std::string_view rest_;
};

// Cuts a byte stream into frames. Bytes arrive in any chunking; next() yields
// each complete payload once.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}
  void setMaxFrameBytes(uint32_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }

  // Space for at least `n` more bytes; fill some, then commit() how many.
  char* prepare(size_t n);
  void commit(size_t n) { end_ += n; }
  void append(std::string_view bytes);

  // The next complete payload (valid until the next prepare/append), or
  // nullopt when more bytes are needed. WireError when a frame's length
  // exceeds the limit: the stream cannot be resynchronised after that.
  std::optional<std::string_view> next();
  size_t bufferedBytes() const { return end_ - begin_; }
  size_t capacityBytes() const { return buffer_.capacity(); }
  // True when next() would yield a payload (or throw) without more bytes.
  bool hasFrame() const;
  // Frees the buffer when nothing is buffered and it grew past what small
  // frames need, so a connection that once sent a big frame, or thousands
  // of quiet ones, hold no memory. Invalidates the last payload of next().
  void shrinkIfIdle();

 private:
  uint32_t max_frame_bytes_;
  std::vector<char> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace dtrain
