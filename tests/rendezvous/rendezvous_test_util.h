// Helpers shared by the rendezvous tests: a config with short
// timeouts, agents as threads, and a "does not hang" bound.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/rendezvous.h"
#include "tests/support/ports.h"

namespace dtrain::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// A rendezvous on 127.0.0.1:`port` with timeouts short enough for tests but
// long enough that a loaded machine does not trip them by accident.
inline RendezvousConfig testConfig(const std::string& backend, uint16_t port,
                                   const std::string& run_id = "test-run") {
  RendezvousConfig config;
  config.run_id = run_id;
  config.backend = backend == "etcd"   ? RendezvousBackend::kEtcd
                   : backend == "c10d" ? RendezvousBackend::kC10d
                                       : RendezvousBackend::kStatic;
  config.endpoint_host = "127.0.0.1";
  config.endpoint_port = port;
  config.join_timeout = seconds(15);
  config.last_call_timeout = milliseconds(300);
  config.close_timeout = milliseconds(300);  // a host's shutdown() waits this long for peers
  config.keep_alive_interval = milliseconds(250);
  config.keep_alive_max_attempt = 20;  // 5 s: nobody is declared dead by accident
  return config;
}

// Runs each task on its own thread (agents of one job); results in order.
// get() rethrows a task's exception.
template <typename T>
std::vector<std::future<T>> startAll(std::vector<std::function<T()>> tasks) {
  std::vector<std::future<T>> futures;
  for (auto& task : tasks) futures.push_back(std::async(std::launch::async, std::move(task)));
  return futures;
}

template <typename T>
std::vector<T> getAll(std::vector<std::future<T>>& futures) {
  std::vector<T> results;
  for (auto& future : futures) results.push_back(future.get());
  return results;
}

// Agents built concurrently, as on real nodes (clients retry until the
// host listens).
inline std::vector<std::unique_ptr<RendezvousHandler>> createAll(
    const std::vector<RendezvousConfig>& configs) {
  std::vector<std::function<std::unique_ptr<RendezvousHandler>()>> tasks;
  for (const auto& config : configs) tasks.push_back([config] { return createRendezvousHandler(config); });
  auto futures = startAll(std::move(tasks));
  return getAll(futures);
}

inline std::vector<RendezvousResult> rendezvousAll(
    const std::vector<RendezvousHandler*>& handlers) {
  std::vector<std::function<RendezvousResult()>> tasks;
  for (auto* handler : handlers) tasks.push_back([handler] { return handler->nextRendezvous(); });
  auto futures = startAll(std::move(tasks));
  return getAll(futures);
}

inline std::vector<RendezvousHandler*> pointers(
    const std::vector<std::unique_ptr<RendezvousHandler>>& handlers) {
  std::vector<RendezvousHandler*> out;
  for (const auto& handler : handlers) out.push_back(handler.get());
  return out;
}

// True once `condition` holds; false if it still does not after `limit`.
inline bool eventually(const std::function<bool()>& condition, milliseconds limit = seconds(20)) {
  auto deadline = SteadyClock::now() + limit;
  while (!condition()) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

inline double secondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Every agent of a round agrees, and ranks are contiguous per node in group
// rank order.
inline void expectConsistentRound(const std::vector<RendezvousResult>& results,
                                  const std::vector<int>& local_world_sizes) {
  ASSERT_EQ(results.size(), local_world_sizes.size());
  std::vector<int> by_group_rank(results.size(), -1);
  int world = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    world += local_world_sizes[i];
    EXPECT_EQ(results[i].generation, results[0].generation);
    EXPECT_EQ(results[i].group_world_size, static_cast<int>(results.size()));
    EXPECT_EQ(results[i].master_addr, results[0].master_addr);
    ASSERT_GE(results[i].group_rank, 0);
    ASSERT_LT(results[i].group_rank, static_cast<int>(results.size()));
    EXPECT_EQ(by_group_rank[results[i].group_rank], -1) << "group rank given twice";
    by_group_rank[results[i].group_rank] = static_cast<int>(i);
  }
  int offset = 0;
  for (int agent : by_group_rank) {
    ASSERT_GE(agent, 0);
    EXPECT_EQ(results[agent].rank_offset, offset);
    EXPECT_EQ(results[agent].world_size, world);
    offset += local_world_sizes[agent];
  }
}

}  // namespace dtrain::testing
