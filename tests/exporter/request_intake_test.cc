// RequestIntake over socket pairs: when a request counts as whole, the
// deadline from add() to the last byte, and the oldest connection shed at
// capacity.
#include "exporter/request_intake.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::exporter {
namespace {

using namespace std::chrono_literals;

RequestState state(const std::string& bytes) { return requestState(bytes, 1024, 64); }

TEST(RequestStateTest, AHeadIsWholeAtItsBlankLineAndABodyAtItsLength) {
  EXPECT_EQ(state("GET /metrics HTTP/1.1\r\nHost: x\r\n"), RequestState::kIncomplete);
  EXPECT_EQ(state("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), RequestState::kWhole);
  EXPECT_EQ(state("garbage\r\n\r\n"), RequestState::kWhole);
  EXPECT_EQ(state("GET /" + std::string(2000, 'a')), RequestState::kOversize);
  EXPECT_EQ(state("POST / HTTP/1.1\r\ncontent-length: 3\r\n\r\nx="), RequestState::kIncomplete);
  EXPECT_EQ(state("POST / HTTP/1.1\r\nContent-Length:  3 \r\n\r\nx=1"), RequestState::kWhole);
  EXPECT_EQ(state("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n"), RequestState::kOversize);
  EXPECT_EQ(state("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), RequestState::kWhole);  // httplib's 400
  EXPECT_EQ(state("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nx=1\r\n"), RequestState::kIncomplete);
  EXPECT_EQ(state("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nx=1\r\n0\r\n\r\n"), RequestState::kWhole);
  EXPECT_EQ(state("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(100, '1')),
            RequestState::kOversize);
}

class RequestIntakeTest : public ::testing::Test {
 protected:
  void start(RequestIntakeOptions options) {
    intake_ = std::make_unique<RequestIntake>(options, [this](int fd, std::string bytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      handed_.emplace_back(fd, std::move(bytes));
      changed_.notify_all();
    });
    intake_->start();
  }
  void TearDown() override {
    intake_.reset();
    for (auto& [fd, bytes] : handed_) ::close(fd);
    for (int fd : clients_) ::close(fd);
  }
  // The client's end; the other goes to the intake.
  int connect() {
    int pair[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    clients_.push_back(pair[0]);
    intake_->add(pair[1]);
    return pair[0];
  }
  bool waitForHandoffs(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, 5s, [&] { return handed_.size() >= count; });
  }
  // What the intake sent before closing, or "open" when it did not close.
  static std::string answerOf(int fd, std::chrono::milliseconds wait) {
    std::string got;
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(wait.count())) > 0) {
      char buf[256];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return got;
      got.append(buf, static_cast<size_t>(n));
    }
    return "open";
  }

  std::unique_ptr<RequestIntake> intake_;
  std::vector<int> clients_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<int, std::string>> handed_;
};

TEST_F(RequestIntakeTest, AWholeRequestIsHandedOffWithEveryByteRead) {
  start({});
  int client = connect();
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(client, request.data(), 10, 0), 10);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(::send(client, request.data() + 10, request.size() - 10, 0), static_cast<ssize_t>(request.size() - 10));
  ASSERT_TRUE(waitForHandoffs(1));
  EXPECT_EQ(handed_[0].second, request);
  EXPECT_EQ(intake_->counters().handed_off, 1u);
}

TEST_F(RequestIntakeTest, ARequestStillIncompleteAtTheDeadlineIsAnswered408AndClosed) {
  RequestIntakeOptions options;
  options.request_deadline = 300ms;
  start(options);
  int client = connect();
  auto began = std::chrono::steady_clock::now();
  // A byte every 50 ms: never idle long, never whole.
  std::string answer;
  for (char byte : std::string("GET /metrics HTTP/1.1\r\nX: ")) {
    ::send(client, &byte, 1, MSG_NOSIGNAL);
    answer = answerOf(client, 50ms);
    if (answer != "open") break;
  }
  auto took = std::chrono::steady_clock::now() - began;
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 408 ")) << answer;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 1s);
  EXPECT_EQ(intake_->counters().timed_out, 1u);
}

TEST_F(RequestIntakeTest, AtCapacityTheOldestIsAnswered503ToAdmitANewcomer) {
  RequestIntakeOptions options;
  options.max_connections = 3;
  start(options);
  int oldest = connect();
  std::this_thread::sleep_for(20ms);
  connect();
  connect();
  int newcomer = connect();
  EXPECT_TRUE(answerOf(oldest, 2s).starts_with("HTTP/1.1 503 "));
  const std::string request = "GET /healthz HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(newcomer, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(waitForHandoffs(1));
  EXPECT_EQ(handed_[0].second, request);
  EXPECT_EQ(intake_->counters().evicted, 1u);
}

TEST_F(RequestIntakeTest, ALingeringConnectionIsClosedWhenTheClientHangsUp) {
  start({});
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  clients_.push_back(pair[0]);
  intake_->linger(pair[1]);
  EXPECT_EQ(answerOf(pair[0], 2s), "");  // its write side shut at once
  ::shutdown(pair[0], SHUT_WR);
  std::this_thread::sleep_for(100ms);
  // Closed by the intake: a send now fails.
  EXPECT_LT(::send(pair[0], "x", 1, MSG_NOSIGNAL), 0);
}

}  // namespace
}  // namespace dtrain::exporter
