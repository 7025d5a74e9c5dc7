// StoreModel: what StoreRequestHandler must answer, from wire.h's table and
// request_handler.h's contract, kept as a plain map. The handler fuzzer runs
// every request through both and compares the replies byte for byte.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "request_codec.h"

namespace dtrain::fuzz {

class StoreModel {
 public:
  // A wait longer than this is clamped to it (request_handler.cc's bound).
  static constexpr int64_t kMaxWaitMillis = int64_t{365} * 24 * 3600 * 1000;

  // The reply frame to a request that is answered at once, or nullopt when
  // it must be deferred (a GET or WAIT of missing keys with a timeout > 0).
  std::optional<std::string> execute(uint64_t client, const Request& request);
  // The reply a deferred request gets once all its keys exist.
  std::string satisfiedReply(const Request& request) const;
  std::string timeoutReply(const Request& request) const;
  bool allPresent(const std::vector<std::string>& keys) const;
  // The client's connection closed: its ephemeral keys go.
  void forget(uint64_t client);
  size_t size() const { return data_.size(); }

  static int64_t clampedTimeout(int64_t timeout_ms);

 private:
  std::string add(const std::string& key, int64_t delta);

  std::map<std::string, std::string> data_;
  std::map<std::string, uint64_t> owner_;  // keys set by SET_EPHEMERAL and not since ended
};

// An ERROR reply's message is free text: replies compare by status alone then.
bool sameReply(const std::string& got, const std::string& expected);

}  // namespace dtrain::fuzz
