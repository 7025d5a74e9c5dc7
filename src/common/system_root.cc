#include "common/system_root.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace dtrain {

SystemRoot::SystemRoot(std::string root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  struct stat st {};
  if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw ConfigError("--root " + root_ + ": not a directory (expected a tree holding proc/, sys/, etc/)");
  }
}

std::string SystemRoot::path(const std::string& system_path) const {
  if (isLive()) return system_path;
  if (!system_path.empty() && system_path.front() == '/') return root_ + system_path;
  return root_ + "/" + system_path;
}

std::optional<std::string> SystemRoot::read(const std::string& system_path) const {
  std::ifstream in(path(system_path), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return out.str();
}

std::optional<std::string> SystemRoot::readLine(const std::string& system_path) const {
  auto text = read(system_path);
  if (!text) return std::nullopt;
  std::string line = text->substr(0, text->find('\n'));
  const char* space = " \t\r";
  size_t begin = line.find_first_not_of(space);
  if (begin == std::string::npos) return std::string();
  size_t end = line.find_last_not_of(space);
  return line.substr(begin, end - begin + 1);
}

std::optional<long long> SystemRoot::readInt(const std::string& system_path) const {
  auto line = readLine(system_path);
  if (!line || line->empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(line->c_str(), &end, 10);
  if (errno != 0 || end == line->c_str()) return std::nullopt;
  return value;
}

bool SystemRoot::exists(const std::string& system_path) const {
  struct stat st {};
  return ::lstat(path(system_path).c_str(), &st) == 0;
}

std::vector<std::string> SystemRoot::list(const std::string& system_path) const {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path(system_path).c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> SystemRoot::readLink(const std::string& system_path) const {
  char buffer[4096];
  ssize_t n = ::readlink(path(system_path).c_str(), buffer, sizeof(buffer) - 1);
  if (n < 0) return std::nullopt;
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace dtrain
