// Lets Gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) use a
// dtrain::Store. Gloo writes one key per rank holding its listening
// addresses and waits for its peers' keys.
#pragma once

#include <memory>

#include <gloo/rendezvous/store.h>

#include "comm/types.h"

namespace dtrain {

class Store;

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds every get() and the wait() without a timeout; a wait
  // that passes its deadline throws dtrain::TimeoutError naming the keys.
  GlooStoreAdapter(std::shared_ptr<dtrain::Store> store, Milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists (Gloo reads peers' keys without waiting first).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<dtrain::Store> store_;
  Milliseconds timeout_;
};

}  // namespace dtrain
