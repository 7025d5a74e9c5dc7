#include "store_model.h"

#include <algorithm>
#include <charconv>

#include "store/wire.h"

namespace dtrain::fuzz {
namespace {

std::string ok() { return FrameWriter(ReplyStatus::kOk).finish(); }

}  // namespace

int64_t StoreModel::clampedTimeout(int64_t timeout_ms) {
  return std::clamp<int64_t>(timeout_ms, 0, kMaxWaitMillis);
}

bool StoreModel::allPresent(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

std::string StoreModel::satisfiedReply(const Request& r) const {
  if (r.op == static_cast<uint8_t>(StoreOp::kGet)) {
    return FrameWriter(ReplyStatus::kOk).bytes(data_.at(r.keys[0])).finish();
  }
  return ok();
}

std::string StoreModel::timeoutReply(const Request& r) const {
  std::vector<std::string> missing;
  for (const auto& key : r.keys) {
    if (!data_.count(key)) missing.push_back(key);
  }
  return FrameWriter(ReplyStatus::kTimeout).strings(missing).i64(clampedTimeout(r.number)).finish();
}

std::string StoreModel::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return FrameWriter(ReplyStatus::kError).bytes("").finish();
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) return FrameWriter(ReplyStatus::kError).bytes("").finish();
  data_[key] = std::to_string(value);  // an ADD keeps an ephemeral key's owner
  return FrameWriter(ReplyStatus::kOk).i64(value).finish();
}

std::optional<std::string> StoreModel::execute(uint64_t client, const Request& r) {
  switch (static_cast<StoreOp>(r.op)) {
    case StoreOp::kSet:
      owner_.erase(r.keys[0]);
      data_[r.keys[0]] = r.value;
      return ok();
    case StoreOp::kSetEphemeral:
      owner_[r.keys[0]] = client;
      data_[r.keys[0]] = r.value;
      return ok();
    case StoreOp::kGet:
    case StoreOp::kWait:
      if (allPresent(r.keys)) return satisfiedReply(r);
      if (clampedTimeout(r.number) == 0) return timeoutReply(r);
      return std::nullopt;
    case StoreOp::kAdd:
      return add(r.keys[0], r.number);
    case StoreOp::kCompareSet: {
      auto it = data_.find(r.keys[0]);
      // c10d: an absent key matches only an empty `expected`.
      if (it == data_.end() && !r.expected.empty()) return FrameWriter(ReplyStatus::kOk).bytes(r.expected).finish();
      if (it == data_.end()) it = data_.emplace(r.keys[0], r.value).first;
      else if (it->second == r.expected) it->second = r.value;
      return FrameWriter(ReplyStatus::kOk).bytes(it->second).finish();
    }
    case StoreOp::kCheck:
      return FrameWriter(ReplyStatus::kOk).u8(allPresent(r.keys) ? 1 : 0).finish();
    case StoreOp::kDeleteKey: {
      owner_.erase(r.keys[0]);
      bool existed = data_.erase(r.keys[0]) > 0;
      return FrameWriter(ReplyStatus::kOk).u8(existed ? 1 : 0).finish();
    }
    case StoreOp::kNumKeys:
      return FrameWriter(ReplyStatus::kOk).i64(static_cast<int64_t>(data_.size())).finish();
    case StoreOp::kHello:
      break;
  }
  return std::nullopt;
}

void StoreModel::forget(uint64_t client) {
  for (auto it = owner_.begin(); it != owner_.end();) {
    if (it->second == client) {
      data_.erase(it->first);
      it = owner_.erase(it);
    } else {
      ++it;
    }
  }
}

bool sameReply(const std::string& got, const std::string& expected) {
  constexpr auto kError = static_cast<char>(ReplyStatus::kError);
  if (expected.size() > 4 && expected[4] == kError) return got.size() > 4 && got[4] == kError;
  return got == expected;
}

}  // namespace dtrain::fuzz
