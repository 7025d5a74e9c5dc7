#include "common/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "common/addrinfo.h"
#include "common/file_descriptor.h"

namespace dtrain {
namespace {

struct IfAddrsDeleter {
  void operator()(ifaddrs* list) const { freeifaddrs(list); }
};

std::string lowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Null when the name does not resolve: an unknown name is simply not local.
AddrInfoList resolve(const std::string& host, int socktype, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags;
  addrinfo* result = nullptr;
  // The discard port: a service is needed for a UDP connect(); nothing is sent.
  if (getaddrinfo(host.c_str(), "9", &hints, &result) != 0) return nullptr;
  return AddrInfoList(result);
}

bool isLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&ip) || (IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127);
  }
  return false;
}

// The raw address bytes, with IPv4-mapped IPv6 addresses reduced to IPv4.
std::string addressBytes(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto& ip = reinterpret_cast<const sockaddr_in*>(address)->sin_addr;
    return std::string(reinterpret_cast<const char*>(&ip), sizeof(ip));
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&ip)) return std::string(reinterpret_cast<const char*>(&ip.s6_addr[12]), 4);
    return std::string(reinterpret_cast<const char*>(&ip), sizeof(ip));
  }
  return {};
}

bool isInterfaceAddress(const sockaddr* address) {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) return false;
  std::unique_ptr<ifaddrs, IfAddrsDeleter> list(raw);
  const std::string wanted = addressBytes(address);
  if (wanted.empty()) return false;
  for (ifaddrs* entry = raw; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr != nullptr && addressBytes(entry->ifa_addr) == wanted) return true;
  }
  return false;
}

std::string numericText(const sockaddr* address, socklen_t length) {
  char text[NI_MAXHOST];
  if (getnameinfo(address, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return text;
}

// The local address a UDP socket connected to `remote` was given (connect()
// on a UDP socket only picks a route and a source address), or false.
bool routeSource(const addrinfo& remote, sockaddr_storage* local, socklen_t* length) {
  FileDescriptor fd(::socket(remote.ai_family, remote.ai_socktype | SOCK_CLOEXEC, remote.ai_protocol));
  if (!fd.valid()) return false;
  *length = sizeof(*local);
  return ::connect(fd.get(), remote.ai_addr, remote.ai_addrlen) == 0 &&
         ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(local), length) == 0;
}

}  // namespace

std::string withoutBrackets(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

bool isNumericAddress(const std::string& host) {
  const std::string bare = withoutBrackets(host);
  unsigned char numeric[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, bare.c_str(), numeric) == 1 || ::inet_pton(AF_INET6, bare.c_str(), numeric) == 1;
}

bool isLoopbackLiteral(const std::string& host) {
  AddrInfoList addresses = resolve(withoutBrackets(host), SOCK_STREAM, AI_NUMERICHOST);
  return addresses && isLoopback(addresses->ai_addr);
}

bool resolvesToThisMachine(const std::string& host) {
  const std::string name = withoutBrackets(host);
  if (name.empty()) return false;
  AddrInfoList addresses = resolve(name, SOCK_STREAM, 0);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    if (isLoopback(a->ai_addr) || isInterfaceAddress(a->ai_addr)) return true;
  }
  return false;
}

std::optional<std::string> localAddressToward(const std::string& host) {
  const std::string name = withoutBrackets(host);
  AddrInfoList addresses = resolve(name, SOCK_DGRAM, 0);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    sockaddr_storage local{};
    socklen_t length = 0;
    if (!routeSource(*a, &local, &length)) continue;
    std::string text = numericText(reinterpret_cast<sockaddr*>(&local), length);
    if (text.empty()) continue;
    if (!isLoopback(reinterpret_cast<sockaddr*>(&local))) return text;
    // The endpoint is this machine: peers reach it by the name they were given.
    bool loopback_name = lowerCase(name) == "localhost" || isLoopbackLiteral(name);
    return loopback_name ? text : name;
  }
  return std::nullopt;
}

}  // namespace dtrain
