#include "store/etcd_gateway.h"

#include <httplib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/text.h"

namespace dtrain::etcd {
namespace {

// However little of the deadline is left, an attempt gets this long: a
// healthy etcd answers in about a millisecond.
constexpr std::chrono::milliseconds kMinAttemptTimeout{100};
// Between rounds over every endpoint.
constexpr std::chrono::milliseconds kFirstRoundBackoff{50};
constexpr std::chrono::milliseconds kMaxRoundBackoff{500};
// A reply larger than this is not etcd's (its requests are 1.5 MiB at most).
constexpr size_t kMaxReplyBytes = size_t{256} << 20;

// gRPC status codes the gateway passes on.
constexpr int kGrpcDeadlineExceeded = 4;
constexpr int kGrpcResourceExhausted = 8;
constexpr int kGrpcUnavailable = 14;

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Without the spaces and tabs around it (an HTTP header value).
std::string_view trimmedView(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool startsWithNoCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

std::string httpErrorText(httplib::Error error, std::chrono::milliseconds timeout) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::ConnectionTimeout:
      return "could not connect within " + secondsText(timeout) + " s";
    case httplib::Error::Read:
      return "no complete reply within " + secondsText(timeout) + " s (or the connection dropped)";
    case httplib::Error::Write:
      return "could not send the request";
    default:
      return "HTTP client error: " + httplib::to_string(error);
  }
}

}  // namespace

Endpoint parseEndpoint(std::string_view entry, const std::string& input) {
  const std::string shown(trimmedView(entry));
  auto refuse = [&](const std::string& problem) {
    return ConfigError("etcd endpoints '" + input + "': " + problem +
                       "; expected host:port entries separated by commas, e.g. "
                       "10.0.0.1:2379,10.0.0.2:2379 (IPv6 as [fd00::1]:2379; an http:// "
                       "before an entry is allowed)");
  };
  std::string_view rest = trimmedView(entry);
  if (rest.empty()) throw refuse("an entry is empty");
  if (startsWithNoCase(rest, "https://")) {
    throw refuse("'" + shown + "' uses https://, but the store speaks plain HTTP to etcd");
  }
  if (startsWithNoCase(rest, "http://")) rest.remove_prefix(7);
  if (rest.find("://") != std::string_view::npos) throw refuse("'" + shown + "' has an unknown scheme");
  Endpoint endpoint;
  std::string_view port_text;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) throw refuse("'" + shown + "' has no ']' after its IPv6 address");
    endpoint.host = std::string(rest.substr(1, close - 1));
    if (rest.substr(close + 1).starts_with(':'))
      port_text = rest.substr(close + 2);
    else if (close + 1 != rest.size())
      throw refuse("'" + shown + "' has text after ']' that is not :port");
  } else {
    const size_t colon = rest.rfind(':');
    endpoint.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port_text = rest.substr(colon + 1);
    if (endpoint.host.find(':') != std::string::npos) {
      throw refuse("'" + shown + "' is an IPv6 address without brackets");
    }
  }
  if (endpoint.host.empty()) throw refuse("'" + shown + "' has no host");
  if (port_text.empty()) throw refuse("'" + shown + "' has no port");
  unsigned port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
    throw refuse("'" + shown + "' has port '" + std::string(port_text) + "', not a number in 1..65535");
  }
  endpoint.port = static_cast<uint16_t>(port);
  const bool ipv6 = endpoint.host.find(':') != std::string::npos;
  endpoint.text = (ipv6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" + std::to_string(port);
  return endpoint;
}

std::string base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) {
      group = (group << 8) | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
    }
    for (size_t j = 0; j < 4; ++j) {
      out += j <= n ? kBase64Alphabet[(group >> (18 - 6 * j)) & 63] : '=';
    }
  }
  return out;
}

std::string base64Decode(std::string_view text, const std::string& what) {
  static const std::array<int, 256> kValue = [] {
    std::array<int, 256> value{};
    value.fill(-1);
    for (size_t i = 0; i < kBase64Alphabet.size(); ++i) {
      value[static_cast<unsigned char>(kBase64Alphabet[i])] = static_cast<int>(i);
    }
    return value;
  }();
  auto bad = [&] { return IoError("etcd sent " + what + " that is not base64"); };
  if (text.size() % 4 != 0) throw bad();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t group = 0;
    size_t padding = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      const bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && j >= 2 && (j == 3 || text[i + 3] == '=')) {
        ++padding;
        group <<= 6;
        continue;
      }
      const int value = kValue[static_cast<unsigned char>(c)];
      if (value < 0 || padding > 0) throw bad();
      group = (group << 6) | static_cast<uint32_t>(value);
    }
    for (size_t j = 0; j < 3 - padding; ++j) out += static_cast<char>((group >> (16 - 8 * j)) & 0xff);
  }
  return out;
}

