// The worker's view of its job, read from the environment that `dtrain
// launch` or torchrun sets: RANK, WORLD_SIZE, LOCAL_RANK, and either
//   DTRAIN_STORE_ADDR=host:port  (the launcher's rendezvous store; keys of this
//                                 attempt under DTRAIN_STORE_PREFIX), or
//   MASTER_ADDR/MASTER_PORT      (rank 0 hosts a store there; the others join).
// The store token, if any, comes from DTRAIN_STORE_TOKEN(_FILE).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/types.h"

namespace dtrain {

class Store;
class TcpStoreServer;

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this node (LOCAL_WORLD_SIZE)
  std::string store_address;  // host:port, for messages
  std::shared_ptr<Store> store;  // already prefixed for this attempt
  // A new connection to the same store, prefixed alike: one per thread that
  // waits on keys of its own (a connection serves one request at a time).
  std::function<std::shared_ptr<Store>()> open_store;
  std::shared_ptr<TcpStoreServer> server;  // set on the rank that hosts the store
};

// Throws ConfigError naming the variable that is missing or malformed;
// TimeoutError/ConfigError from the store (unreachable, wrong token).
// Connecting retries until DTRAIN_STORE_CONNECT_TIMEOUT seconds have passed.
World worldFromEnvironment();

// Call once at the end of a job, after every communicator is closed. The
// others only check in; the rank that hosts the store waits until all have,
// so that no client loses the store in the middle of a request.
void leaveWorld(World& world, Milliseconds timeout);

}  // namespace dtrain
