#include "train/stop_request.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>

#include <unistd.h>

namespace dtrain {
namespace {

constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};
// A repeat closer than this to the first signal is the same event reaching
// the process twice (Slurm signals every process of a step, and the
// launcher forwards what it got), not a user insisting.
constexpr int64_t kSameEventNs = 2'000'000'000;
std::atomic<int> g_received{0};
// False until the training loop starts: before that there is nothing to save.
std::atomic<bool> g_deferring{false};
std::atomic<int64_t> g_received_at_ns{0};
struct sigaction g_previous[3];

int64_t monotonicNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Async-signal-safe: the sentence, then _exit(128 + sig).
[[noreturn]] void stopBeforeTheFirstStep(int sig) {
  const char* name = sig == SIGUSR1 ? "SIGUSR1" : sig == SIGTERM ? "SIGTERM" : "SIGINT";
  const int code = 128 + sig;
  char text[160];
  size_t n = 0;
  auto put = [&](const char* part) {
    while (*part != '\0' && n < sizeof(text) - 1) text[n++] = *part++;
  };
  put("dtrain train: stopped by ");
  put(name);
  put(" before the first step (nothing to save); exit ");
  char digits[4] = {static_cast<char>('0' + code / 100), static_cast<char>('0' + code / 10 % 10),
                    static_cast<char>('0' + code % 10), '\0'};
  put(digits);
  put("\n");
  ssize_t ignored = ::write(STDERR_FILENO, text, n);
  (void)ignored;
  ::_exit(code);
}

void onStopSignal(int sig) {
  if (!g_deferring.load()) stopBeforeTheFirstStep(sig);
  int expected = 0;
  if (g_received.compare_exchange_strong(expected, sig)) {
    g_received_at_ns.store(monotonicNs());
    return;
  }
  if (sig == SIGUSR1) return;  // repeated warnings change nothing
  if (monotonicNs() - g_received_at_ns.load() < kSameEventNs) return;
  // SIGINT or SIGTERM again, later: stop now, as the signal does by default.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

StopSignals::StopSignals() {
  g_received.store(0);
  g_deferring.store(false);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &action, &g_previous[i]);
}

void StopSignals::deferFromNowOn() { g_deferring.store(true); }

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

int StopSignals::received() { return g_received.load(); }

void StopSignals::reset() { g_received.store(0); }

StopAgreement::StopAgreement(int rank, int size, std::function<void(std::vector<double>&)> sum,
                             std::function<int()> local)
    : rank_(rank), size_(size), sum_(std::move(sum)), local_(std::move(local)) {}

bool StopAgreement::stopAfter() {
  const int mine = local_ ? local_() : 0;
  ++steps_seen_;
  if (size_ <= 1 || !sum_) {
    signal_ = mine;
    return mine != 0;
  }
  if (steps_seen_ == 1) first_step_ = Clock::now();
  const bool calibrate = steps_seen_ == kCalibrationSteps;
  if (steps_seen_ > kCalibrationSteps && steps_seen_ % interval_ != 0) return false;
  // Per stop signal, how many ranks got it (the first entry: any).
  std::vector<double> values{mine != 0 ? 1.0 : 0.0};
  for (int sig : kStopSignals) values.push_back(mine == sig ? 1.0 : 0.0);
  if (calibrate) {
    // Rank 0's choice of interval: its steps since the first one took this
    // long each, and a check every kCheckPeriod of them.
    double proposal = 0;
    if (rank_ == 0) {
      const double per_step =
          std::chrono::duration<double>(Clock::now() - first_step_).count() / static_cast<double>(kCalibrationSteps - 1);
      const double period = std::chrono::duration<double>(kCheckPeriod).count();
      proposal = per_step > 0 ? std::clamp(std::floor(period / per_step), 1.0, 1000.0) : 1000.0;
    }
    values.push_back(proposal);
  }
  sum_(values);
  const size_t kinds = std::size(kStopSignals);
  if (calibrate) interval_ = std::max<int64_t>(1, static_cast<int64_t>(values[1 + kinds]));
  if (values[0] <= 0) return false;
  // The signal most ranks got (the same on every rank).
  signal_ = 0;
  double most = 0;
  for (size_t i = 0; i < kinds; ++i) {
    if (values[1 + i] > most) {
      most = values[1 + i];
      signal_ = kStopSignals[i];
    }
  }
  return true;
}

}  // namespace dtrain
