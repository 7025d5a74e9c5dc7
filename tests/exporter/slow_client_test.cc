// `dtrain exporter` against clients that send their request one byte per
// second, as a real process on loopback: scrapes keep being answered
// promptly, and the slow connections are dropped at the request deadline.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "http_client.h"

namespace dtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;

// True when the server has closed fd (EOF or reset, after whatever it
// answered), waiting up to `wait` for it.
bool closedByServer(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, static_cast<int>(wait.count())) > 0) {
    char buf[512];
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

TEST(ExporterSlowClientTest, ScrapesAreAnsweredWhileAHundredClientsSendOneBytePerSecond) {
  int port = freePort();
  std::string dir = makeTempDir("dtrain_exporter_slow");
  BackgroundProcess exporter({dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(port), "--interval",
                              "0.1"},
                             {{"DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML}}, dir + "/exporter.log");
  ASSERT_TRUE(waitForHealthy(port, 20)) << exporter.log();

  // More slow clients than the exporter has worker threads (16), each a
  // request that would never end: a header that grows one byte a second.
  constexpr int kSlowClients = 100;
  const std::string trickle = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(64, 'a');
  std::vector<int> slow;
  for (int i = 0; i < kSlowClients; ++i) {
    int fd = connectLoopback(port, 5);
    ASSERT_GE(fd, 0) << i;
    slow.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    for (size_t byte = 0; !done && byte < trickle.size(); ++byte) {
      for (int fd : slow) ::send(fd, &trickle[byte], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int tick = 0; tick < 10 && !done; ++tick) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // A scrape every 0.2 s for 7 s: past the default 5 s request deadline, so
  // the slow clients are dropped before it ends.
  std::vector<double> latencies_s;
  int answered = 0;
  auto end = Clock::now() + std::chrono::seconds(7);
  while (Clock::now() < end) {
    auto began = Clock::now();
    auto r = httpGet(port, "/metrics", 3);
    latencies_s.push_back(std::chrono::duration<double>(Clock::now() - began).count());
    if (r.status == 200 && r.body.find("DCGM_FI_DEV_GPU_UTIL") != std::string::npos) ++answered;
    std::this_thread::sleep_until(began + std::chrono::milliseconds(200));
  }
  int dropped = 0;
  for (int fd : slow) dropped += closedByServer(fd, std::chrono::milliseconds(dropped == 0 ? 1000 : 0));
  done = true;
  trickler.join();
  for (int fd : slow) ::close(fd);

  double worst = *std::max_element(latencies_s.begin(), latencies_s.end());
  EXPECT_EQ(answered, static_cast<int>(latencies_s.size())) << "worst latency " << worst << " s";
  EXPECT_LT(worst, 2.0);
  EXPECT_EQ(dropped, kSlowClients) << "slow connections still open after the request deadline";
  EXPECT_EQ(httpGet(port, "/healthz").body, "ok");
  EXPECT_EQ(exporter.stop(), 0) << exporter.log();
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtrain::testing
