// dtrain::init(): join the job that `dtrain launch` (or torchrun) started.
//
//   auto ctx = dtrain::init();            // reads RANK, WORLD_SIZE, LOCAL_RANK, the store address
//   model->to(ctx->device());
//   dtrain::DataParallel dp(model, ctx->communicator());
//
// Backend choice ("auto"): NCCL on cuda:LOCAL_RANK when this libtorch was
// built with CUDA, a GPU is visible and the NCCL backend was built in; Gloo on
// the CPU otherwise. DTRAIN_BACKEND (or InitOptions::backend) overrides it;
// naming a backend that cannot run here is a ConfigError.
//
// A job of one process needs no environment: without RANK and WORLD_SIZE,
// init() makes a group of one over an in-memory store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/types.h>

namespace dtrain {

class Communicator;
struct World;

struct InitOptions {
  std::string backend = "auto";  // auto | nccl | gloo
  // How long joining the group may take, and the default collective timeout.
  std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(10)};
};

// One process's membership of the job. Destroying it closes the
// communicator and checks out of the store (rank 0, which hosts the store
// under MASTER_ADDR/PORT, waits until every rank has).
class Context {
 public:
  Context(std::unique_ptr<World> world, std::shared_ptr<Communicator> communicator, torch::Device device,
          std::chrono::milliseconds collective_timeout);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const;
  int size() const;
  int localRank() const;
  int localWorldSize() const;  // ranks on this node
  bool isMain() const { return rank() == 0; }
  torch::Device device() const { return device_; }
  const std::shared_ptr<Communicator>& communicator() const { return communicator_; }
  // Another communicator over the same ranks and backend (`name` keeps its
  // bootstrap keys apart; every rank calls this with the same name, at the
  // same point): collectives on it never wait behind the main one's.
  std::shared_ptr<Communicator> newCommunicator(const std::string& name);
  std::string backend() const;
  // The job's store, rank and size (what a DeviceMesh is built over).
  const World& world() const { return *world_; }
  std::chrono::milliseconds collectiveTimeout() const { return collective_timeout_; }

  // Every rank waits here until all arrived (a tiny all-reduce).
  void barrier();
  // Sums the values over all ranks, in place (double precision, host side).
  void allreduceSum(std::vector<double>& values);

 private:
  std::unique_ptr<World> world_;
  std::shared_ptr<Communicator> communicator_;
  torch::Device device_;
  std::chrono::milliseconds collective_timeout_;
};

std::shared_ptr<Context> init(const InitOptions& options = {});

}  // namespace dtrain
