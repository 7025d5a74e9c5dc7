// isLocalAddress() (declared in rendezvous.h); the address helpers it is
// built on are tested in tests/common/address_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <unistd.h>

#include "rendezvous/rendezvous.h"

namespace dtrain::testing {
namespace {

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// An IPv4 address of a non-loopback interface of this machine, if any.
std::string firstInterfaceAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    auto* ip = &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr;
    if (inet_ntop(AF_INET, ip, text, sizeof(text)) && std::string(text).rfind("127.", 0) != 0) {
      found = text;
    }
  }
  freeifaddrs(list);
  return found;
}

TEST(LocalAddressTest, LoopbackNamesAndAddressesAreLocal) {
  EXPECT_TRUE(isLocalAddress("127.0.0.1"));
  EXPECT_TRUE(isLocalAddress("127.0.1.1"));
  EXPECT_TRUE(isLocalAddress("localhost"));
  EXPECT_TRUE(isLocalAddress("LOCALHOST"));
  EXPECT_TRUE(isLocalAddress("::1"));
  EXPECT_TRUE(isLocalAddress("[::1]"));
}

TEST(LocalAddressTest, ThisHostsNameAndInterfaceAddressesAreLocal) {
  EXPECT_TRUE(isLocalAddress(hostName())) << hostName();
  const std::string address = firstInterfaceAddress();
  if (address.empty()) GTEST_SKIP() << "no non-loopback IPv4 interface";
  EXPECT_TRUE(isLocalAddress(address)) << address;
}

TEST(LocalAddressTest, OtherAddressesAreNotLocal) {
  // TEST-NET-3 (RFC 5737): never assigned, and never contacted here.
  EXPECT_FALSE(isLocalAddress("203.0.113.7"));
  EXPECT_FALSE(isLocalAddress("2001:db8::7"));
  EXPECT_FALSE(isLocalAddress(""));
}

}  // namespace
}  // namespace dtrain::testing
