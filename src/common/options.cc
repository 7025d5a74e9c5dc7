#include "common/options.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <type_traits>

#include "common/error.h"
#include "common/files.h"
#include "common/settings.h"

namespace dtrain {
namespace {

std::vector<std::string> splitNames(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream in(names);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (!name.empty() && name[0] == '!') name.erase(0, 1);
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

std::string quoted(const std::string& value) { return "'" + value + "'"; }

std::string joined(const std::vector<std::string>& words, const std::string& last_separator) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) text += i + 1 == words.size() ? last_separator : ", ";
    text += words[i];
  }
  return text;
}

std::string withUnit(const std::string& number, const std::string& unit) {
  return unit.empty() ? number : number + " " + unit;
}

// Sets `field` to `value` and runs `check`; a refused value leaves the field
// as it was.
template <typename T, typename Check>
void assignChecked(T& field, const T& value, Check check) {
  const T saved = field;
  field = value;
  try {
    check();
  } catch (...) {
    field = saved;
    throw;
  }
}

std::string parentOf(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string formatNumber(double value) {
  char buffer[64];
  // Whole numbers in plain digits ("1000000", not "1e+06"); the rest shortest.
  const bool whole = std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15;
  const auto result = whole ? std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed)
                            : std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// ---- Option ----

Option::Option(std::string names, std::string help) : names_(std::move(names)), help_(std::move(help)) {}

std::string Option::displayName() const {
  std::string text;
  for (const std::string& name : splitNames(names_)) text += (text.empty() ? "" : "/") + name;
  return text;
}

std::string Option::longName() const {
  std::string longest;
  for (const std::string& name : splitNames(names_)) {
    if (name.size() > longest.size()) longest = name;
  }
  return longest;
}

void Option::reject(const std::string& value, const std::string& why) const {
  throw ConfigError(displayName() + " " + quoted(value) + ": " + why + "; expected " + accepted());
}

// ---- integers ----

template <typename T>
IntegerOption<T>::IntegerOption(std::string names, T& field, std::string help)
    : OptionBuilder<IntegerOption<T>>(std::move(names), std::move(help)), field_(field) {}

template <typename T>
IntegerOption<T>& IntegerOption<T>::range(T min, T max) {
  min_ = min;
  max_ = max;
  return *this;
}

template <typename T>
IntegerOption<T>& IntegerOption<T>::unit(std::string unit) {
  unit_ = std::move(unit);
  return *this;
}

template <typename T>
IntegerOption<T>& IntegerOption<T>::defaultMeans(std::string meaning) {
  default_is_marker_ = true;
  marker_ = field_;
  this->default_meaning_ = std::move(meaning);
  return *this;
}

template <typename T>
std::string IntegerOption<T>::accepted() const {
  const bool bounded_below = min_ != std::numeric_limits<T>::lowest() || std::is_unsigned_v<T>;
  const bool bounded_above = max_ != std::numeric_limits<T>::max();
  std::string text = "an integer";
  if (bounded_below && bounded_above) {
    text += " from " + std::to_string(min_) + " to " + std::to_string(max_);
  } else if (bounded_below) {
    text += " >= " + std::to_string(min_);
  } else if (bounded_above) {
    text += " <= " + std::to_string(max_);
  }
  return withUnit(text, unit_);
}

template <typename T>
std::string IntegerOption<T>::valueText() const {
  return std::to_string(field_);
}

template <typename T>
void IntegerOption<T>::set(const std::string& text) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  T value{};
  if (std::is_unsigned_v<T> && !text.empty() && text[0] == '-') this->reject(text, "out of range");
  const auto result = std::from_chars(begin, end, value);
  if (result.ec == std::errc::result_out_of_range) this->reject(text, "out of range");
  if (result.ec != std::errc() || result.ptr != end || text.empty()) this->reject(text, "not an integer");
  if (value < min_ || value > max_) this->reject(text, "out of range");
  field_ = value;
}

template <typename T>
void IntegerOption<T>::check() const {
  if (default_is_marker_ && field_ == marker_) return;
  if (field_ < min_ || field_ > max_) this->reject(valueText(), "out of range");
}

template class IntegerOption<int64_t>;
template class IntegerOption<int>;
template class IntegerOption<uint64_t>;

