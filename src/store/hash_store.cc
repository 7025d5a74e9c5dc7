#include "store/hash_store.h"

#include "common/error.h"
#include "common/settings.h"

namespace dtrain {

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string HashStore::get(const std::string& key) {
  wait({key}, timeout());
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    if (it != data_.end()) value = parseInt64(it->second, "store counter '" + key + "'");
    value += delta;
    data_[key] = std::to_string(value);
  }
  cv_.notify_all();
  return value;
}

std::string HashStore::compareSet(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return expected;  // c10d: absent key returns `expected`
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

bool HashStore::allPresentLocked(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (data_.find(key) == data_.end()) return false;
  }
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return allPresentLocked(keys); })) {
    std::string missing;
    for (const auto& key : keys) {
      if (data_.find(key) == data_.end()) missing += (missing.empty() ? "" : ", ") + key;
    }
    throw TimeoutError("store wait timed out after " + std::to_string(timeout.count()) +
                       " ms; keys never set: " + missing);
  }
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return allPresentLocked(keys);
}

bool HashStore::deleteKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.erase(key) > 0;
}

int64_t HashStore::numKeys() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace dtrain
