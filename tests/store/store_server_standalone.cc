// A TcpStoreServer alone in a process, for measuring what clients cost it
// (bench/store_attack.py): prints "port N" once listening, serves until its
// standard input closes. Builds against any version of the server: it sets
// only the bind address and the port.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "store/tcp_store.h"

int main(int argc, char** argv) {
  dtrain::TcpStoreServerOptions options;
  options.bind_address = argc > 1 ? argv[1] : "127.0.0.1";
  options.port = static_cast<uint16_t>(argc > 2 ? std::atoi(argv[2]) : 0);
  dtrain::TcpStoreServer server(options);
  std::printf("port %u\n", static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  return 0;
}