// ---- ports ----

PortOption::PortOption(std::string names, int& field, std::string help)
    : OptionBuilder<PortOption>(std::move(names), std::move(help)), field_(field) {}

PortOption& PortOption::zeroAllowed(std::string meaning) {
  zero_meaning_ = std::move(meaning);
  return *this;
}

std::string PortOption::accepted() const {
  if (zero_meaning_.empty()) return "a port from 1 to 65535";
  return "a port from 1 to 65535, or 0 (" + zero_meaning_ + ")";
}

void PortOption::set(const std::string& text) {
  int value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec == std::errc::result_out_of_range) reject(text, "out of range");
  if (result.ec != std::errc() || result.ptr != text.data() + text.size() || text.empty()) {
    reject(text, "not a port number");
  }
  assignChecked(field_, value, [this] { check(); });
}

void PortOption::check() const {
  const int min = zero_meaning_.empty() ? 1 : 0;
  if (field_ < min || field_ > 65535) reject(valueText(), "out of range");
}

// ---- numbers ----

NumberOption::NumberOption(std::string names, double& field, std::string help)
    : OptionBuilder<NumberOption>(std::move(names), std::move(help)), field_(field) {}

NumberOption& NumberOption::atLeast(double min) {
  min_ = min;
  min_open_ = false;
  has_min_ = true;
  return *this;
}
NumberOption& NumberOption::above(double min) {
  atLeast(min);
  min_open_ = true;
  return *this;
}
NumberOption& NumberOption::atMost(double max) {
  max_ = max;
  max_open_ = false;
  has_max_ = true;
  return *this;
}
NumberOption& NumberOption::below(double max) {
  atMost(max);
  max_open_ = true;
  return *this;
}
NumberOption& NumberOption::unit(std::string unit) {
  unit_ = std::move(unit);
  return *this;
}
NumberOption& NumberOption::defaultMeans(std::string meaning) {
  default_is_marker_ = true;
  marker_ = field_;
  default_meaning_ = std::move(meaning);
  return *this;
}

std::string NumberOption::accepted() const {
  std::string text = "a finite number";
  if (has_min_ && has_max_) {
    text += std::string(min_open_ ? " > " : " >= ") + formatNumber(min_) + " and" + (max_open_ ? " < " : " <= ") +
            formatNumber(max_);
  } else if (has_min_) {
    text += std::string(min_open_ ? " > " : " >= ") + formatNumber(min_);
  } else if (has_max_) {
    text += std::string(max_open_ ? " < " : " <= ") + formatNumber(max_);
  }
  return withUnit(text, unit_);
}

std::string NumberOption::valueText() const { return formatNumber(field_); }

void NumberOption::set(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0') reject(text, "not a number");
  if (!std::isfinite(value) || errno == ERANGE) reject(text, "not a finite number");
  checkValue(value, text);
  field_ = value;
}

void NumberOption::check() const {
  if (default_is_marker_ && field_ == marker_) return;
  checkValue(field_, valueText());
}

void NumberOption::checkValue(double value, const std::string& text) const {
  if (!std::isfinite(value)) reject(text, "not a finite number");
  const bool low = has_min_ && (min_open_ ? !(value > min_) : !(value >= min_));
  const bool high = has_max_ && (max_open_ ? !(value < max_) : !(value <= max_));
  if (low || high) reject(text, "out of range");
}

// ---- text ----

TextOption::TextOption(std::string names, std::string& field, std::string help)
    : OptionBuilder<TextOption>(std::move(names), std::move(help)), field_(field) {}

TextOption& TextOption::nonEmpty() {
  non_empty_ = true;
  return *this;
}

TextOption& TextOption::check(Checker checker, std::string describe) {
  checkers_.push_back(std::move(checker));
  describe_ = std::move(describe);
  return *this;
}

std::string TextOption::accepted() const { return non_empty_ && checkers_.empty() ? "non-empty text" : describe_; }

void TextOption::set(const std::string& text) {
  assignChecked(field_, text, [this] { check(); });
}

void TextOption::check() const {
  if (non_empty_ && field_.empty()) reject(field_, "empty");
  for (const Checker& checker : checkers_) {
    const std::string why = checker(field_);
    if (!why.empty()) reject(field_, why);
  }
}

// ---- paths ----

