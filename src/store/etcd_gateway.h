// EtcdGateway: EtcdStore's way to etcd (store/, private to etcd_store.cc).
// One JSON request to the v3 gateway, failed over between the endpoints until
// a deadline; endpoint parsing and the base64 of keys and values.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::etcd {

class ConnectionPool;

using Clock = std::chrono::steady_clock;

struct Endpoint {
  std::string host;  // without brackets: "10.0.0.1", "::1"
  uint16_t port = 0;
  std::string text;  // "10.0.0.1:2379", "[::1]:2379"
};

// One "host:port" entry (optionally "http://host:port"); `input` is the whole
// text it came from, for the ConfigError.
Endpoint parseEndpoint(std::string_view entry, const std::string& input);

std::string base64Encode(std::string_view bytes);
// IoError naming `what` when `text` is not base64 (etcd never sends that).
std::string base64Decode(std::string_view text, const std::string& what);

// An int64 field of etcd's JSON (proto3 sends them as strings and leaves out
// zeros): 0 when absent.
int64_t int64Field(const nlohmann::json& object, const char* name);

// What etcd answered. `code` is 0 for a success; otherwise etcd refused the
// request for good (a gRPC status code other than "unavailable": 3 invalid
// argument, 5 not found, ...) and `message` says why.
struct Reply {
  nlohmann::json body;
  int code = 0;
  std::string message;
  // An earlier attempt of this request failed after it may have reached
  // etcd (no reply, or an error reply), so a write may already be applied.
  bool may_have_applied_before = false;
};

class Gateway {
 public:
  Gateway(std::vector<Endpoint> endpoints, std::chrono::milliseconds request_timeout);
  ~Gateway();

  // POSTs `request` to `path` ("/v3/kv/range"), failing over between the
  // endpoints until `deadline`, then IoError "lost the connection to etcd
  // (tried A, B, C) while <what>: <last error>". Every request is sent at
  // least once, however close the deadline.
  Reply post(const std::string& path, const nlohmann::json& request, Clock::time_point deadline,
             const std::string& what);
  // post() for the first contact: TimeoutError "could not reach etcd at
  // A, B, C within N s: <each endpoint's last error>" after `timeout`.
  Reply connect(const std::string& path, const nlohmann::json& request, std::chrono::milliseconds timeout);

  const std::string& describe() const { return describe_; }  // "etcd at A,B,C"
  const std::vector<std::string>& endpointTexts() const { return texts_; }
  std::string currentEndpoint() const { return endpoints_[current_.load()].text; }

 private:
  struct Failure {
    std::vector<std::string> per_endpoint;  // each endpoint's last error
    std::string last;                       // "A: why", the latest of them
  };
  std::optional<Reply> postUntil(const std::string& path, const nlohmann::json& request,
                                 Clock::time_point deadline, Failure& failure);

  std::vector<Endpoint> endpoints_;
  // Per endpoint, its idle keep-alive connections.
  std::vector<std::unique_ptr<ConnectionPool>> pools_;
  std::vector<std::string> texts_;
  std::chrono::milliseconds request_timeout_;
  std::string describe_;
  std::string tried_;  // "A, B, C"
  // The endpoint that last answered; requests start there.
  std::atomic<size_t> current_{0};
};

}  // namespace dtrain::etcd
