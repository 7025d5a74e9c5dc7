#include "rendezvous/job_store.h"

#include <algorithm>
#include <random>
#include <sstream>
#include <thread>

#include "common/address.h"
#include "common/error.h"
#include "common/log.h"
#include "store/prefix_store.h"

namespace dtrain {
namespace {

// Where the host listens: a loopback endpoint stays on loopback (nothing
// outside this machine can use it anyway); otherwise every interface, so
// peers reach it by any of this host's names.
std::string bindAddressFor(const std::string& endpoint_host) {
  if (endpoint_host == "localhost" || isLoopbackLiteral(endpoint_host)) return endpoint_host;
  bool ipv6_literal = endpoint_host.find(':') != std::string::npos;
  return ipv6_literal ? "::" : "0.0.0.0";
}

}  // namespace

std::string closedRunMessage(const std::string& run_id) {
  return "rendezvous '" + run_id + "' is closed: the run has ended and no new round can start";
}

std::string endpointText(const std::string& host, uint16_t port) {
  bool ipv6_literal = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string secondsText(std::chrono::milliseconds duration) {
  std::ostringstream os;
  os << static_cast<double>(duration.count()) / 1000.0;
  return os.str();
}

JobStoreEndpoint::JobStoreEndpoint(const RendezvousConfig& config, StoreRole role,
                                   std::string label)
    : host_(config.endpoint_host),
      port_(config.endpoint_port),
      token_(config.token),
      label_(std::move(label)),
      request_timeout_(config.keep_alive_interval * config.keep_alive_max_attempt) {
  const auto deadline = Clock::now() + config.join_timeout;
  std::string why;
  if (role == StoreRole::kHost && !tryToHost(&why)) {
    throw IoError(label_ + ": cannot host the job store: " + why);
  }
  if (role == StoreRole::kHostIfFree) hostOrFindHost(deadline, config.join_timeout);
  if (!client_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      client_ = connect(std::max(left, std::chrono::milliseconds(1)));
    } catch (const TimeoutError& e) {
      throw TimeoutError(label_ + ": no job store answered at " + endpointText(host_, port_) +
                         " within the join timeout of " + secondsText(config.join_timeout) +
                         " s: " + e.message());
    }
  }
  client_->setTimeout(Store::kDefaultTimeout);
  local_address_ = config.local_address.empty() ? localAddressToward(host_).value_or("127.0.0.1")
                                                : config.local_address;
}

JobStoreEndpoint::~JobStoreEndpoint() = default;

bool JobStoreEndpoint::tryToHost(std::string* why) {
  TcpStoreServerOptions options;
  options.bind_address = bindAddressFor(host_);
  options.port = port_;
  options.token = token_;
  try {
    server_ = std::make_unique<TcpStoreServer>(options);
  } catch (const IoError& e) {
    *why = e.message();
    return false;
  }
  DTRAIN_LOG_INFO(label_ << ": hosting the job store on " << endpointText(options.bind_address, port_));
  return true;
}

void JobStoreEndpoint::hostOrFindHost(Clock::time_point deadline,
                                      std::chrono::milliseconds join_timeout) {
  // Several agents of one job on this machine race for the port. With
  // SO_REUSEADDR two can bind it and then both fail to listen(), so an
  // agent that could not host looks for the one that did and, finding none
  // yet, tries again after a random pause that breaks the tie.
  constexpr std::chrono::milliseconds kProbeTimeout{100};
  std::minstd_rand random(std::random_device{}());
  std::uniform_int_distribution<int> pause_ms(5, 50);
  std::string why;
  while (true) {
    if (tryToHost(&why)) return;
    try {
      client_ = connect(kProbeTimeout);
      DTRAIN_LOG_INFO(label_ << ": another agent here hosts the job store (" << why << ")");
      return;
    } catch (const TimeoutError&) {
      // Nobody listens yet.
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(label_ + ": could neither host the job store (" + why +
                         ") nor reach one at " + endpointText(host_, port_) +
                         " within the join timeout of " + secondsText(join_timeout) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(random)));
  }
}

std::shared_ptr<TcpStore> JobStoreEndpoint::connect(std::chrono::milliseconds connect_timeout) const {
  TcpStoreClientOptions options;
  options.host = host_;
  options.port = port_;
  options.token = token_;
  options.connect_timeout = connect_timeout;
  // An agent out of touch with the store for longer is dead to its peers
  // anyway (they drop it after the same time without a heartbeat).
  options.request_timeout = request_timeout_;
  options.liveness_timeout = std::min(request_timeout_, options.liveness_timeout);
  // Bounds the greeting too: a program on the port that is not a store must
  // not hold it for the store's long default timeout.
  options.timeout = connect_timeout;
  return std::make_shared<TcpStore>(options);
}

void JobStoreEndpoint::waitForPeersToLeave(size_t own_connections,
                                           std::chrono::milliseconds limit) const {
  if (!server_ || server_->numClients() <= own_connections) return;
  DTRAIN_LOG_INFO(label_ << ": waiting up to " << secondsText(limit) << " s for "
                         << server_->numClients() - own_connections
                         << " peer connection(s) to the job store to close");
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (server_->numClients() > own_connections) {
    if (std::chrono::steady_clock::now() >= deadline) {
      DTRAIN_LOG_WARN(label_ << ": " << server_->numClients() - own_connections
                             << " peer connection(s) still open after " << secondsText(limit)
                             << " s (close_timeout); stopping the job store anyway");
      return;
    }
    std::this_thread::sleep_for(kRendezvousPollInterval);
  }
}

RendezvousResult JobStoreEndpoint::resultFor(const std::string& run_id, int64_t generation) const {
  RendezvousResult result;
  result.generation = generation;
  result.root_store = client_;
  result.store = std::make_shared<PrefixStore>(
      "/run/" + run_id + "/gen/" + std::to_string(generation), client_);
  result.store_host = host_;
  result.store_port = port_;
  return result;
}

std::string JobStoreEndpoint::serverFailure() const { return server_ ? server_->failure() : ""; }

}  // namespace dtrain
