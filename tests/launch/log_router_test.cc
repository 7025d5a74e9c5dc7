// LogRouter over pipes the test writes itself: line integrity, prefixes,
// files, tails, EOF handling, a console that went away.
#include "launch/log_router.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "helpers/worker_test_util.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::makeTempDir;
using testing::readFile;
using testing::splitLines;

struct Pipe {
  int read = -1;
  int write = -1;
};

// The read end is non-blocking, as spawnProcess hands it to the router.
Pipe makePipe() {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return {fds[0], fds[1]};
}

void writeAllTo(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
}

class LogRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    console_out_ = ::open((dir_ + "/console_out").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    console_err_ = ::open((dir_ + "/console_err").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  void TearDown() override {
    ::close(console_out_);
    ::close(console_err_);
    std::filesystem::remove_all(dir_);
  }
  // A worker whose stdout and stderr are pipes the test writes.
  int addWorker(LogRouter& router, const std::string& prefix, Pipe& out, Pipe& err,
                bool with_files = false, bool to_console = true) {
    out = makePipe();
    err = makePipe();
    WorkerStreams streams;
    streams.stdout_fd = out.read;
    streams.stderr_fd = err.read;
    streams.prefix = prefix;
    streams.stdout_to_console = streams.stderr_to_console = to_console;
    if (with_files) {
      streams.stdout_file = dir_ + "/" + prefix + "/stdout.log";
      streams.stderr_file = dir_ + "/" + prefix + "/stderr.log";
    }
    return router.addWorker(streams);
  }
  std::string consoleOut() const { return readFile(dir_ + "/console_out"); }
  std::string consoleErr() const { return readFile(dir_ + "/console_err"); }

  std::string dir_ = makeTempDir();
  int console_out_ = -1;
  int console_err_ = -1;
};

TEST(LinePrefixTest, SubstitutesTorchrunTemplateNames) {
  EXPECT_EQ(formatLinePrefix("", 3, 1, "default", "vm"), "[vm:3]: ");
  EXPECT_EQ(formatLinePrefix("[${role_name}${rank}|${local_rank}@${host}]:", 12, 4, "trainer", "node7"),
            "[trainer12|4@node7]:");
  EXPECT_EQ(formatLinePrefix("$rank/$local_rank $role_name-$host ", 2, 0, "r", "h"), "2/0 r-h ");
  EXPECT_EQ(formatLinePrefix("$$${rank} ${unknown} $other $", 5, 0, "r", "h"), "$5 ${unknown} $other $");
  EXPECT_EQ(formatLinePrefix("${rank", 5, 0, "r", "h"), "${rank");
}

TEST(StreamSetTest, OwnEntryThenAllRanksEntryThenNone) {
  const std::map<int, StreamSet> sets = {{1, StreamSet::kStdout}, {kAllLocalRanks, StreamSet::kBoth}};
  EXPECT_EQ(streamSetFor(sets, 1), StreamSet::kStdout);
  EXPECT_EQ(streamSetFor(sets, 0), StreamSet::kBoth);
  EXPECT_EQ(streamSetFor({{2, StreamSet::kStderr}}, 0), StreamSet::kNone);
  EXPECT_TRUE(includesStdout(StreamSet::kBoth));
  EXPECT_TRUE(includesStderr(StreamSet::kStderr));
  EXPECT_FALSE(includesStderr(StreamSet::kStdout));
  EXPECT_FALSE(includesStdout(StreamSet::kNone));
}

TEST_F(LogRouterTest, ConcurrentWritersNeverTearALine) {
  constexpr int kWorkers = 4, kLines = 1500;
  LogRouter router(console_out_, console_err_);
  std::vector<Pipe> outs(kWorkers), errs(kWorkers);
  for (int w = 0; w < kWorkers; ++w) addWorker(router, "w" + std::to_string(w) + "> ", outs[w], errs[w]);
  router.start();
  auto lineOf = [](int w, int i) { return std::string(1 + (i * 37) % 5000, static_cast<char>('a' + w)) + std::to_string(i); };
  std::vector<std::thread> writers;
  for (int w = 0; w < kWorkers; ++w) {
    writers.emplace_back([&, w] {
      std::string text;
      for (int i = 0; i < kLines; ++i) text += lineOf(w, i) + "\n";
      // Chunks of odd sizes cut lines anywhere.
      for (size_t at = 0, chunk = 1; at < text.size(); at += chunk, chunk = chunk * 7 % 9973 + 1) {
        writeAllTo(outs[w].write, text.substr(at, chunk));
      }
      ::close(outs[w].write);
      ::close(errs[w].write);
    });
  }
  for (auto& t : writers) t.join();
  router.finish(5s);
  std::vector<int> next(kWorkers, 0);
  for (const auto& line : splitLines(consoleOut())) {
    ASSERT_GE(line.size(), 4u);
    const int w = line[1] - '0';
    ASSERT_TRUE(w >= 0 && w < kWorkers) << line.substr(0, 80);
    ASSERT_EQ(line, "w" + std::to_string(w) + "> " + lineOf(w, next[w])) << "torn line";
    ++next[w];
  }
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(next[w], kLines);
}

TEST_F(LogRouterTest, FlushesAPartialLastLineAtEofAndCopiesRawBytesToFiles) {
  LogRouter router(console_out_, console_err_);
  Pipe out, err;
  addWorker(router, "p", out, err, /*with_files=*/true);
  router.start();
  writeAllTo(out.write, "first\nsecond without newline");
  writeAllTo(err.write, "\nafter an empty line");
  ::close(out.write);
  ::close(err.write);
  EXPECT_TRUE(router.waitForEof(0, 5s));
  router.finish(5s);
  EXPECT_EQ(consoleOut(), "pfirst\npsecond without newline\n");
  EXPECT_EQ(consoleErr(), "p\npafter an empty line\n");
  EXPECT_EQ(readFile(dir_ + "/p/stdout.log"), "first\nsecond without newline");
  EXPECT_EQ(readFile(dir_ + "/p/stderr.log"), "\nafter an empty line");
}

// A progress bar ("\r" updates with no newline) reaches the console at
// once, prefixed; its newline ends its line; another worker's line first
// ends it; a complete line shows what a terminal would (after its last \r).
TEST_F(LogRouterTest, CarriageReturnUpdatesPassThroughAsTheyCome) {
  LogRouter router(console_out_, console_err_);
  Pipe out0, err0, out1, err1;
  addWorker(router, "r0> ", out0, err0, /*with_files=*/true);
  addWorker(router, "r1> ", out1, err1);
  router.start();
  std::string want;
  const auto step = [&](int fd, const std::string& bytes, const std::string& shown) {
    writeAllTo(fd, bytes);
    want += shown;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (consoleErr() != want && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(consoleErr(), want) << "after writing '" << bytes << "'";
  };
  step(err0.write, "\r[#   ] 25%\x1b[K", "\rr0> [#   ] 25%\x1b[K");
  step(err0.write, "\r[##  ] 50%\x1b[K", "\rr0> [##  ] 50%\x1b[K");
  step(err1.write, "hello\n", "\nr1> hello\n");
  step(err0.write, "\r[### ] 75%\x1b[K", "\rr0> [### ] 75%\x1b[K");
  step(err0.write, "\nstep 3 done\n", "\nr0> step 3 done\n");
  step(err0.write, "\r[####] 100%\x1b[K\n", "r0> [####] 100%\x1b[K\n");
  step(err0.write, "\r[#   ] 25%\x1b[K", "\rr0> [#   ] 25%\x1b[K");
  ::close(out0.write);
  ::close(err0.write);
  ::close(out1.write);
  ::close(err1.write);
  router.finish(5s);
  EXPECT_EQ(consoleErr(), want + "\n") << "an open bar's line is ended when its stream closes";
  EXPECT_EQ(readFile(dir_ + "/r0> /stderr.log"),
            "\r[#   ] 25%\x1b[K\r[##  ] 50%\x1b[K\r[### ] 75%\x1b[K\nstep 3 done\n\r[####] 100%\x1b[K\n"
            "\r[#   ] 25%\x1b[K")
      << "files get the raw bytes";
  EXPECT_EQ(consoleOut(), "");
}

TEST_F(LogRouterTest, KeepsTheLastTwentyStderrLines) {
  LogRouter router(console_out_, console_err_);
  Pipe out, err;
  const int id = addWorker(router, "", out, err);
  router.start();
  for (int i = 1; i <= 30; ++i) writeAllTo(err.write, "err " + std::to_string(i) + "\n");
  writeAllTo(out.write, "stdout is not in the tail\n");
  ::close(out.write);
  ::close(err.write);
  ASSERT_TRUE(router.waitForEof(id, 5s));
  const auto tail = router.stderrTail(id);
  ASSERT_EQ(tail.size(), LogRouter::kTailLines);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(tail[i], "err " + std::to_string(11 + i));
}

TEST_F(LogRouterTest, CutsALineLongerThanTheLimit) {
  LogRouter router(console_out_, console_err_);
  Pipe out, err;
  addWorker(router, "", out, err);
  router.start();
  std::thread writer([&] {
    writeAllTo(out.write, std::string(LogRouter::kMaxLineBytes + 10, 'a') + "\n");
    ::close(out.write);
    ::close(err.write);
  });
  writer.join();
  router.finish(5s);
  const auto lines = splitLines(consoleOut());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), LogRouter::kMaxLineBytes);
  EXPECT_EQ(lines[1], std::string(10, 'a'));
}