int64_t int64Field(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc() && end == text.data() + text.size()) return value;
  }
  throw IoError(std::string("etcd sent a field '") + name + "' that is not an integer: " + it->dump());
}

// Idle keep-alive connections to one endpoint. A connection is used by one
// request at a time: taken out, and put back only after a clean exchange.
class ConnectionPool {
 public:
  std::unique_ptr<httplib::Client> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.empty()) return nullptr;
    auto client = std::move(idle_.back());
    idle_.pop_back();
    return client;
  }
  void putBack(std::unique_ptr<httplib::Client> client) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(client));
  }

 private:
  static constexpr size_t kMaxIdle = 8;
  std::mutex mutex_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // guarded by mutex_
};

namespace {

struct Attempt {
  bool answered = false;  // etcd's JSON came back: a success or a refusal
  Reply reply;
  std::string error;  // why not answered
  bool may_have_applied = false;
};

// One request and what came back of it.
struct Exchange {
  httplib::Error error = httplib::Error::Unknown;
  int status = 0;  // 0: no reply header
  std::string received;
};

std::unique_ptr<httplib::Client> newClient(const Endpoint& endpoint) {
  auto client = std::make_unique<httplib::Client>(endpoint.host, endpoint.port);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);  // headers and body go in two writes: no 40 ms Nagle wait
  return client;
}

Exchange exchange(httplib::Client& client, const Endpoint& endpoint, const std::string& path,
                  const std::string& body, std::chrono::milliseconds timeout) {
  const auto seconds = static_cast<time_t>(timeout.count() / 1000);
  const auto micros = static_cast<time_t>(timeout.count() % 1000 * 1000);
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  client.set_write_timeout(seconds, micros);
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  if (endpoint.host.find(':') != std::string::npos) request.set_header("Host", endpoint.text);
  // The status and the body are taken as they arrive: the gateway ends an
  // error reply with HTTP trailers, which cpp-httplib 0.11 reads as a failed
  // read after the whole body came.
  Exchange result;
  request.response_handler = [&](const httplib::Response& response) {
    result.status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    result.received.append(data, size);
    return result.received.size() <= kMaxReplyBytes;
  };
  try {
    result.error = client.send(request).error();
  } catch (const std::exception& e) {
    result.error = httplib::Error::Unknown;
    result.received = std::string("HTTP client error: ") + e.what();
    result.status = 0;
  }
  return result;
}

// What one exchange says: answered (a success, or a refusal for good), or a
// failure to try elsewhere.
void judge(const Exchange& result, std::chrono::milliseconds timeout, Attempt& attempt) {
  nlohmann::json json = nlohmann::json::parse(result.received, nullptr, false);
  const bool is_json = !json.is_discarded() && json.is_object();
  if (result.error != httplib::Error::Success && !(result.status != 0 && is_json)) {
    attempt.error = result.error == httplib::Error::Unknown && !result.received.empty()
                        ? result.received
                        : httpErrorText(result.error, timeout);
    attempt.may_have_applied =
        attempt.may_have_applied ||
        (result.error != httplib::Error::Connection && result.error != httplib::Error::ConnectionTimeout);
    return;
  }
  attempt.may_have_applied = true;  // from here on, etcd had the request
  const int status = result.status;
  if (!is_json) {
    attempt.error = "answered HTTP " + std::to_string(status) +
                    " with something other than etcd's JSON: " + result.received.substr(0, 200);
    return;
  }
  // Errors come as {"error": "...", "message": "...", "code": N}, or from the
  // streaming calls (lease keep-alive) as {"error": {"grpc_code": N, "message": "..."}}.
  int code = 0;
  std::string message;
  if (auto it = json.find("error"); it != json.end()) {
    if (it->is_object()) {
      code = it->value("grpc_code", 0);
      message = it->value("message", "");
    } else {
      code = json.value("code", 0);
      message = json.value("message", it->is_string() ? it->get<std::string>() : it->dump());
    }
    if (code == 0) code = 2;  // unknown
  } else if (status < 200 || status >= 300) {
    code = 2;
    message = json.dump();
  }
  const bool retry = status >= 500 || status == 429 || code == kGrpcUnavailable ||
                     code == kGrpcDeadlineExceeded || code == kGrpcResourceExhausted;
  if (retry) {
    attempt.error = "HTTP " + std::to_string(status) + ": " + (message.empty() ? json.dump() : message);
    return;
  }
  attempt.answered = true;
  attempt.reply.body = std::move(json);
  attempt.reply.code = code;
  attempt.reply.message = std::move(message);
}

