#include "rendezvous/job_store.h"

#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "rendezvous/local_address.h"
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
  return "rendezvous '" + run_id + "' is closed: the run has ended (an agent called shutdown())";
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
      label_(std::move(label)) {
  if (role != StoreRole::kClient) {
    TcpStoreServerOptions options;
    options.bind_address = bindAddressFor(host_);
    options.port = port_;
    options.token = token_;
    try {
      server_ = std::make_unique<TcpStoreServer>(options);
      DTRAIN_LOG_INFO(label_ << ": hosting the job store on "
                             << endpointText(options.bind_address, port_));
    } catch (const IoError& e) {
      if (role == StoreRole::kHost) {
        throw IoError(label_ + ": cannot host the job store: " + e.message());
      }
      // Another agent of this machine hosts it (torch's c10d does the same).
      DTRAIN_LOG_INFO(label_ << ": not hosting the job store (" << e.message()
                             << "); connecting as a client");
    }
  }
  TcpStoreClientOptions options;
  options.host = host_;
  options.port = port_;
  options.token = token_;
  options.connect_timeout = config.join_timeout;
  try {
    client_ = std::make_shared<TcpStore>(options);
  } catch (const TimeoutError& e) {
    throw TimeoutError(label_ + ": no job store answered at " + endpointText(host_, port_) +
                       " within the join timeout of " + secondsText(config.join_timeout) +
                       " s: " + e.message());
  }
  local_address_ = config.local_address.empty() ? localAddressToward(host_) : config.local_address;
}

JobStoreEndpoint::~JobStoreEndpoint() = default;

std::shared_ptr<TcpStore> JobStoreEndpoint::connect(std::chrono::milliseconds connect_timeout) const {
  TcpStoreClientOptions options;
  options.host = host_;
  options.port = port_;
  options.token = token_;
  options.connect_timeout = connect_timeout;
  return std::make_shared<TcpStore>(options);
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

}  // namespace dtrain
