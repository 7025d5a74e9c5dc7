// Requests as wire.h's table lays them out, read and written by the fuzz
// targets themselves: a fuzzer can then tell a well-formed request from a
// malformed one without asking the handler, and build seeds from fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::fuzz {

struct Request {
  uint8_t op = 0;
  std::vector<std::string> keys;  // the key, or WAIT's and CHECK's list
  std::string value;              // SET's value, CAS's desired, HELLO's token
  std::string expected;           // CAS
  int64_t number = 0;             // timeout_ms, ADD's delta, HELLO's version
};

// The request in a payload (op byte + fields), or nullopt when the payload
// does not match its op's layout exactly (or the op is unknown).
std::optional<Request> readRequest(std::string_view payload);
// The whole frame (header + payload) for a request of a known op.
std::string writeRequest(const Request& request);

}  // namespace dtrain::fuzz
