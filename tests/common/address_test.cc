// The address seam (common/address.h): loopback literals, this machine's
// addresses, and the local address of the route toward a host.
#include "common/address.h"

#include <gtest/gtest.h>

#include "common/host.h"

namespace dtrain {
namespace {

TEST(AddressTest, BracketsOfAnIpv6LiteralAreDropped) {
  EXPECT_EQ(withoutBrackets("[::1]"), "::1");
  EXPECT_EQ(withoutBrackets("::1"), "::1");
  EXPECT_EQ(withoutBrackets("node7"), "node7");
  EXPECT_EQ(withoutBrackets("[]"), "[]");
}

TEST(AddressTest, LoopbackLiteralsOnly) {
  EXPECT_TRUE(isLoopbackLiteral("127.0.0.1"));
  EXPECT_TRUE(isLoopbackLiteral("::1"));
  EXPECT_TRUE(isLoopbackLiteral("[::1]"));
  EXPECT_FALSE(isLoopbackLiteral("localhost"));
  EXPECT_FALSE(isLoopbackLiteral("10.0.0.1"));
}

TEST(AddressTest, LoopbackAddressesResolveToThisMachine) {
  EXPECT_TRUE(resolvesToThisMachine("127.0.0.1"));
  EXPECT_TRUE(resolvesToThisMachine("127.0.1.1"));
  EXPECT_TRUE(resolvesToThisMachine("::1"));
  EXPECT_TRUE(resolvesToThisMachine("[::1]"));
  // TEST-NET-3 (RFC 5737): never assigned, and never contacted here.
  EXPECT_FALSE(resolvesToThisMachine("203.0.113.7"));
  EXPECT_FALSE(resolvesToThisMachine("2001:db8::7"));
  EXPECT_FALSE(resolvesToThisMachine(""));
  EXPECT_FALSE(resolvesToThisMachine("no-such-host.invalid"));
}

TEST(AddressTest, TheAddressTowardALoopbackEndpointIsLoopback) {
  EXPECT_EQ(localAddressToward("127.0.0.1"), "127.0.0.1");
  const std::optional<std::string> toward_localhost = localAddressToward("localhost");
  ASSERT_TRUE(toward_localhost.has_value());
  EXPECT_TRUE(*toward_localhost == "127.0.0.1" || *toward_localhost == "::1") << *toward_localhost;
  // This machine by its name: peers use that name, or an interface address.
  const std::string toward_self = localAddressToward(hostName()).value_or("127.0.0.1");
  EXPECT_TRUE(toward_self == hostName() || resolvesToThisMachine(toward_self)) << toward_self;
}

TEST(AddressTest, AnUnresolvableHostHasNoRoute) {
  EXPECT_EQ(localAddressToward("no-such-host.invalid"), std::nullopt);
}

}  // namespace
}  // namespace dtrain
