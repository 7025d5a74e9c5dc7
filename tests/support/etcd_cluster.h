// A real etcd cluster for a test: N members on 127.0.0.1 (free ports, a data
// folder each, one --initial-cluster), tuned to start and elect in about a
// second (50 ms heartbeats, 500 ms election timeout). Members run as
// BackgroundProcesses; each has a watchdog that SIGKILLs it should the test
// process die without its destructors (a crash, a ctest timeout), so no etcd
// outlives the test. The destructor kills every member and removes the data.
//
//   if (!EtcdCluster::available()) GTEST_SKIP() << EtcdCluster::skipReason();
//   EtcdCluster cluster(3);
//   options.endpoints = parseEtcdEndpoints(cluster.clientEndpoints());
//   cluster.kill(0);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/support/background_process.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {

class EtcdCluster {
 public:
  // True when an etcd binary is on PATH (Debian's etcd-server installs it).
  static bool available();
  // Why etcd tests skip, and what to install.
  static std::string skipReason();

  // Starts `members` members and returns once every one reports healthy
  // (GET /health) within `start_limit_s`; IoError with the members' logs
  // otherwise.
  explicit EtcdCluster(int members = 1, int start_limit_s = 30);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:P0,127.0.0.1:P1,...", every member's client address in order.
  std::string clientEndpoints() const;
  // "127.0.0.1:P" of one member.
  std::string endpoint(int member) const;
  // The member that is the leader now (asked of the running members in
  // turn: the first that names itself leader), or -1 when none does.
  int leader();
  // SIGKILL (no goodbye to its peers), reaped; the member stays down.
  void kill(int member);
  bool running(int member);
  // The member's stdout and stderr so far.
  std::string log(int member) const;

 private:
  struct Member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    std::unique_ptr<BackgroundProcess> process;
  };
  void waitUntilHealthy(int start_limit_s);
  void killAll();
  std::string logs() const;

  TempDir dir_{"dtrain-etcd"};  // destroyed after the members
  std::vector<Member> members_;
};

}  // namespace dtrain::testing
