// The OS seam for network addresses, for every layer: what a name resolves
// to, which addresses are this machine's, and which local address the route
// toward a host leaves from (the rendezvous advertises it to its peers, the
// Gloo device listens on it).
//
// Nothing here contacts a host: the resolver may ask DNS about a name, and a
// route is found by connecting a UDP socket, which sends nothing. Nothing
// throws either: a name that does not resolve is simply not local, not
// loopback and not routed.
#pragma once

#include <optional>
#include <string>

namespace dtrain {

// `host` without the brackets of an IPv6 literal: "[::1]" -> "::1".
std::string withoutBrackets(const std::string& host);

// True for 127.0.0.0/8, ::1 and IPv4-mapped loopback, given as a numeric
// address (brackets allowed); false for anything else, names included.
bool isLoopbackLiteral(const std::string& host);

// True for a numeric IPv4 or IPv6 address (brackets allowed), false for names.
bool isNumericAddress(const std::string& host);

// True when `host` (a name or a numeric address, brackets allowed) resolves
// to a loopback address or to an address of one of this machine's network
// interfaces. Says nothing about names that do not resolve ("localhost" does
// on every sane machine, but that is the resolver's business).
bool resolvesToThisMachine(const std::string& host);

// The address peers use to reach this machine when it talks to `host`: the
// local address of the route toward `host`, as numeric text. When that is a
// loopback address the endpoint is this machine, and `host` itself is what
// peers use to reach it, unless `host` is a loopback name too ("localhost",
// "127.0.0.1"), where the loopback address is the answer. nullopt when
// `host` does not resolve or no route leads to it.
std::optional<std::string> localAddressToward(const std::string& host);

}  // namespace dtrain