Attempt attemptOnce(ConnectionPool& pool, const Endpoint& endpoint, const std::string& path,
                    const std::string& body, std::chrono::milliseconds timeout) {
  std::unique_ptr<httplib::Client> client = pool.take();
  const bool reused = client != nullptr;
  if (!reused) client = newClient(endpoint);
  const auto sent = Clock::now();
  Exchange result = exchange(*client, endpoint, path, body, timeout);
  // A kept-alive connection the server has closed since fails at once, with
  // no reply: that is no news about the endpoint, so once more on a new one.
  // (Should the server have died with the request in hand instead, the
  // request may have been applied.)
  Attempt attempt;
  if (reused && result.status == 0 && result.error != httplib::Error::Success &&
      Clock::now() - sent < timeout / 2) {
    attempt.may_have_applied = true;
    attempt.reply.may_have_applied_before = true;
    client = newClient(endpoint);
    result = exchange(*client, endpoint, path, body, timeout);
  }
  if (result.error == httplib::Error::Success) pool.putBack(std::move(client));

  try {
    judge(result, timeout, attempt);
  } catch (const nlohmann::json::exception& e) {  // JSON, but not shaped as etcd's
    attempt = Attempt{};
    attempt.error = std::string("answered with JSON etcd would not send: ") + e.what();
    attempt.may_have_applied = true;
  }
  return attempt;
}

}  // namespace

Gateway::Gateway(std::vector<Endpoint> endpoints, std::chrono::milliseconds request_timeout)
    : endpoints_(std::move(endpoints)), request_timeout_(request_timeout) {
  for (const auto& endpoint : endpoints_) {
    pools_.push_back(std::make_unique<ConnectionPool>());
    texts_.push_back(endpoint.text);
    describe_ += (describe_.empty() ? "etcd at " : ",") + endpoint.text;
    tried_ += (tried_.empty() ? "" : ", ") + endpoint.text;
  }
}

Gateway::~Gateway() = default;

std::optional<Reply> Gateway::postUntil(const std::string& path, const nlohmann::json& request,
                                        Clock::time_point deadline, Failure& failure) {
  const std::string body = request.dump();
  const size_t count = endpoints_.size();
  for (const auto& endpoint : endpoints_) failure.per_endpoint.push_back(endpoint.text + ": not tried");
  bool may_have_applied = false;
  auto backoff = kFirstRoundBackoff;
  while (true) {
    const size_t start = current_.load();
    for (size_t i = 0; i < count; ++i) {
      const size_t index = (start + i) % count;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      const auto timeout = std::min(request_timeout_, std::max(left, kMinAttemptTimeout));
      Attempt attempt = attemptOnce(*pools_[index], endpoints_[index], path, body, timeout);
      if (attempt.answered) {
        current_.store(index);
        attempt.reply.may_have_applied_before = attempt.reply.may_have_applied_before || may_have_applied;
        return std::move(attempt.reply);
      }
      may_have_applied = may_have_applied || attempt.may_have_applied;
      failure.per_endpoint[index] = endpoints_[index].text + ": " + attempt.error;
      failure.last = failure.per_endpoint[index];
      if (Clock::now() >= deadline) return std::nullopt;
    }
    // Every endpoint failed this round: a leader election, or all down.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, kMaxRoundBackoff);
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

Reply Gateway::post(const std::string& path, const nlohmann::json& request, Clock::time_point deadline,
                    const std::string& what) {
  Failure failure;
  if (auto reply = postUntil(path, request, deadline, failure)) return std::move(*reply);
  throw IoError("lost the connection to etcd (tried " + tried_ + ") while " + what + ": " + failure.last);
}

Reply Gateway::connect(const std::string& path, const nlohmann::json& request,
                       std::chrono::milliseconds timeout) {
  Failure failure;
  if (auto reply = postUntil(path, request, Clock::now() + timeout, failure)) return std::move(*reply);
  std::string errors;
  for (const auto& error : failure.per_endpoint) errors += (errors.empty() ? "" : "; ") + error;
  throw TimeoutError("could not reach etcd at " + tried_ + " within " + secondsText(timeout) +
                     " s: " + errors);
}

}  // namespace dtrain::etcd
