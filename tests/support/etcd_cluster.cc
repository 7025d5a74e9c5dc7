#include "tests/support/etcd_cluster.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "common/process.h"
#include "common/socket.h"
#include "tests/support/ports.h"

namespace dtrain::testing {
namespace {

// Runs "$@" (etcd) in place of the shell, after starting a watchdog beside
// it: once the test process ($1) is gone, the watchdog SIGKILLs the member's
// process group (etcd and itself). kill() and the destructor kill that group
// too, so the watchdog never outlives its member.
constexpr const char* kWatchdogScript =
    "parent=$1; shift\n"
    "(while kill -0 \"$parent\" 2>/dev/null; do sleep 1; done; kill -9 -$$) &\n"
    "exec \"$@\"\n";

std::string etcdPath() {
  const char* path = std::getenv("PATH");
  return resolveExecutable("etcd", path == nullptr ? "" : path);
}

std::string loopbackUrl(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

// `method` `path` (with a JSON `body` unless empty) to 127.0.0.1:port over
// HTTP/1.0, so the server closes after the reply; "" when there is no whole
// reply within `limit`.
std::string httpRequest(uint16_t port, const std::string& method, const std::string& path,
                        const std::string& body, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ConnectAttempt attempt = connectTcpOnce("127.0.0.1", port, limit);
  if (!attempt.socket.valid()) return "";
  const int fd = attempt.socket.get();
  std::string request = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
  if (!body.empty()) {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  try {
    if (!sendAll(fd, request, deadline)) return "";
  } catch (const IoError&) {
    return "";
  }
  std::string reply;
  char buffer[4096];
  while (pollUntil(fd, POLLIN, deadline)) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      reply.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return reply;
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return "";
    }
  }
  return "";
}

// The string value of the first "name":"value" in etcd's JSON; "" if none.
std::string stringField(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":\"";
  const size_t start = json.find(key);
  if (start == std::string::npos) return "";
  const size_t end = json.find('"', start + key.size());
  return end == std::string::npos ? "" : json.substr(start + key.size(), end - start - key.size());
}

}  // namespace

bool EtcdCluster::available() {
  try {
    etcdPath();
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string EtcdCluster::skipReason() {
  return "no etcd binary on PATH: install etcd-server (Debian; scripts/setup.sh installs it) to run "
         "the etcd tests";
}

EtcdCluster::EtcdCluster(int members, int start_limit_s) {
  if (members < 1) {
    throw ConfigError("an etcd cluster needs at least one member, not " + std::to_string(members));
  }
  const std::string etcd = etcdPath();
  std::string initial_cluster;
  for (int i = 0; i < members; ++i) {
    Member member;
    member.name = "member" + std::to_string(i);
    member.client_port = freePort();
    member.peer_port = freePort();
    initial_cluster +=
        (initial_cluster.empty() ? "" : ",") + member.name + "=" + loopbackUrl(member.peer_port);
    members_.push_back(std::move(member));
  }
  try {
    for (auto& member : members_) {
      const std::string client_url = loopbackUrl(member.client_port);
      const std::string peer_url = loopbackUrl(member.peer_port);
      const std::vector<std::pair<std::string, std::string>> flags = {
          {"--name", member.name},
          {"--data-dir", dir_ / member.name},
          {"--listen-client-urls", client_url},
          {"--advertise-client-urls", client_url},
          {"--listen-peer-urls", peer_url},
          {"--initial-advertise-peer-urls", peer_url},
          {"--initial-cluster", initial_cluster},
          {"--initial-cluster-state", "new"},
          {"--initial-cluster-token", "dtrain-test-" + std::to_string(members_[0].peer_port)},
          {"--heartbeat-interval", "50"},
          {"--election-timeout", "500"},
          {"--logger", "zap"},
          {"--log-level", "error"},
      };
      std::vector<std::string> argv = {
          "/bin/sh", "-c", kWatchdogScript, "etcd-watchdog", std::to_string(::getpid()), etcd};
      for (const auto& [flag, value] : flags) {
        argv.push_back(flag);
        argv.push_back(value);
      }
      member.process = std::make_unique<BackgroundProcess>(argv, std::map<std::string, std::string>{},
                                                           dir_ / (member.name + ".log"));
    }
    waitUntilHealthy(start_limit_s);
  } catch (...) {
    killAll();
    throw;
  }
}

EtcdCluster::~EtcdCluster() { killAll(); }

void EtcdCluster::waitUntilHealthy(int start_limit_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(start_limit_s);
  std::vector<bool> healthy(members_.size(), false);
  while (true) {
    bool all = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (healthy[i]) continue;
      if (!members_[i].process->running()) {
        throw IoError("etcd " + members_[i].name + " exited while the test cluster started:\n" + logs());
      }
      const std::string health =
          httpRequest(members_[i].client_port, "GET", "/health", "", std::chrono::seconds(2));
      healthy[i] = stringField(health, "health") == "true";
      all = all && healthy[i];
    }
    if (all) return;
    if (std::chrono::steady_clock::now() > deadline) {
      throw IoError("the etcd test cluster of " + std::to_string(members_.size()) +
                    " members was not healthy within " + std::to_string(start_limit_s) + " s:\n" + logs());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string EtcdCluster::clientEndpoints() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (out.empty() ? "" : ",") + endpoint(i);
  return out;
}

std::string EtcdCluster::endpoint(int member) const {
  return "127.0.0.1:" + std::to_string(members_.at(static_cast<size_t>(member)).client_port);
}

int EtcdCluster::leader() {
  for (int i = 0; i < size(); ++i) {
    if (!running(i)) continue;
    const std::string status = httpRequest(members_[static_cast<size_t>(i)].client_port, "POST",
                                           "/v3/maintenance/status", "{}", std::chrono::seconds(2));
    const std::string leader = stringField(status, "leader");
    if (leader.empty()) continue;
    if (leader == stringField(status, "member_id")) return i;
  }
  return -1;
}

void EtcdCluster::kill(int member) {
  BackgroundProcess& process = *members_.at(static_cast<size_t>(member)).process;
  // The group, not just etcd: its watchdog goes too (and an etcd that
  // exited on its own left the watchdog behind).
  signalProcessGroup(process.pid(), SIGKILL);
  process.stop();  // reaps it
}

bool EtcdCluster::running(int member) { return members_.at(static_cast<size_t>(member)).process->running(); }

std::string EtcdCluster::log(int member) const {
  return members_.at(static_cast<size_t>(member)).process->log();
}

void EtcdCluster::killAll() {
  for (int i = 0; i < size(); ++i) {
    if (members_[static_cast<size_t>(i)].process) kill(i);
  }
}

std::string EtcdCluster::logs() const {
  std::string out;
  for (const auto& member : members_) {
    if (member.process) out += "--- " + member.name + " ---\n" + member.process->log();
  }
  return out;
}

}  // namespace dtrain::testing
