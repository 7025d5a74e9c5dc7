// The input of the request handler fuzzer: a script of what several clients
// of one server do, one record after another:
//
//   u8 c with c & 3 = the client slot, (c >> 2) & 3 = the action:
//     0, 1  DATA        u8 n, then n bytes the client sends (fewer at the end)
//     2     ADVANCE     u16 milliseconds (big-endian) the clock moves on
//     3     DISCONNECT  the client's connection closes; the slot's next DATA
//                       comes from a new connection
//
// ScriptWriter builds scripts (the seed corpus); ScriptReader reads them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain::fuzz {

inline constexpr int kScriptClients = 4;

enum class ScriptAction { kData, kAdvance, kDisconnect };

struct ScriptRecord {
  ScriptAction action;
  int slot;
  std::string_view data;  // kData
  uint32_t millis = 0;    // kAdvance
};

class ScriptReader {
 public:
  explicit ScriptReader(std::string_view script) : rest_(script) {}

  bool next(ScriptRecord& record) {
    if (rest_.empty()) return false;
    auto command = static_cast<uint8_t>(take(1)[0]);
    record.slot = command & 3;
    switch ((command >> 2) & 3) {
      case 2: {
        std::string_view ms = take(2);
        record.action = ScriptAction::kAdvance;
        record.millis = 0;
        for (char c : ms) record.millis = (record.millis << 8) | static_cast<uint8_t>(c);
        return true;
      }
      case 3:
        record.action = ScriptAction::kDisconnect;
        return true;
      default: {
        std::string_view n = take(1);
        record.action = ScriptAction::kData;
        record.data = take(n.empty() ? 0 : static_cast<uint8_t>(n[0]));
        return true;
      }
    }
  }

 private:
  std::string_view take(size_t n) {
    std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(out.size());
    return out;
  }
  std::string_view rest_;
};

class ScriptWriter {
 public:
  // Bytes the client sends; a long stream becomes several records.
  ScriptWriter& data(int slot, std::string_view bytes) {
    do {
      std::string_view chunk = bytes.substr(0, 255);
      script_ += static_cast<char>(slot);
      script_ += static_cast<char>(chunk.size());
      script_.append(chunk);
      bytes.remove_prefix(chunk.size());
    } while (!bytes.empty());
    return *this;
  }
  ScriptWriter& advance(uint16_t millis) {
    script_ += static_cast<char>(2 << 2);
    script_ += static_cast<char>(millis >> 8);
    script_ += static_cast<char>(millis & 0xff);
    return *this;
  }
  ScriptWriter& disconnect(int slot) {
    script_ += static_cast<char>((3 << 2) | slot);
    return *this;
  }
  const std::string& script() const { return script_; }

 private:
  std::string script_;
};

}  // namespace dtrain::fuzz
