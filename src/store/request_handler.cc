#include "store/request_handler.h"

#include <algorithm>
#include <charconv>

namespace dtrain {
namespace {

// A wait longer than this is "forever"; clamping keeps deadline arithmetic
// far from overflow whatever a client sends.
constexpr int64_t kMaxWaitMillis = int64_t{365} * 24 * 3600 * 1000;

std::string okReply() { return FrameWriter(ReplyStatus::kOk).finish(); }

std::string errorReply(const std::string& message) {
  return FrameWriter(ReplyStatus::kError).bytes(message).finish();
}

std::string timeoutReply(const std::vector<std::string>& missing, int64_t timeout_ms) {
  return FrameWriter(ReplyStatus::kTimeout).strings(missing).i64(timeout_ms).finish();
}

}  // namespace

std::optional<std::string> StoreRequestHandler::handle(ClientId client, std::string_view payload,
                                                       Clock::time_point now) {
  PayloadReader in(payload);
  uint8_t op = in.u8("op");
  // Every branch reads and validates all fields before it touches the table,
  // so a malformed request changes nothing.
  switch (static_cast<StoreOp>(op)) {
    case StoreOp::kSet: {
      std::string key = in.bytes("key");
      std::string value = in.bytes("value");
      in.expectEnd("SET");
      disown(key);
      put(key, std::move(value));
      return okReply();
    }
    case StoreOp::kSetEphemeral: {
      std::string key = in.bytes("key");
      std::string value = in.bytes("value");
      in.expectEnd("SET_EPHEMERAL");
      disown(key);
      owned_keys_[client].insert(key);
      owner_of_[key] = client;
      put(key, std::move(value));
      return okReply();
    }
    case StoreOp::kGet: {
      std::string key = in.bytes("key");
      int64_t timeout_ms = in.i64("timeout_ms");
      in.expectEnd("GET");
      return deferUnlessPresent(client, StoreOp::kGet, {std::move(key)}, timeout_ms, now);
    }
    case StoreOp::kAdd: {
      std::string key = in.bytes("key");
      int64_t delta = in.i64("delta");
      in.expectEnd("ADD");
      return handleAdd(std::move(key), delta);
    }
    case StoreOp::kCompareSet: {
      std::string key = in.bytes("key");
      std::string expected = in.bytes("expected");
      std::string desired = in.bytes("desired");
      in.expectEnd("COMPARE_SET");
      return handleCompareSet(std::move(key), expected, std::move(desired));
    }
    case StoreOp::kWait: {
      std::vector<std::string> keys;
      if (auto refusal = readKeys(in, "WAIT", keys)) return refusal;
      int64_t timeout_ms = in.i64("timeout_ms");
      in.expectEnd("WAIT");
      return deferUnlessPresent(client, StoreOp::kWait, std::move(keys), timeout_ms, now);
    }
    case StoreOp::kCheck: {
      std::vector<std::string> keys;
      if (auto refusal = readKeys(in, "CHECK", keys)) return refusal;
      in.expectEnd("CHECK");
      return FrameWriter(ReplyStatus::kOk).u8(allPresent(keys) ? 1 : 0).finish();
    }
    case StoreOp::kDeleteKey: {
      std::string key = in.bytes("key");
      in.expectEnd("DELETE_KEY");
      disown(key);
      bool existed = erase(key);
      return FrameWriter(ReplyStatus::kOk).u8(existed ? 1 : 0).finish();
    }
    case StoreOp::kNumKeys:
      in.expectEnd("NUM_KEYS");
      return FrameWriter(ReplyStatus::kOk).i64(static_cast<int64_t>(data_.size())).finish();
    case StoreOp::kHello:
      throw WireError("HELLO sent again on a connection that already said HELLO");
  }
  throw WireError("unknown op " + std::to_string(op));
}

std::optional<std::string> StoreRequestHandler::readKeys(PayloadReader& in, const char* op_name,
                                                         std::vector<std::string>& keys) const {
  PayloadReader probe = in;
  uint32_t count = probe.u32("keys");
  if (count > max_keys_per_request_) {
    // The frame is already cut out of the stream, so refusing it here keeps
    // the connection in step; the rest of the frame is never parsed.
    return errorReply(std::string(op_name) + " of " + std::to_string(count) +
                      " keys exceeds the limit of " + std::to_string(max_keys_per_request_) +
                      " keys per request; split the keys over several requests");
  }
  keys = in.strings("keys");
  return std::nullopt;
}

void StoreRequestHandler::put(const std::string& key, std::string value) {
  if (data_.insert_or_assign(key, std::move(value)).second) keyCreated(key);
}

bool StoreRequestHandler::erase(const std::string& key) {
  if (data_.erase(key) == 0) return false;
  keyRemoved(key);
  return true;
}

std::string StoreRequestHandler::handleAdd(std::string key, int64_t delta) {
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
      return errorReply("add on key '" + key + "': its value '" + text + "' is not an integer");
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return errorReply("add on key '" + key + "' overflows a 64-bit integer");
  }
  put(key, std::to_string(value));
  return FrameWriter(ReplyStatus::kOk).i64(value).finish();
}

