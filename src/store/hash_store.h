// HashStore: an in-process Store, for threads standing in for ranks in tests
// and for a single-process job.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "store/store.h"

namespace dtrain {

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;

 private:
  bool allPresentLocked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace dtrain
