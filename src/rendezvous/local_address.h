// Which addresses are this machine's (private to rendezvous/; isLocalAddress()
// itself is declared in rendezvous.h). Nothing here connects anywhere: the
// resolver may ask DNS about a name, but no host is contacted.
#pragma once

#include <string>

namespace dtrain {

// True for 127.0.0.0/8, ::1 and IPv4-mapped loopback, given as a numeric
// address (brackets allowed); false for anything else, names included.
bool isLoopbackLiteral(const std::string& host);

// The address this machine uses to reach `host`: a UDP socket is connected
// (which sends nothing) and its local address read with getsockname(). When
// that is a loopback address the endpoint is this machine, and `host`
// itself is what peers use to reach it, unless `host` is a loopback name
// too ("localhost"). "127.0.0.1" when no route can be determined.
std::string localAddressToward(const std::string& host);

}  // namespace dtrain
