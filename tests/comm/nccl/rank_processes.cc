#include "rank_processes.h"

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "common/error.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"

namespace dtrain::testing {
namespace {

[[noreturn]] void exitChild(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit: the child must not run the parent's atexit handlers or gtest's.
  _exit(code);
}

bool readAll(int fd, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    ssize_t got = read(fd, bytes, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

void writeAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t put = write(fd, bytes, size);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return;  // the child died; waitAll reports it
    bytes += put;
    size -= static_cast<size_t>(put);
  }
}

[[noreturn]] void runChild(int rank, int port_fd, const RankProcesses::Body& body) {
  setProcessRank(rank);
  uint16_t port = 0;
  if (!readAll(port_fd, &port, sizeof(port))) {
    std::fprintf(stderr, "rank %d: the test process never sent the store port\n", rank);
    exitChild(3);
  }
  close(port_fd);
  try {
    TcpStoreClientOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    options.connect_timeout = std::chrono::seconds(30);
    options.timeout = std::chrono::seconds(120);
    auto store = std::make_shared<PrefixStore>("/run/nccl-test/gen/0", std::make_shared<TcpStore>(options));
    body(rank, store);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d FAILED: %s\n", rank, e.what());
    exitChild(1);
  } catch (...) {
    std::fprintf(stderr, "rank %d FAILED: unknown exception\n", rank);
    exitChild(1);
  }
  exitChild(0);
}

}  // namespace

int cudaDeviceCountFromChild() {
  static const int count = [] {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int devices = 0;
      if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
      writeAll(fds[1], &devices, sizeof(devices));
      exitChild(0);
    }
    close(fds[1]);
    int devices = 0;
    if (pid < 0 || !readAll(fds[0], &devices, sizeof(devices))) devices = 0;
    close(fds[0]);
    if (pid > 0) waitpid(pid, nullptr, 0);
    return devices;
  }();
  return count;
}

void setNcclTestEnvironment() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  setenv("NCCL_DEBUG", "WARN", /*overwrite=*/0);
}

int64_t monotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

RankProcesses::RankProcesses(int world, const Body& body) : reaped_(world, false) {
  std::vector<int> port_pipes;
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) throw IoError("pipe failed: " + errnoString(errno));
    const pid_t pid = fork();
    if (pid < 0) throw IoError("fork failed: " + errnoString(errno));
    if (pid == 0) {
      close(fds[1]);
      for (int fd : port_pipes) close(fd);
      runChild(rank, fds[0], body);
    }
    close(fds[0]);
    port_pipes.push_back(fds[1]);
    pids_.push_back(pid);
  }
  // Only now start threads in this process (the server's), after every fork.
  TcpStoreServerOptions options;
  options.bind_address = "127.0.0.1";
  server_ = std::make_unique<TcpStoreServer>(options);
  const uint16_t port = server_->port();
  for (int fd : port_pipes) {
    writeAll(fd, &port, sizeof(port));
    close(fd);
  }
}

RankProcesses::~RankProcesses() {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (reaped_[i]) continue;
    kill(pids_[i], SIGKILL);
    waitpid(pids_[i], nullptr, 0);
  }
}

std::vector<int> RankProcesses::waitAll(std::chrono::seconds limit) {
  std::vector<int> statuses(pids_.size(), 0);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t left = 0;
  for (bool reaped : reaped_) left += reaped ? 0 : 1;
  while (left > 0) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (reaped_[i]) continue;
      int status = 0;
      if (waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        statuses[i] = status;
        reaped_[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (reaped_[i]) continue;
        std::fprintf(stderr, "rank %zu still running after %lld s; killing it\n", i,
                     static_cast<long long>(limit.count()));
        kill(pids_[i], SIGKILL);
        waitpid(pids_[i], &statuses[i], 0);
        reaped_[i] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return statuses;
}

std::string describeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "wait status " + std::to_string(status);
}

bool exitedCleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace dtrain::testing