std::string StoreRequestHandler::handleCompareSet(std::string key, const std::string& expected,
                                                  std::string desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    // c10d semantics: an absent key matches only an empty `expected`, and
    // otherwise the reply is `expected` itself.
    if (!expected.empty()) return FrameWriter(ReplyStatus::kOk).bytes(expected).finish();
    it = data_.emplace(key, std::move(desired)).first;
    keyCreated(key);
  } else if (it->second == expected) {
    it->second = std::move(desired);
  }
  return FrameWriter(ReplyStatus::kOk).bytes(it->second).finish();
}

std::optional<std::string> StoreRequestHandler::deferUnlessPresent(
    ClientId client, StoreOp op, std::vector<std::string> keys, int64_t timeout_ms,
    Clock::time_point now) {
  if (allPresent(keys)) return satisfiedReply(op, keys);
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, kMaxWaitMillis);
  if (timeout_ms == 0) return timeoutReply(missingKeys(keys), timeout_ms);  // a poll, not a wait
  if (isDeferred(client)) throw WireError("a second request while a wait is pending");
  auto deadline = deadlines_.emplace(now + std::chrono::milliseconds(timeout_ms), client);
  // Indexed under every key, present or not: a present key may be deleted
  // and set again before the others arrive. A key named twice counts once.
  size_t missing = 0;
  for (const auto& key : keys) {
    if (waiters_by_key_[key].insert(client).second && data_.count(key) == 0) ++missing;
  }
  deferred_.emplace(client, Deferred{op, std::move(keys), missing, timeout_ms, deadline});
  return std::nullopt;
}

std::string StoreRequestHandler::satisfiedReply(StoreOp op, const std::vector<std::string>& keys) const {
  if (op == StoreOp::kGet) return FrameWriter(ReplyStatus::kOk).bytes(data_.at(keys[0])).finish();
  return okReply();
}

bool StoreRequestHandler::allPresent(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

std::vector<std::string> StoreRequestHandler::missingKeys(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (!data_.count(key)) missing.push_back(key);
  }
  return missing;
}

void StoreRequestHandler::keyCreated(const std::string& key) {
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) return;
  std::vector<ClientId> done;
  for (ClientId client : it->second) {
    if (--deferred_.at(client).missing == 0) done.push_back(client);
  }
  // release() edits the set walked above, so it runs after the walk.
  for (ClientId client : done) {
    Deferred request = release(client);
    completed_.push_back({client, satisfiedReply(request.op, request.keys)});
  }
}

void StoreRequestHandler::keyRemoved(const std::string& key) {
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) return;
  for (ClientId client : it->second) ++deferred_.at(client).missing;
}

StoreRequestHandler::Deferred StoreRequestHandler::release(ClientId client) {
  auto node = deferred_.extract(client);
  Deferred& request = node.mapped();
  deadlines_.erase(request.deadline);
  for (const auto& key : request.keys) {
    auto it = waiters_by_key_.find(key);
    if (it == waiters_by_key_.end()) continue;
    it->second.erase(client);
    if (it->second.empty()) waiters_by_key_.erase(it);
  }
  return std::move(request);
}

std::vector<StoreReply> StoreRequestHandler::takeCompleted() {
  std::vector<StoreReply> out;
  out.swap(completed_);
  return out;
}

std::vector<StoreReply> StoreRequestHandler::expire(Clock::time_point now, size_t max_keys) {
  std::vector<StoreReply> out;
  size_t keys_released = 0;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now && keys_released < max_keys) {
    ClientId client = deadlines_.begin()->second;
    Deferred request = release(client);
    keys_released += request.keys.size();
    out.push_back({client, timeoutReply(missingKeys(request.keys), request.timeout_ms)});
  }
  return out;
}

std::optional<StoreRequestHandler::Clock::time_point> StoreRequestHandler::nextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void StoreRequestHandler::forget(ClientId client) {
  if (isDeferred(client)) release(client);
  auto owned = owned_keys_.find(client);
  if (owned == owned_keys_.end()) return;
  for (const auto& key : owned->second) {
    erase(key);
    owner_of_.erase(key);
  }
  owned_keys_.erase(owned);
}

void StoreRequestHandler::disown(const std::string& key) {
  auto owner = owner_of_.find(key);
  if (owner == owner_of_.end()) return;
  auto owned = owned_keys_.find(owner->second);
  if (owned != owned_keys_.end()) {
    owned->second.erase(key);
    if (owned->second.empty()) owned_keys_.erase(owned);
  }
  owner_of_.erase(owner);
}

}  // namespace dtrain
