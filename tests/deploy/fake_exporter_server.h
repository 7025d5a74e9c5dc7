// A tiny HTTP/1.1 server on 127.0.0.1 that answers fixed bodies by path, so
// a browser can load the live page and its api/* JSON without a real
// exporter. One thread accepts; one thread per connection answers one request
// and closes it.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::testing {

struct FakeResponse {
  std::string content_type;
  std::string body;
};

class FakeExporterServer {
 public:
  // Paths are matched without their query string; others answer 404.
  explicit FakeExporterServer(std::map<std::string, FakeResponse> routes);
  ~FakeExporterServer();
  FakeExporterServer(const FakeExporterServer&) = delete;
  FakeExporterServer& operator=(const FakeExporterServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  // Paths requested so far, in order.
  std::vector<std::string> requestedPaths();

 private:
  void acceptLoop();
  void answer(int fd);

  const std::map<std::string, FakeResponse> routes_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;  // GUARDED_BY(mutex_)
  std::vector<std::string> requested_;    // GUARDED_BY(mutex_)
};

}  // namespace dtrain::testing
