#include "tests/support/netns_bed.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/process.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

constexpr const char* kPrefix = "dtnb-";
constexpr const char* kNamespaceDir = "/run/netns/";
// The qdisc of a partitioned link end. Every frame is longer than the
// 1-byte burst (tbf drops it on enqueue) and than the 1-byte queue (which
// drops what GSO segmentation hands it).
const std::vector<std::string> kDropAll{"tbf", "rate", "1kbit", "burst", "1", "limit", "1"};
// Run by commandIn's sh: $1 the host name, $2 the hosts file, $3 mount.
// Writing /proc/sys/kernel/hostname is `hostname` without needing it.
constexpr const char* kNodeScript =
    "echo \"$1\" > /proc/sys/kernel/hostname && \"$3\" --bind \"$2\" /etc/hosts && shift 3 && exec \"$@\"";

// The tags ("<pid>-<counter>") of this process's live beds, so that its
// own crashed predecessor's beds (a reused pid) can be told from them.
std::mutex& liveTagsMutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<std::string>& liveTags() {
  static std::set<std::string> tags;
  return tags;
}
bool claimTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(liveTagsMutex());
  return liveTags().insert(tag).second;
}
void releaseTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(liveTagsMutex());
  liveTags().erase(tag);
}
bool tagIsLive(const std::string& tag) {
  std::lock_guard<std::mutex> lock(liveTagsMutex());
  return liveTags().count(tag) > 0;
}

std::string namespaceOf(const std::string& tag, const std::string& role) { return kPrefix + tag + "-" + role; }

