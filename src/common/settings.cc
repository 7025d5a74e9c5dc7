#include "common/settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace dtrain {
namespace {
// Function-local static: settings register from other translation units'
// static initialisers, whose order is unspecified.
std::vector<const SettingBase*>& registry() {
  static std::vector<const SettingBase*> settings;
  return settings;
}
std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
}  // namespace

SettingBase::SettingBase(std::string name, std::string env, std::string default_text,
                         std::string help, std::string type_name)
    : name_(std::move(name)),
      env_(std::move(env)),
      default_text_(std::move(default_text)),
      help_(std::move(help)),
      type_name_(std::move(type_name)) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().push_back(this);
}

std::optional<std::string> SettingBase::envValue() const {
  const char* value = std::getenv(env_.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::vector<const SettingBase*> allSettings() {
  std::vector<const SettingBase*> out;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    out = registry();
  }
  std::sort(out.begin(), out.end(),
            [](const SettingBase* a, const SettingBase* b) { return a->name() < b->name(); });
  return out;
}

void checkAllSettings() {
  for (const SettingBase* s : allSettings()) s->check();
}

std::string settingsMarkdown() {
  std::ostringstream os;
  os << "| setting | environment variable | type | default | meaning |\n";
  os << "|---|---|---|---|---|\n";
  for (const SettingBase* s : allSettings()) {
    os << "| `" << s->name() << "` | `" << s->env() << "` | " << s->typeName() << " | `"
       << (s->defaultText().empty() ? std::string("\"\"") : s->defaultText()) << "` | "
       << s->help() << " |\n";
  }
  return os.str();
}

int64_t parseInt64(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE) {
    throw ConfigError(what + "='" + text + "' is not an integer");
  }
  return value;
}

double parseDouble(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0') {
    throw ConfigError(what + "='" + text + "' is not a number");
  }
  if (!std::isfinite(value) || errno == ERANGE) throw ConfigError(what + "='" + text + "' is not a finite number");
  return value;
}

bool parseBool(const std::string& text, const std::string& what) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw ConfigError(what + "='" + text + "' is not a boolean; expected 1/0, true/false, yes/no or on/off");
}

std::string SettingTraits<double>::text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace dtrain
