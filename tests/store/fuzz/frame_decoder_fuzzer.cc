// Fuzz target: FrameDecoder and PayloadReader over arbitrary byte streams.
//
// The input is the byte stream a connection receives. It is decoded under two
// frame limits, each in three chunkings (all at once; a byte at a time; chunks
// of pseudo-random sizes through prepare()/commit(), as recv() fills them),
// and every decoding must yield what a plain reference decoder yields: the
// same payloads, the same oversized-frame error, the same bytes left over.
// Each payload is then read as a request; a well-formed one must be written
// back by FrameWriter byte for byte, and PayloadReader must accept exactly
// the payloads an independent reading of wire.h's layouts accepts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "request_codec.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain::fuzz {
namespace {

struct Decoded {
  std::vector<std::string> payloads;
  bool oversized = false;  // a frame announced more than the limit
  size_t leftover = 0;     // bytes of an incomplete last frame (unless oversized)
  bool operator==(const Decoded&) const = default;
};

uint64_t readBigEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (char c : bytes) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

Decoded referenceDecode(std::string_view stream, uint32_t limit) {
  Decoded out;
  while (stream.size() >= 4) {
    uint64_t length = readBigEndian(stream.substr(0, 4));
    if (length > limit) {
      out.oversized = true;
      return out;
    }
    if (stream.size() - 4 < length) break;
    out.payloads.emplace_back(stream.substr(4, length));
    stream.remove_prefix(4 + length);
  }
  out.leftover = stream.size();
  return out;
}

// splitmix64: chunk sizes that depend on the input, so a crash replays.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Drains every complete payload, keeping the views until the end of the
// drain: the contract says they stay valid until the next prepare/append.
bool drain(FrameDecoder& decoder, Decoded& out) {
  std::vector<std::string_view> views;
  bool ok = true;
  try {
    while (auto payload = decoder.next()) views.push_back(*payload);
  } catch (const WireError&) {
    ok = false;
    out.oversized = true;
  }
  for (std::string_view v : views) out.payloads.emplace_back(v);
  return ok;
}

enum class Chunking { kWhole, kBytewise, kRandom };

Decoded decode(std::string_view stream, uint32_t limit, Chunking chunking, Random random) {
  FrameDecoder decoder(limit);
  Decoded out;
  // Now and then a prepare() past the 1 MiB a decoder keeps, as a large frame
  // causes, so that handing that memory back is exercised too (rarely: it
  // costs more than the rest of the input under ASan).
  bool huge_prepare = chunking == Chunking::kRandom && random.next() % 32 == 0;
  size_t offset = 0;
  do {
    size_t left = stream.size() - offset;
    size_t n = chunking == Chunking::kWhole ? left
               : chunking == Chunking::kBytewise ? std::min<size_t>(left, 1)
               : std::min<size_t>(left, random.next() % 4 == 0 ? random.next() % 512 : random.next() % 9);
    if (chunking == Chunking::kWhole) {
      decoder.append(stream.substr(offset, n));
    } else {
      size_t room = huge_prepare && offset == 0 ? (size_t{1} << 20) + 64 : n + random.next() % 64;
      char* space = decoder.prepare(room);
      std::copy_n(stream.data() + offset, n, space);
      decoder.commit(n);
    }
    offset += n;
    if (!drain(decoder, out)) return out;
  } while (offset < stream.size());
  out.leftover = decoder.bufferedBytes();
  return out;
}

// wire.h's request layouts by arithmetic on the bytes, without PayloadReader:
// 4 = u32, 8 = i64, b = bytes, l = string list.
bool matchesLayout(std::string_view payload) {
  static const char* const kLayouts[] = {nullptr, "4b", "bb", "b8", "b8", "bbb", "l8", "l", "b", "", "bb"};
  if (payload.empty()) return false;
  auto op = static_cast<uint8_t>(payload[0]);
  if (op == 0 || op >= std::size(kLayouts)) return false;
  std::string_view rest = payload.substr(1);
  auto skip = [&](uint64_t n) {
    if (rest.size() < n) return false;
    rest.remove_prefix(n);
    return true;
  };
  auto skipBytes = [&] { return rest.size() >= 4 && skip(4 + readBigEndian(rest.substr(0, 4))); };
  for (const char* f = kLayouts[op]; *f; ++f) {
    bool ok = *f == '4' ? skip(4) : *f == '8' ? skip(8) : *f == 'b' ? skipBytes() : false;
    if (*f == 'l' && rest.size() >= 4) {
      uint64_t count = readBigEndian(rest.substr(0, 4));
      ok = skip(4);
      for (uint64_t i = 0; ok && i < count; ++i) ok = skipBytes();
    }
    if (!ok) return false;
  }
  return rest.empty();
}

void checkPayload(std::string_view payload) {
  std::optional<Request> request = readRequest(payload);
  FUZZ_CHECK(request.has_value() == matchesLayout(payload),
             "PayloadReader %s a payload of %zu bytes that the layout %s", request ? "accepted" : "refused",
             payload.size(), request ? "refuses" : "accepts");
  if (!request) return;
  std::string frame = writeRequest(*request);
  FUZZ_CHECK(std::string_view(frame).substr(4) == payload, "%s read and written again differs (%zu vs %zu bytes)",
             storeOpName(request->op).c_str(), frame.size() - 4, payload.size());
}

void checkStream(std::string_view stream) {
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the input
  for (char c : stream) seed = (seed ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  // A small limit reaches the oversized-frame error that the server's
  // (64 MiB) never does on inputs of a few KiB.
  for (uint32_t limit : {kStoreMaxFrameBytes, uint32_t{48}}) {
    Decoded expected = referenceDecode(stream, limit);
    for (Chunking chunking : {Chunking::kWhole, Chunking::kBytewise, Chunking::kRandom}) {
      Decoded got = decode(stream, limit, chunking, Random{seed});
      FUZZ_CHECK(got == expected,
                 "limit %u, chunking %d: %zu payloads, oversized %d, %zu left over; expected %zu, %d, %zu", limit,
                 static_cast<int>(chunking), got.payloads.size(), got.oversized, got.leftover,
                 expected.payloads.size(), expected.oversized, expected.leftover);
    }
    if (limit == kStoreMaxFrameBytes) {
      for (const std::string& payload : expected.payloads) checkPayload(payload);
    }
  }
}

}  // namespace
}  // namespace dtrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrain::fuzz::checkStream(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
