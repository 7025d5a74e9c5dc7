#include "comm/gloo/store_adapter.h"

#include "store/store.h"

namespace dtrain {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<dtrain::Store> store, Milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  store_->wait({key}, timeout_);
  const std::string value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout; kNoTimeout (0) there means "forever",
  // which a training job never wants, so the adapter's own bound applies.
  store_->wait(keys, timeout.count() > 0 ? timeout : timeout_);
}

}  // namespace dtrain