// `name` on PATH, else in the sbin folders a non-root PATH lacks; "" if none.
std::string findTool(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string folders = std::string(path ? path : "") + ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream in(folders);
  std::string folder;
  while (std::getline(in, folder, ':')) {
    if (folder.empty()) continue;
    const std::string candidate = folder + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct Tools {
  std::string ip, tc, unshare, mount, sh;
};
const Tools& tools() {
  static const Tools found{findTool("ip"), findTool("tc"), findTool("unshare"), findTool("mount"), findTool("sh")};
  return found;
}

std::string joined(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& arg : argv) text += (text.empty() ? "" : " ") + arg;
  return text;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

CommandResult runTool(const std::vector<std::string>& argv, const std::string& output_path, int time_limit_s = 30) {
  RunOptions options;
  options.output_path = output_path;
  options.timeout = std::chrono::seconds(time_limit_s);
  const RunResult run = runProcess(argv, options);
  return CommandResult{run.timed_out ? 124 : run.exitCode(), readFile(output_path)};
}

// "" when argv succeeded, else "`argv` exited N: output".
std::string toolFailure(const std::vector<std::string>& argv, const std::string& output_path) {
  const CommandResult result = runTool(argv, output_path);
  if (result.exit_code == 0) return "";
  return "`" + joined(argv) + "` exited " + std::to_string(result.exit_code) + ": " + trimmed(result.output);
}

void runToolOrThrow(const std::vector<std::string>& argv, const std::string& output_path) {
  const std::string failure = toolFailure(argv, output_path);
  if (!failure.empty()) throw IoError("netns bed: " + failure);
}

// `ip [-n ns] -batch file` with `commands`, one a line.
void runIpBatch(const std::string& netns, const std::string& commands, const std::string& folder) {
  const std::string batch = folder + "/batch";
  writeFile(batch, commands);
  std::vector<std::string> argv{tools().ip};
  if (!netns.empty()) argv.insert(argv.end(), {"-n", netns});
  argv.insert(argv.end(), {"-batch", batch});
  const std::string failure = toolFailure(argv, folder + "/ip-output");
  if (!failure.empty()) throw IoError("netns bed: " + failure + "\n(batch:\n" + commands + ")");
}

// Live (non-zombie: an exited task has no namespace) processes whose
// network namespace is the one bound at `path`, this process excepted.
std::vector<pid_t> processesInNamespace(const std::string& path) {
  std::vector<pid_t> pids;
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) return pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  const pid_t self = ::getpid();
  while (struct dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    struct stat ns {};
    const std::string link = std::string("/proc/") + entry->d_name + "/ns/net";
    if (::stat(link.c_str(), &ns) == 0 && ns.st_dev == target.st_dev && ns.st_ino == target.st_ino) {
      pids.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  return pids;
}

std::vector<pid_t> processesInAny(const std::vector<std::string>& paths) {
  std::vector<pid_t> pids;
  for (const auto& path : paths) {
    for (pid_t pid : processesInNamespace(path)) pids.push_back(pid);
  }
  return pids;
}

// What is left of the processes in `paths`: those still in them, and those
// of `signaled` still dying (a task leaves its namespaces before it turns
// into the zombie its parent can reap, so "none in the namespace" alone
// would let kill() return before a BackgroundProcess could see the end).
std::vector<pid_t> stillThere(const std::vector<std::string>& paths, std::set<pid_t>& signaled) {
  std::vector<pid_t> pids = processesInAny(paths);
  for (pid_t pid : signaled) {
    if (std::find(pids.begin(), pids.end(), pid) == pids.end() && processAlive(pid)) pids.push_back(pid);
  }
  signaled.insert(pids.begin(), pids.end());
  return pids;
}

// SIGTERM to every process in `paths`, SIGKILL to what is left after
// `grace` (and again to what a dying parent forked meanwhile). True once
// none is left; false if some outlived 10 s of SIGKILLs.
bool stopProcessesIn(const std::vector<std::string>& paths, std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  std::set<pid_t> signaled;
  std::vector<pid_t> pids = stillThere(paths, signaled);
  if (pids.empty()) return true;
  if (grace.count() > 0) {
    for (pid_t pid : pids) ::kill(pid, SIGTERM);
    const auto deadline = Clock::now() + grace;
    while (!(pids = stillThere(paths, signaled)).empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!pids.empty()) {
    if (Clock::now() >= deadline) return false;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pids = stillThere(paths, signaled);
  }
  return true;
}

// Kills what runs in `names` and deletes them; failures go to stderr
// (this runs in destructors and in the clean-up of others' beds).
void deleteNamespaces(const std::vector<std::string>& names, std::chrono::milliseconds grace,
                      const std::string& folder) {
  std::vector<std::string> paths;
  std::string commands;
  for (const auto& name : names) {
    if (!pathExists(kNamespaceDir + name)) continue;
    paths.push_back(kNamespaceDir + name);
    commands += "netns del " + name + "\n";
  }
  if (paths.empty()) return;
  if (!stopProcessesIn(paths, grace)) {
    std::fprintf(stderr, "netns bed: processes in %s survived SIGKILL for 10 s\n", joined(names).c_str());
  }
  const std::string batch = folder + "/delete-batch";
  writeFile(batch, commands);
  // -force: go on past a namespace another process deleted meanwhile.
  const std::string failure = toolFailure({tools().ip, "-force", "-batch", batch}, folder + "/delete-output");
  for (const auto& path : paths) {
    if (pathExists(path)) std::fprintf(stderr, "netns bed: %s is still there: %s\n", path.c_str(), failure.c_str());
  }
}

// The tag of a bed's namespace name ("dtnb-<pid>-<counter>-<role>"), and
// the owner's pid; false for names that are not a bed's.
bool parseBedName(const std::string& name, std::string* tag, pid_t* owner) {
  const std::string prefix = kPrefix;
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t pid_end = name.find('-', prefix.size());
  if (pid_end == std::string::npos || pid_end == prefix.size()) return false;
  const size_t tag_end = name.find('-', pid_end + 1);
  if (tag_end == std::string::npos) return false;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  if (end != name.c_str() + pid_end || pid <= 0) return false;
  *tag = name.substr(prefix.size(), tag_end - prefix.size());
  *owner = static_cast<pid_t>(pid);
  return true;
}

// Beds whose owner is gone (a crashed or killed test run), and this
// process's own leftovers from an earlier process with the same pid.
void removeStaleBeds(const std::string& folder) {
  std::vector<std::string> stale;
  if (DIR* dir = ::opendir(kNamespaceDir)) {
    while (struct dirent* entry = ::readdir(dir)) {
      std::string tag;
      pid_t owner = 0;
      if (!parseBedName(entry->d_name, &tag, &owner)) continue;
      const bool gone = owner == ::getpid() ? !tagIsLive(tag) : !processAlive(owner);
      if (gone) stale.push_back(entry->d_name);
    }
    ::closedir(dir);
  }
  if (stale.empty()) return;
  std::fprintf(stderr, "netns bed: removing namespaces left by test processes that no longer run: %s\n",
               joined(stale).c_str());
  deleteNamespaces(stale, std::chrono::milliseconds(0), folder);
}

// `tc` making dev in netns drop everything.
std::vector<std::string> dropAllCommand(const std::string& netns, const std::string& dev) {
  std::vector<std::string> argv{tools().tc, "-n", netns, "qdisc", "replace", "dev", dev, "root"};
  argv.insert(argv.end(), kDropAll.begin(), kDropAll.end());
  return argv;
}

// The commandIn wrapper, with the files it needs spelled out.
std::vector<std::string> wrapped(const std::string& netns, const std::string& host_name, const std::string& hosts_file,
                                 const std::vector<std::string>& argv) {
  const Tools& t = tools();
  std::vector<std::string> command{t.ip, "netns",     "exec",        netns,     t.unshare,  "--uts", t.sh,
                                   "-c", kNodeScript, "dtrain-node", host_name, hosts_file, t.mount};
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

// Builds and deletes a switch namespace with a bridge, a veth pair, a tbf
// qdisc and a program under the node wrapper: "" when all of it works.
std::string probe() {
  if (::geteuid() != 0) {
    return "network namespaces need root, and this test runs as uid " + std::to_string(::geteuid());
  }
  const Tools& t = tools();
  const std::pair<const char*, const std::string*> needed[] = {{"ip (iproute2)", &t.ip},
                                                               {"tc (iproute2)", &t.tc},
                                                               {"unshare (util-linux)", &t.unshare},
                                                               {"mount (util-linux)", &t.mount},
                                                               {"sh", &t.sh}};
  for (const auto& [what, path] : needed) {
    if (path->empty()) return std::string(what) + " is not installed (looked in PATH, /usr/sbin and /sbin)";
  }
  TempDir folder("dtrain-netns-probe");
  const std::string tag = std::to_string(::getpid()) + "-probe";
  const std::string netns = namespaceOf(tag, "sw");
  const std::string output = folder / "output";
  claimTag(tag);
  std::string reason;
  if (std::string failure = toolFailure({t.ip, "netns", "add", netns}, output); !failure.empty()) {
    reason = "cannot create a network namespace: " + failure;
  } else if (failure = toolFailure({t.ip, "-n", netns, "link", "add", "br0", "type", "bridge"}, output);
             !failure.empty()) {
    reason = "cannot create a bridge in a network namespace: " + failure;
  } else if (failure = toolFailure(
                 {t.ip, "-n", netns, "link", "add", "p0", "master", "br0", "type", "veth", "peer", "name", "p1"},
                 output);
             !failure.empty()) {
    reason = "cannot create a veth pair on a bridge: " + failure;
  } else if (failure = toolFailure(dropAllCommand(netns, "p0"), output); !failure.empty()) {
    reason = "the tbf qdisc that partition() drops packets with is missing: " + failure;
  } else {
    const std::string hosts = folder / "hosts";
    writeFile(hosts, "127.0.0.1 localhost\n");
    failure = toolFailure(wrapped(netns, "probe", hosts, {"true"}), output);
    if (!failure.empty()) reason = "cannot start a program in a namespace with its own host name: " + failure;
  }
  deleteNamespaces({netns}, std::chrono::milliseconds(0), folder.path());
  releaseTag(tag);
  return reason;
}

}  // namespace

std::string NetnsBed::unavailableReason() {
  const char* off = std::getenv("DTRAIN_TEST_NO_NETNS");
  if (off != nullptr && *off != '\0' && std::string(off) != "0") {
    return "DTRAIN_TEST_NO_NETNS is set, so this run treats network namespaces as unavailable";
  }
  static const std::string probed = probe();
  return probed;
}

NetnsBed::ThreadInNamespace::ThreadInNamespace(const std::string& namespace_path) {
  home_fd_ = DTRAIN_CHECK_ERRNO(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), "netns bed");
  const int target = ::open(namespace_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
    const int err = errno;
    if (target >= 0) ::close(target);
    ::close(home_fd_);
    throw errnoError(target < 0 ? "open" : "setns", err, "entering " + namespace_path);
  }
  ::close(target);
}

NetnsBed::ThreadInNamespace::~ThreadInNamespace() {
  if (::setns(home_fd_, CLONE_NEWNET) != 0) {
    // A thread stranded in a node would run the rest of the tests there.
    std::fprintf(stderr, "netns bed: cannot return to this thread's network namespace: %s\n",
                 errnoString(errno).c_str());
    std::abort();
  }
  ::close(home_fd_);
}

NetnsBed::NetnsBed(int nodes, std::chrono::milliseconds stop_grace)
    : nodes_(nodes), stop_grace_(stop_grace), files_("dtrain-netns-bed") {
  if (const std::string reason = unavailableReason(); !reason.empty()) {
    throw ConfigError("no network namespace test bed here: " + reason);
  }
  if (nodes < 1 || nodes > 253) {
    throw ConfigError("a netns bed has 1 to 253 nodes (one /24), not " + std::to_string(nodes));
  }
  static std::atomic<unsigned> counter{0};
  const pid_t pid = ::getpid();
  unsigned mine = 0;
  do {
    mine = counter++;
    tag_ = std::to_string(pid) + "-" + std::to_string(mine);
  } while (pathExists(kNamespaceDir + switchNamespace()) || !claimTag(tag_));
  const unsigned id = (static_cast<unsigned>(pid) * 16 + mine) % (250 * 250);
  subnet_ = static_cast<int>((1 + id / 250) * 256 + 1 + id % 250);
  partitioned_.assign(static_cast<size_t>(nodes), false);
  removeStaleBeds(files_.path());
  try {
    build();
  } catch (...) {
    destroy();
    throw;
  }
}

NetnsBed::~NetnsBed() { destroy(); }

void NetnsBed::build() {
  std::string hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n";
  for (int i = 0; i < nodes_; ++i) hosts += address(i) + " " + hostname(i) + "\n";
  writeFile(files_ / "hosts", hosts);

  std::string namespaces;
  for (const auto& name : namespaceNames()) namespaces += "netns add " + name + "\n";
  runIpBatch("", namespaces, files_.path());

  auto mac = [](int node) {
    char text[32];
    std::snprintf(text, sizeof(text), "02:00:00:00:%02x:%02x", (node + 1) >> 8, (node + 1) & 0xff);
    return std::string(text);
  };
  std::string ports = "link add br0 type bridge\nlink set br0 up\n";
  for (int i = 0; i < nodes_; ++i) {
    const std::string port = "n" + std::to_string(i);
    ports += "link add " + port + " type veth peer name eth0 address " + mac(i) + " netns " + namespaceName(i) + "\n";
    ports += "link set " + port + " master br0 up\n";
  }
  runIpBatch(switchNamespace(), ports, files_.path());

  for (int i = 0; i < nodes_; ++i) {
    std::string node = "link set lo up\naddr add " + address(i) + "/24 dev eth0\nlink set eth0 up\n";
    for (int peer = 0; peer < nodes_; ++peer) {
      if (peer == i) continue;
      node += "neigh replace " + address(peer) + " lladdr " + mac(peer) + " dev eth0 nud permanent\n";
    }
    runIpBatch(namespaceName(i), node, files_.path());
  }
}

void NetnsBed::destroy() noexcept {
  try {
    deleteNamespaces(namespaceNames(), stop_grace_, files_.path());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "netns bed %s: teardown failed: %s\n", tag_.c_str(), e.what());
  }
  releaseTag(tag_);
}

void NetnsBed::checkNode(int node) const {
  if (node < 0 || node >= nodes_) {
    throw ConfigError("node " + std::to_string(node) + " is not in this bed of " + std::to_string(nodes_) + " nodes");
  }
}

std::string NetnsBed::address(int node) const {
  checkNode(node);
  return "10." + std::to_string(subnet_ / 256) + "." + std::to_string(subnet_ % 256) + "." + std::to_string(node + 1);
}

std::string NetnsBed::hostname(int node) const {
  checkNode(node);
  return "node" + std::to_string(node);
}

std::string NetnsBed::namespaceName(int node) const {
  checkNode(node);
  return namespaceOf(tag_, "n" + std::to_string(node));
}

std::string NetnsBed::switchNamespace() const { return namespaceOf(tag_, "sw"); }

std::string NetnsBed::namespacePath(int node) const { return kNamespaceDir + namespaceName(node); }

std::vector<std::string> NetnsBed::namespaceNames() const {
  std::vector<std::string> names;
  for (int i = 0; i < nodes_; ++i) names.push_back(namespaceName(i));
  names.push_back(switchNamespace());
  return names;
}

std::vector<std::string> NetnsBed::commandIn(int node, const std::vector<std::string>& argv) const {
  return wrapped(namespaceName(node), hostname(node), files_ / "hosts", argv);
}

std::unique_ptr<BackgroundProcess> NetnsBed::start(int node, const std::vector<std::string>& argv,
                                                   const std::map<std::string, std::string>& env,
                                                   const std::string& log_path) {
  return std::make_unique<BackgroundProcess>(commandIn(node, argv), env, log_path);
}

CommandResult NetnsBed::run(int node, const std::vector<std::string>& argv, int time_limit_s) {
  return runTool(commandIn(node, argv), files_ / "run-output", time_limit_s);
}

void NetnsBed::partition(int node) {
  checkNode(node);
  runToolOrThrow(dropAllCommand(switchNamespace(), "n" + std::to_string(node)), files_ / "tc-output");
  runToolOrThrow(dropAllCommand(namespaceName(node), "eth0"), files_ / "tc-output");
  partitioned_[static_cast<size_t>(node)] = true;
}

void NetnsBed::heal(int node) {
  checkNode(node);
  if (!partitioned_[static_cast<size_t>(node)]) return;
  const std::string port = "n" + std::to_string(node);
  runToolOrThrow({tools().tc, "-n", switchNamespace(), "qdisc", "del", "dev", port, "root"}, files_ / "tc-output");
  runToolOrThrow({tools().tc, "-n", namespaceName(node), "qdisc", "del", "dev", "eth0", "root"}, files_ / "tc-output");
  partitioned_[static_cast<size_t>(node)] = false;
}

void NetnsBed::linkDown(int node) {
  checkNode(node);
  runToolOrThrow({tools().ip, "-n", switchNamespace(), "link", "set", "n" + std::to_string(node), "down"},
                 files_ / "ip-output");
}

void NetnsBed::linkUp(int node) {
  checkNode(node);
  runToolOrThrow({tools().ip, "-n", switchNamespace(), "link", "set", "n" + std::to_string(node), "up"},
                 files_ / "ip-output");
}

void NetnsBed::kill(int node) {
  if (!stopProcessesIn({namespacePath(node)}, std::chrono::milliseconds(0))) {
    throw IoError("netns bed: processes in " + namespaceName(node) + " survived SIGKILL for 10 s");
  }
}

void NetnsBed::powerOff(int node) {
  partition(node);
  kill(node);
}

std::vector<pid_t> NetnsBed::processesIn(int node) const { return processesInNamespace(namespacePath(node)); }

}  // namespace dtrain::testing
