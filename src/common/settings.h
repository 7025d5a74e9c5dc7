// The settings registry: each tunable is declared once, with its name, its
// environment variable, its default and its help text. The CLI's --help and
// `dtrain settings` (which generates docs/settings.md) read the same registry,
// so documentation never drifts from the code.
//
//   DTRAIN_SETTING(int64_t, kStoreTimeout, "store-timeout", "DTRAIN_STORE_TIMEOUT",
//                  300, "Seconds a store operation waits before failing.");
//   ... kStoreTimeout.get() ...
//
// get() parses the environment once and caches the value (NCCL_PARAM does the
// same); a value that does not parse, or that the setting's check refuses
// (DTRAIN_SETTING_CHECKED), raises ConfigError naming the variable, the value
// and what is expected. `dtrain` checks every setting set in its environment
// at start (checkAllSettings), so a bad one is an error before any work.
// Settings must be declared at namespace scope (static storage), which
// registers them before main().
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace dtrain {

class SettingBase {
 public:
  SettingBase(std::string name, std::string env, std::string default_text,
              std::string help, std::string type_name);
  virtual ~SettingBase() = default;
  SettingBase(const SettingBase&) = delete;
  SettingBase& operator=(const SettingBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& env() const { return env_; }
  const std::string& defaultText() const { return default_text_; }
  const std::string& help() const { return help_; }
  const std::string& typeName() const { return type_name_; }
  // The raw environment value, if set (not cached).
  std::optional<std::string> envValue() const;
  // Forget the cached value (tests that change the environment).
  virtual void reset() const = 0;
  // ConfigError when the environment's value does not parse or is refused.
  virtual void check() const = 0;

 private:
  std::string name_, env_, default_text_, help_, type_name_;
};

// All declared settings, sorted by name.
std::vector<const SettingBase*> allSettings();
// check() of every setting (the first failure is thrown).
void checkAllSettings();
// The registry as a Markdown table (docs/settings.md).
std::string settingsMarkdown();

// Parsers shared by settings and the CLI; each throws ConfigError naming
// `what` (an env var or a flag) and the expected form.
int64_t parseInt64(const std::string& text, const std::string& what);
// A finite number (nan and inf are refused).
double parseDouble(const std::string& text, const std::string& what);
bool parseBool(const std::string& text, const std::string& what);

template <typename T>
struct SettingTraits;
template <>
struct SettingTraits<int64_t> {
  static constexpr const char* kName = "integer";
  static int64_t parse(const std::string& s, const std::string& w) { return parseInt64(s, w); }
  static std::string text(int64_t v) { return std::to_string(v); }
};
template <>
struct SettingTraits<double> {
  static constexpr const char* kName = "number";
  static double parse(const std::string& s, const std::string& w) { return parseDouble(s, w); }
  static std::string text(double v);
};
template <>
struct SettingTraits<bool> {
  static constexpr const char* kName = "boolean";
  static bool parse(const std::string& s, const std::string& w) { return parseBool(s, w); }
  static std::string text(bool v) { return v ? "1" : "0"; }
};
template <>
struct SettingTraits<std::string> {
  static constexpr const char* kName = "string";
  static std::string parse(const std::string& s, const std::string&) { return s; }
  static std::string text(const std::string& v) { return v; }
};

template <typename T>
class Setting : public SettingBase {
 public:
  // "" when the value is acceptable, else what is expected ("one of a, b").
  using Check = std::string (*)(const T&);

  Setting(std::string name, std::string env, T default_value, std::string help, Check check = nullptr)
      : SettingBase(std::move(name), std::move(env), SettingTraits<T>::text(default_value),
                    std::move(help), SettingTraits<T>::kName),
        default_(std::move(default_value)),
        check_(check) {}

  // The value from the environment, else the default. Cached after first use.
  T get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cached_) {
      auto raw = envValue();
      if (!raw || raw->empty()) {
        cached_ = default_;
      } else {
        T value = SettingTraits<T>::parse(*raw, env());
        const std::string expected = check_ != nullptr ? check_(value) : std::string();
        if (!expected.empty()) throw ConfigError(env() + "='" + *raw + "' is refused; expected " + expected);
        cached_ = std::move(value);
      }
    }
    return *cached_;
  }
  void check() const override { (void)get(); }
  const T& defaultValue() const { return default_; }
  void reset() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    cached_.reset();
  }

 private:
  T default_;
  Check check_;
  mutable std::mutex mutex_;
  mutable std::optional<T> cached_;
};

}  // namespace dtrain

#define DTRAIN_SETTING(type, var, name, env, default_value, help) \
  const ::dtrain::Setting<type> var { name, env, type(default_value), help }
// The same with a check of the parsed value (Setting<type>::Check).
#define DTRAIN_SETTING_CHECKED(type, var, name, env, default_value, help, check) \
  const ::dtrain::Setting<type> var { name, env, type(default_value), help, check }
