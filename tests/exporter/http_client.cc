#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <cstdio>
#include <thread>

namespace dtrain::testing {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string decodeChunked(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t size = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) break;
    out += body.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return out;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  std::string wanted = lower(name) + ":";
  size_t pos = 0;
  while (pos < headers.size()) {
    size_t eol = headers.find("\r\n", pos);
    if (eol == std::string::npos) eol = headers.size();
    std::string line = headers.substr(pos, eol - pos);
    if (lower(line).starts_with(wanted)) {
      std::string value = line.substr(wanted.size());
      value.erase(0, value.find_first_not_of(' '));
      return value;
    }
    pos = eol + 2;
  }
  return "";
}

int connectLoopback(int port, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    ::close(fd);
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool sendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until `done(data)`, the peer closes, or the timeout.
static std::string readUntil(int fd, int timeout_s, const std::function<bool(const std::string&)>& done) {
  std::string data;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[65536];
  while (!done(data)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

std::string readToEof(int fd, int timeout_s) {
  return readUntil(fd, timeout_s, [](const std::string&) { return false; });
}

HttpResponse parseHttpResponse(const std::string& data) {
  HttpResponse response;
  size_t head_end = data.find("\r\n\r\n");
  if (!data.starts_with("HTTP/1.") || head_end == std::string::npos) return response;
  size_t status_at = data.find(' ');
  response.status = std::atoi(data.c_str() + status_at + 1);
  size_t first_eol = data.find("\r\n");
  response.headers = data.substr(first_eol + 2, head_end - first_eol - 2);
  response.body = data.substr(head_end + 4);
  if (lower(response.header("Transfer-Encoding")) == "chunked") response.body = decodeChunked(response.body);
  return response;
}

std::string readResponse(int fd, int timeout_s) {
  // Complete once the body has the Content-Length the headers announced; a
  // server may keep the connection open after that.
  return readUntil(fd, timeout_s, [](const std::string& data) {
    const size_t head_end = data.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    const std::string length = parseHttpResponse(data).header("Content-Length");
    return !length.empty() && data.size() - head_end - 4 >= std::stoul(length);
  });
}

HttpResponse httpExchange(int port, const std::string& raw, int timeout_s) {
  int fd = connectLoopback(port, 1);
  if (fd < 0) return {};
  HttpResponse response;
  if (sendAll(fd, raw)) response = parseHttpResponse(readResponse(fd, timeout_s));
  ::close(fd);
  return response;
}

HttpResponse httpRequest(int port, const std::string& method, const std::string& path, const std::string& body,
                         int timeout_s) {
  std::string raw = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                    "\r\nConnection: close\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    raw += "Content-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return httpExchange(port, raw + "\r\n" + body, timeout_s);
}

HttpResponse httpGet(int port, const std::string& path_and_query, int timeout_s) {
  return httpRequest(port, "GET", path_and_query, "", timeout_s);
}

bool waitForHealthy(int port, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (httpGet(port, "/healthz", 2).status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string urlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace dtrain::testing
