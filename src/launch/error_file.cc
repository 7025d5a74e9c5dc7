#include "launch/error_file.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace dtrain {

std::optional<ErrorFileReport> readErrorFile(const std::string& path) {
  // Only a regular file is read: a FIFO would block the launcher.
  if (path.empty() || !isRegularFile(path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  ErrorFileReport report;
  report.contents.resize(kMaxErrorFileBytes);
  in.read(report.contents.data(), static_cast<std::streamsize>(kMaxErrorFileBytes));
  report.contents.resize(static_cast<size_t>(in.gcount()));

  const auto json = nlohmann::json::parse(report.contents, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return report;
  auto message = json.find("message");
  if (message == json.end()) return report;
  if (message->is_string()) {
    report.message = message->get<std::string>();
  } else if (message->is_object()) {
    auto inner = message->find("message");
    if (inner != message->end() && inner->is_string()) report.message = inner->get<std::string>();
  }
  return report;
}

}  // namespace dtrain
