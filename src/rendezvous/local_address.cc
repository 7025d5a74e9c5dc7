#include <algorithm>
#include <cctype>

#include "common/address.h"
#include "common/host.h"
#include "rendezvous/rendezvous.h"

namespace dtrain {
namespace {

std::string lowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

bool isLocalAddress(const std::string& host) {
  const std::string name = lowerCase(withoutBrackets(host));
  if (name.empty()) return false;
  if (name == "localhost" || name.ends_with(".localhost")) return true;
  const std::string hostname = lowerCase(hostName());
  if (!hostname.empty()) {
    // "node7" names this host when the kernel's name is "node7.cluster.org".
    if (name == hostname || name == hostname.substr(0, hostname.find('.'))) return true;
  }
  return resolvesToThisMachine(name);
}

}  // namespace dtrain
