#include "train/stop_request.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>

namespace dtrain {
namespace {

constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};
// A repeat closer than this to the first signal is the same event reaching
// the process twice (Slurm signals every process of a step, and the
// launcher forwards what it got), not a user insisting.
constexpr int64_t kSameEventNs = 2'000'000'000;
std::atomic<int> g_received{0};
std::atomic<int64_t> g_received_at_ns{0};
struct sigaction g_previous[3];

int64_t monotonicNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void onStopSignal(int sig) {
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
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &action, &g_previous[i]);
}

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