PathOption::PathOption(std::string names, std::string& field, std::string help)
    : OptionBuilder<PathOption>(std::move(names), std::move(help)), field_(field) {}

std::string PathOption::accepted() const {
  switch (kind_) {
    case Kind::kExistingFile: return "an existing file";
    case Kind::kExistingDirectory: return "an existing directory";
    case Kind::kCreatable: return "a path in an existing directory";
    case Kind::kCreatableFile: return "a file path in an existing directory";
    case Kind::kCreatableDirectory: return "a directory (created if missing)";
    case Kind::kAny: break;
  }
  return "a path";
}

void PathOption::set(const std::string& text) {
  assignChecked(field_, text, [this] { check(); });
}

void PathOption::check() const {
  if (field_.empty()) return;  // not given: the feature is off or uses its default
  switch (kind_) {
    case Kind::kExistingFile:
      if (isDirectory(field_)) reject(field_, "a directory");
      if (!isRegularFile(field_)) reject(field_, "no such file");
      break;
    case Kind::kExistingDirectory:
      if (isRegularFile(field_)) reject(field_, "a file, not a directory");
      if (!isDirectory(field_)) reject(field_, "no such directory");
      break;
    case Kind::kCreatable:
      if (!isDirectory(parentOf(field_))) reject(field_, "its directory " + quoted(parentOf(field_)) + " does not exist");
      break;
    case Kind::kCreatableFile:
      if (isDirectory(field_)) reject(field_, "a directory");
      if (!isDirectory(parentOf(field_))) reject(field_, "its directory " + quoted(parentOf(field_)) + " does not exist");
      break;
    case Kind::kCreatableDirectory:
      if (const std::string blocker = directoryBlocker(field_); !blocker.empty()) reject(field_, blocker);
      break;
    case Kind::kAny: break;
  }
}

// ---- choices ----

ChoiceOption::ChoiceOption(std::string names, std::string& field, std::vector<std::string> choices,
                           std::string help)
    : OptionBuilder<ChoiceOption>(std::move(names), std::move(help)), field_(field), choices_(std::move(choices)) {}

ChoiceOption& ChoiceOption::optional(std::string meaning) {
  optional_ = true;
  default_meaning_ = std::move(meaning);
  return *this;
}

std::string ChoiceOption::accepted() const { return "one of " + joined(choices_, " or "); }

void ChoiceOption::set(const std::string& text) {
  assignChecked(field_, text, [this] { check(); });
}

void ChoiceOption::check() const {
  if (optional_ && field_.empty()) return;
  for (const std::string& choice : choices_) {
    if (field_ == choice) return;
  }
  reject(field_, "unknown");
}

// ---- enum choices ----

EnumOption::EnumOption(std::string names, std::function<int()> get, std::function<void(int)> put,
                       std::vector<Word> words, std::string help)
    : OptionBuilder<EnumOption>(std::move(names), std::move(help)),
      get_(std::move(get)),
      put_(std::move(put)),
      words_(std::move(words)) {}

std::vector<std::string> EnumOption::choices() const {
  std::vector<std::string> words;
  for (const Word& word : words_) words.push_back(word.first);
  return words;
}

EnumOption& EnumOption::describedAs(std::string accepted) {
  described_ = std::move(accepted);
  return *this;
}

EnumOption& EnumOption::optionalValue(int unset, std::string meaning) {
  optional_ = true;
  unset_ = unset;
  default_meaning_ = std::move(meaning);
  captureDefault();  // declared before this call, as the unset value's number
  return *this;
}

std::string EnumOption::accepted() const {
  return described_.empty() ? "one of " + joined(choices(), " or ") : described_;
}

std::string EnumOption::valueText() const {
  const int value = get_();
  if (optional_ && value == unset_) return "";
  for (const Word& word : words_) {
    if (word.second == value) return word.first;
  }
  return std::to_string(value);  // a value no word names: check() refuses it
}

void EnumOption::set(const std::string& text) {
  if (optional_ && text.empty()) return put_(unset_);
  for (const Word& word : words_) {
    if (word.first == text) return put_(word.second);
  }
  reject(text, "unknown");
}

void EnumOption::check() const {
  const int value = get_();
  if (optional_ && value == unset_) return;
  for (const Word& word : words_) {
    if (word.second == value) return;
  }
  reject(valueText(), "not one of the choices");
}

