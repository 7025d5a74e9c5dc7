#include "store/prefix_store.h"

namespace dtrain {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  setTimeout(store_->timeout());
}

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(join(key));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { store_->set(join(key), value); }
void PrefixStore::setEphemeral(const std::string& key, const std::string& value) {
  store_->setEphemeral(join(key), value);
}
std::string PrefixStore::get(const std::string& key) {
  const std::string full_key = join(key);
  // get() blocks for the underlying store's timeout; when this view was given
  // a different one, wait under ours first so setTimeout() here takes effect.
  if (timeout() != store_->timeout()) store_->wait({full_key}, timeout());
  return store_->get(full_key);
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return store_->add(join(key), delta); }
std::string PrefixStore::compareSet(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  return store_->compareSet(join(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(join(keys), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(join(keys)); }
bool PrefixStore::deleteKey(const std::string& key) { return store_->deleteKey(join(key)); }
int64_t PrefixStore::numKeys() { return store_->numKeys(); }

}  // namespace dtrain
