#include "launch/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"

namespace dtrain {

uint16_t freeTcpPort(bool loopback_only, const std::string& purpose) {
  int fd = DTRAIN_CHECK_ERRNO(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError("no free port for " + purpose + ": " + errnoString(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace dtrain
