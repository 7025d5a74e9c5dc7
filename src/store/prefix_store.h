// PrefixStore: a view of another store with every key under "<prefix>/".
// Generations of a restarted job use one each ("/run/<id>/gen/<n>"), so a new
// attempt never reads the last attempt's keys. numKeys() counts the whole
// underlying store (as c10d's PrefixStore does).
#pragma once

#include <memory>

#include "store/store.h"

namespace dtrain {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

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
  void setEphemeral(const std::string& key, const std::string& value) override;

  const std::string& prefix() const { return prefix_; }
  std::shared_ptr<Store> underlying() const { return store_; }

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace dtrain
