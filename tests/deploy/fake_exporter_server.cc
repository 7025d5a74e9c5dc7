#include "fake_exporter_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::testing {

FakeExporterServer::FakeExporterServer(std::map<std::string, FakeResponse> routes) : routes_(std::move(routes)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error(std::string("bind/listen on 127.0.0.1: ") + std::strerror(err));
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

FakeExporterServer::~FakeExporterServer() {
  // shutdown() wakes the blocked accept(); close() alone would not.
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& t : connections_) t.join();
}

std::vector<std::string> FakeExporterServer::requestedPaths() {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_;
}

void FakeExporterServer::acceptLoop() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.emplace_back([this, fd] { answer(fd); });
  }
}

void FakeExporterServer::answer(int fd) {
  // A browser may open a connection it never uses; don't wait on it forever.
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char chunk[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    request.append(chunk, static_cast<size_t>(n));
  }
  size_t path_begin = request.find(' ');
  size_t path_end = path_begin == std::string::npos ? path_begin : request.find(' ', path_begin + 1);
  if (path_end == std::string::npos) {
    ::close(fd);
    return;
  }
  std::string path = request.substr(path_begin + 1, path_end - path_begin - 1);
  path = path.substr(0, path.find('?'));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_.push_back(path);
  }
  auto route = routes_.find(path);
  std::string status = route == routes_.end() ? "404 Not Found" : "200 OK";
  std::string content_type = route == routes_.end() ? "text/plain" : route->second.content_type;
  std::string body = route == routes_.end() ? "not found\n" : route->second.body;
  std::string response = "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
                          "\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n" + body;
  for (size_t sent = 0; sent < response.size();) {
    ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace dtrain::testing