TEST_F(LogRouterTest, FinishReturnsWhileSomeoneStillHoldsThePipe) {
  LogRouter router(console_out_, console_err_);
  Pipe out, err;
  const int id = addWorker(router, "> ", out, err);
  EXPECT_FALSE(router.firstOutputTime().has_value());
  router.start();
  writeAllTo(out.write, "held\npart");
  EXPECT_FALSE(router.waitForEof(id, 50ms));
  const auto begin = std::chrono::steady_clock::now();
  router.finish(100ms);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
  EXPECT_EQ(consoleOut(), "> held\n> part\n");
  EXPECT_TRUE(router.firstOutputTime().has_value());
  ::close(out.write);
  ::close(err.write);
  router.finish(0ms);  // idempotent
}

TEST_F(LogRouterTest, AConsoleThatWentAwayLeavesFilesWritten) {
  Pipe dead_console = makePipe();
  ::close(dead_console.read);  // writes now fail with EPIPE (SIGPIPE is blocked in the router)
  LogRouter router(dead_console.write, dead_console.write);
  Pipe out, err;
  addWorker(router, "x", out, err, /*with_files=*/true);
  router.start();
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
  writeAllTo(out.write, text);
  ::close(out.write);
  ::close(err.write);
  router.finish(5s);
  ::close(dead_console.write);
  EXPECT_EQ(readFile(dir_ + "/x/stdout.log"), text);
}

TEST_F(LogRouterTest, StreamsOffTheConsoleStillReachTheirFilesAndTail) {
  LogRouter router(console_out_, console_err_);
  Pipe out, err;
  const int id = addWorker(router, "q", out, err, /*with_files=*/true, /*to_console=*/false);
  router.start();
  writeAllTo(out.write, "quiet out\n");
  writeAllTo(err.write, "quiet err\n");
  ::close(out.write);
  ::close(err.write);
  router.finish(5s);
  EXPECT_EQ(consoleOut(), "");
  EXPECT_EQ(consoleErr(), "");
  EXPECT_EQ(readFile(dir_ + "/q/stdout.log"), "quiet out\n");
  EXPECT_EQ(readFile(dir_ + "/q/stderr.log"), "quiet err\n");
  EXPECT_EQ(router.stderrTail(id), std::vector<std::string>{"quiet err"});
}

}  // namespace
}  // namespace dtrain