// ---- switches ----

SwitchOption::SwitchOption(std::string names, bool& field, std::string help, bool negated)
    : OptionBuilder<SwitchOption>(std::move(names), std::move(help)), field_(field) {
  negated_ = negated;
}

void SwitchOption::set(const std::string& text) { field_ = parseBool(text, displayName()); }

// ---- the set ----

OptionSet::OptionSet(std::string command) : command_(std::move(command)) {}

Option& OptionSet::adopt(std::unique_ptr<Option> option) {
  for (const std::string& name : splitNames(option->names())) {
    if (find(name) != nullptr) throw ConfigError(command_ + ": option " + name + " is declared twice");
  }
  option->captureDefault();
  options_.push_back(std::move(option));
  return *options_.back();
}

template <typename O, typename... Args>
O& OptionSet::add(Args&&... args) {
  return static_cast<O&>(adopt(std::make_unique<O>(std::forward<Args>(args)...)));
}

IntegerOption<int64_t>& OptionSet::integer(std::string names, int64_t& field, std::string help) {
  return add<IntegerOption<int64_t>>(std::move(names), field, std::move(help));
}
IntegerOption<int>& OptionSet::integer(std::string names, int& field, std::string help) {
  return add<IntegerOption<int>>(std::move(names), field, std::move(help));
}
IntegerOption<uint64_t>& OptionSet::integer(std::string names, uint64_t& field, std::string help) {
  return add<IntegerOption<uint64_t>>(std::move(names), field, std::move(help));
}
PortOption& OptionSet::port(std::string names, int& field, std::string help) {
  return add<PortOption>(std::move(names), field, std::move(help));
}
NumberOption& OptionSet::number(std::string names, double& field, std::string help) {
  return add<NumberOption>(std::move(names), field, std::move(help));
}
TextOption& OptionSet::text(std::string names, std::string& field, std::string help) {
  return add<TextOption>(std::move(names), field, std::move(help));
}
PathOption& OptionSet::path(std::string names, std::string& field, std::string help) {
  return add<PathOption>(std::move(names), field, std::move(help));
}
ChoiceOption& OptionSet::choice(std::string names, std::string& field, std::vector<std::string> choices,
                                std::string help) {
  return add<ChoiceOption>(std::move(names), field, std::move(choices), std::move(help));
}
SwitchOption& OptionSet::toggle(std::string names, bool& field, std::string help) {
  return add<SwitchOption>(std::move(names), field, std::move(help), /*negated=*/false);
}
SwitchOption& OptionSet::negatedToggle(std::string names, bool& field, std::string help) {
  return add<SwitchOption>(std::move(names), field, std::move(help), /*negated=*/true);
}

Option* OptionSet::find(const std::string& name) const {
  for (const auto& option : options_) {
    for (const std::string& candidate : splitNames(option->names())) {
      if (candidate == name) return option.get();
    }
  }
  return nullptr;
}

void OptionSet::checkAll() const {
  for (const auto& option : options_) option->check();
}

std::vector<std::string> OptionSet::arguments() const {
  std::vector<std::string> args;
  for (const auto& option : options_) {
    if (!option->forwarded() || option->valueText() == option->defaultText()) continue;
    if (option->isSwitch()) {
      // A switch can only be given; it moves the field away from its default.
      args.push_back(option->longName());
      continue;
    }
    args.push_back(option->longName());
    args.push_back(option->valueText());
  }
  return args;
}

namespace {
// A table cell: '|' would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}
}  // namespace

std::string OptionSet::markdown() const {
  std::ostringstream out;
  out << "### `" << command_ << "`\n\n";
  out << "| option | type | default | accepted | meaning |\n";
  out << "|---|---|---|---|---|\n";
  for (const auto& option : options_) {
    if (option->hidden()) continue;
    std::string shown_default = option->isSwitch() ? "" : option->defaultShown();
    out << "| `" << cell(option->displayName()) << "` | " << option->typeName() << " | "
        << (shown_default.empty() ? "" : "`" + cell(shown_default) + "`") << " | " << cell(option->accepted())
        << " | " << cell(option->help());
    out << " |\n";
  }
  return out.str();
}

}  // namespace dtrain
