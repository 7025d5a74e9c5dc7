// The job store as a rendezvous handler reaches it (private to rendezvous/):
// the TcpStoreServer when this agent hosts it, and this agent's client
// connections to it. Shared by the static and the dynamic handler.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/rendezvous.h"
#include "store/tcp_store.h"

namespace dtrain {

enum class StoreRole {
  kClient,     // connect only
  kHost,       // host the store; a port that is taken is an IoError
  kHostIfFree, // host it unless another agent on this machine already does
               // (several agents of one job on one machine: the first hosts)
};

// How often an agent waiting in a round looks at the store again. Short
// enough that a round completes promptly once its last node arrives; each
// poll is one or two small requests, so 128 waiting agents cost the store
// ~10k requests/s, which it serves comfortably.
inline constexpr std::chrono::milliseconds kRendezvousPollInterval{25};

// The message of the ConfigError a joiner of a closed run gets.
std::string closedRunMessage(const std::string& run_id);

// "host:port", with IPv6 literals bracketed.
std::string endpointText(const std::string& host, uint16_t port);
// A duration as seconds for messages: "0.5", "600".
std::string secondsText(std::chrono::milliseconds duration);

// How a rendezvous handler reaches the job store, whatever keeps it: the
// TCP store one agent hosts (JobStoreEndpoint, below) or an etcd cluster
// (EtcdJobStore, etcd_job_store.h).
class JobStoreLink {
 public:
  virtual ~JobStoreLink() = default;
  // The agent's main connection (the result's root_store).
  virtual std::shared_ptr<Store> mainStore() const = 0;
  // One more connection, for a thread whose requests must not queue behind
  // the main one's (keep-alive); its timeout() is the caller's to set.
  virtual std::shared_ptr<Store> connectAnother(std::chrono::milliseconds connect_timeout) const = 0;
  // Why the store this agent hosts stopped serving; "" otherwise.
  virtual std::string serverFailure() const { return ""; }
  // Host only: keeps serving while peers may still need the store.
  virtual void waitForPeersToLeave(size_t /*own_connections*/, std::chrono::milliseconds /*limit*/) const {}
  // A result with the store fields filled for `generation`.
  virtual RendezvousResult resultFor(const std::string& run_id, int64_t generation) const = 0;
  // This agent's address as peers see it.
  virtual const std::string& localAddress() const = 0;
};

class JobStoreEndpoint : public JobStoreLink {
 public:
  // Listens first when hosting (the server keeps its socket for the
  // endpoint's lifetime), then connects with retries until join_timeout:
  // TimeoutError naming `label` and host:port when nothing answers in time.
  // `label` prefixes every message ("c10d rendezvous 'job1' at host:port").
  JobStoreEndpoint(const RendezvousConfig& config, StoreRole role, std::string label);
  ~JobStoreEndpoint();
  JobStoreEndpoint(const JobStoreEndpoint&) = delete;
  JobStoreEndpoint& operator=(const JobStoreEndpoint&) = delete;

  // The agent's main connection (the result's root_store).
  const std::shared_ptr<TcpStore>& client() const { return client_; }
  std::shared_ptr<Store> mainStore() const override { return client_; }
  std::shared_ptr<Store> connectAnother(std::chrono::milliseconds connect_timeout) const override {
    return connect(connect_timeout);
  }
  // One more connection, for a thread whose requests must not queue behind
  // a blocking get() on the main one (keep-alive). Its timeout() is
  // connect_timeout until the caller sets another.
  std::shared_ptr<TcpStore> connect(std::chrono::milliseconds connect_timeout) const;

  bool hosting() const { return server_ != nullptr; }
  // The hosted server's failure() ("" when serving or not hosting).
  std::string serverFailure() const override;
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  // This agent's address as peers see it: config.local_address, else the
  // local address of the route to the endpoint (see localAddressToward() in common/address.h).
  const std::string& localAddress() const override { return local_address_; }

  // Host only (a no-op elsewhere): keeps serving until at most
  // `own_connections` clients (this agent's) remain or `limit` passes, so
  // that peers finishing the run can still reach the store; otherwise the
  // host, often first out, would cut them off mid-exit-barrier.
  void waitForPeersToLeave(size_t own_connections, std::chrono::milliseconds limit) const override;

  // A result with the store fields filled for `generation`.
  RendezvousResult resultFor(const std::string& run_id, int64_t generation) const override;

 private:
  using Clock = std::chrono::steady_clock;
  // False (and why) when the port cannot be listened on.
  bool tryToHost(std::string* why);
  // kHostIfFree: host, or connect to the agent of this machine that does.
  void hostOrFindHost(Clock::time_point deadline, std::chrono::milliseconds join_timeout);

  std::string host_;
  uint16_t port_;
  std::string token_;
  std::string label_;
  std::string local_address_;
  std::chrono::milliseconds request_timeout_;  // of every connection: the keep-alive's dead-after
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<TcpStore> client_;
};

}  // namespace dtrain
