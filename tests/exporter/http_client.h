// A minimal HTTP/1.1 client over a raw socket for the exporter's tests: it
// can send what a well-behaved client would not (64 KiB headers, many
// connections at once). httpGet/httpRequest send "Connection: close"; a
// response is complete at its Content-Length, or else at EOF; a chunked body
// is decoded.
#pragma once

#include <string>

namespace dtrain::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (refused, reset, timed out)
  std::string headers;  // the header block as sent
  std::string body;
  std::string header(const std::string& name) const;  // case-insensitive, "" when absent
};

// Sends `raw` to 127.0.0.1:port as is and reads the response.
HttpResponse httpExchange(int port, const std::string& raw, int timeout_s = 10);
HttpResponse httpGet(int port, const std::string& path_and_query, int timeout_s = 10);
HttpResponse httpRequest(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         int timeout_s = 10);
HttpResponse parseHttpResponse(const std::string& data);
// Reads one response from fd: to its Content-Length, else to EOF.
std::string readResponse(int fd, int timeout_s);
int connectLoopback(int port, int timeout_s);  // -1 on failure
bool sendAll(int fd, const std::string& data);
std::string readToEof(int fd, int timeout_s);
// Polls GET /healthz until it answers 200 or timeout_s passes.
bool waitForHealthy(int port, int timeout_s);
// Percent-encodes a query-string value.
std::string urlEncode(const std::string& text);

}  // namespace dtrain::testing
