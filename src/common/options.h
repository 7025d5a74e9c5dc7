// Command-line options, each declared once (common/; no CLI library here).
//
// A command declares every option in one function, bound to a field of its
// options struct: the names, the type, the help text and the values it
// accepts. From that one declaration come
//   - the CLI11 flags and their --help lines (cli/option_binding.h),
//   - the check of a struct filled in by library code (checkAll()),
//   - the arguments that hand the options on to a worker (arguments()),
//   - the table of the command in docs/settings.md (markdown()).
//
//   TrainOptions o;
//   OptionSet set("dtrain train");
//   set.integer("--batch-size", o.data.batch_size, "Samples per rank per step").range(1, 1 << 20);
//   set.number("--lr", o.optim.lr, "Peak learning rate").atLeast(0);
//   set.choice("--optimizer", o.optim.optimizer, {"sgd", "adamw"}, "Optimizer");
//   set.choice("--rdzv-backend", cfg.backend, {{"static", RendezvousBackend::kStatic},
//              {"c10d", RendezvousBackend::kC10d}, {"etcd", RendezvousBackend::kEtcd}}, "Rendezvous");
//   set.toggle("--nesterov", o.optim.nesterov, "Nesterov momentum");
//
// Contract:
// - An option holds a reference to its field: the set must not outlive the
//   struct it was declared over.
// - set(text) parses and checks a value; check() checks the field as it is
//   now. Both reject with ConfigError naming the option, the value and what
//   is accepted: "--batch-size 2147483647: out of range; expected an integer
//   from 1 to 1048576". Numbers must be finite (nan and inf are refused),
//   integers must fit their field (no wrap-around), ports are 1..65535 (or 0
//   where 0 means off), choices are one of the listed words.
// - The default shown in --help and the docs is the field's value when the
//   option was declared.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtrain {

class Option {
 public:
  Option(std::string names, std::string help);
  virtual ~Option() = default;
  Option(const Option&) = delete;
  Option& operator=(const Option&) = delete;

  // As declared, in CLI11's form: "-b,--minbytes".
  const std::string& names() const { return names_; }
  // For messages: "-b/--minbytes".
  std::string displayName() const;
  // The longest name: "--minbytes".
  std::string longName() const;
  const std::string& help() const { return help_; }
  const std::string& defaultText() const { return default_text_; }
  // For --help and the docs: the default, or what not giving it means.
  const std::string& defaultShown() const { return default_meaning_.empty() ? default_text_ : default_meaning_; }

  // "integer", "number", "text", "choice", "switch", "port", "path"; a kind
  // declared outside common/ may name its value's form instead ("MIN:MAX").
  virtual std::string typeName() const = 0;
  // What set() accepts, for --help and messages: "an integer from 1 to 64".
  virtual std::string accepted() const = 0;
  // The field's value as text that set() would read back exactly.
  virtual std::string valueText() const = 0;
  // Parses `text` into the field; ConfigError (see the contract) otherwise.
  virtual void set(const std::string& text) = 0;
  // ConfigError when the field's current value is not accepted.
  virtual void check() const = 0;

  // Switches take no value: "--x" sets the field (to false when negated).
  virtual bool isSwitch() const { return false; }
  bool negated() const { return negated_; }
  // Hidden options (internal plumbing) are left out of --help and the docs.
  bool hidden() const { return hidden_; }
  // Options that arguments() leaves out (they belong to the caller only).
  bool forwarded() const { return forwarded_; }

 protected:
  [[noreturn]] void reject(const std::string& value, const std::string& why) const;
  void captureDefault() { default_text_ = valueText(); }

  std::string names_, help_, default_text_, default_meaning_;
  bool negated_ = false, hidden_ = false, forwarded_ = true;

  friend class OptionSet;
};

// The builder methods every option kind shares.
template <typename Self>
class OptionBuilder : public Option {
 public:
  using Option::Option;
  Self& hide() {
    hidden_ = true;
    return self();
  }
  Self& notForwarded() {
    forwarded_ = false;
    return self();
  }

 protected:
  Self& self() { return static_cast<Self&>(*this); }
};

// Signed or unsigned integers of any width; the range defaults to the
// field's own, so nothing wraps around.
template <typename T>
class IntegerOption : public OptionBuilder<IntegerOption<T>> {
 public:
  IntegerOption(std::string names, T& field, std::string help);
  IntegerOption& range(T min, T max);
  IntegerOption& atLeast(T min) { return range(min, max_); }
  // Shown after the number in messages: "seconds", "MiB".
  IntegerOption& unit(std::string unit);
  // The declared default is a marker meaning "not given": check() accepts
  // it, set() accepts only values in range.
  IntegerOption& defaultMeans(std::string meaning);
  std::string typeName() const override { return "integer"; }
  std::string accepted() const override;
  std::string valueText() const override;
  void set(const std::string& text) override;
  void check() const override;

 private:
  T& field_;
  T min_ = std::numeric_limits<T>::lowest(), max_ = std::numeric_limits<T>::max();
  std::string unit_;
  bool default_is_marker_ = false;
  T marker_{};
};

// A TCP port: 1..65535, or 0..65535 with zeroAllowed() (0: the feature is
// off, or the OS picks one).
class PortOption : public OptionBuilder<PortOption> {
 public:
  PortOption(std::string names, int& field, std::string help);
  PortOption& zeroAllowed(std::string meaning);
  std::string typeName() const override { return "port"; }
  std::string accepted() const override;
  std::string valueText() const override { return std::to_string(field_); }
  void set(const std::string& text) override;
  void check() const override;

 private:
  int& field_;
  std::string zero_meaning_;
};

// A finite floating-point number with optional bounds.
class NumberOption : public OptionBuilder<NumberOption> {
 public:
  NumberOption(std::string names, double& field, std::string help);
  NumberOption& atLeast(double min);
  NumberOption& above(double min);  // strictly greater
  NumberOption& atMost(double max);
  NumberOption& below(double max);  // strictly less
  NumberOption& range(double min, double max) { return atLeast(min).atMost(max); }
  NumberOption& unit(std::string unit);
  // The declared default is a marker, not a value: "not given, so
  // <meaning>". check() accepts it; set() accepts only values in range.
  NumberOption& defaultMeans(std::string meaning);
  std::string typeName() const override { return "number"; }
  std::string accepted() const override;
  std::string valueText() const override;
  void set(const std::string& text) override;
  void check() const override;

 private:
  void checkValue(double value, const std::string& text) const;

  double& field_;
  double min_ = -std::numeric_limits<double>::max(), max_ = std::numeric_limits<double>::max();
  bool min_open_ = false, max_open_ = false, has_min_ = false, has_max_ = false;
  std::string unit_;
  bool default_is_marker_ = false;
  double marker_ = 0;
};

// Free text; checks are added as functions that return "" or why not.
class TextOption : public OptionBuilder<TextOption> {
 public:
  using Checker = std::function<std::string(const std::string&)>;
  TextOption(std::string names, std::string& field, std::string help);
  TextOption& nonEmpty();
  // `describe` says what is accepted ("a size such as 64M").
  TextOption& check(Checker checker, std::string describe);
  std::string typeName() const override { return type_; }
  std::string accepted() const override;
  std::string valueText() const override { return field_; }
  void set(const std::string& text) override;
  void check() const override;

 protected:
  std::string& field_;
  std::vector<Checker> checkers_;
  std::string describe_ = "any text";
  std::string type_ = "text";
  bool non_empty_ = false;
};

// A path; "" is allowed (the feature is off) unless required.
class PathOption : public OptionBuilder<PathOption> {
 public:
  enum class Kind { kAny, kExistingFile, kExistingDirectory, kCreatable, kCreatableFile, kCreatableDirectory };
  PathOption(std::string names, std::string& field, std::string help);
  PathOption& existingFile() { return kind(Kind::kExistingFile); }
  PathOption& existingDirectory() { return kind(Kind::kExistingDirectory); }
  // Its parent directory exists (a file or directory the command creates).
  PathOption& creatable() { return kind(Kind::kCreatable); }
  // A file the command writes: its directory exists and it is no directory.
  PathOption& creatableFile() { return kind(Kind::kCreatableFile); }
  // A directory the command makes if missing (mkdir -p): nothing on the way
  // to it is a file.
  PathOption& creatableDirectory() { return kind(Kind::kCreatableDirectory); }
  std::string typeName() const override { return "path"; }
  std::string accepted() const override;
  std::string valueText() const override { return field_; }
  void set(const std::string& text) override;
  void check() const override;

 private:
  PathOption& kind(Kind kind) {
    kind_ = kind;
    return *this;
  }
  std::string& field_;
  Kind kind_ = Kind::kAny;
};

// One word of a fixed list.
class ChoiceOption : public OptionBuilder<ChoiceOption> {
 public:
  ChoiceOption(std::string names, std::string& field, std::vector<std::string> choices, std::string help);
  const std::vector<std::string>& choices() const { return choices_; }
  // "" (not given) is accepted too, meaning `meaning`.
  ChoiceOption& optional(std::string meaning);
  std::string typeName() const override { return "choice"; }
  std::string accepted() const override;
  std::string valueText() const override { return field_; }
  void set(const std::string& text) override;
  void check() const override;

 private:
  std::string& field_;
  std::vector<std::string> choices_;
  bool optional_ = false;
};

// One word of a fixed list, parsed once into an enum class field, so no
// code after the parse compares the word. Several words may name one value
// (aliases: "etcd-v3" for kEtcd); valueText() gives the first word listed
// for the field's value. Declared with OptionSet::choice over an enum field;
// the field is reached through `get`/`put` so this class needs no template.
class EnumOption : public OptionBuilder<EnumOption> {
 public:
  using Word = std::pair<std::string, int>;
  EnumOption(std::string names, std::function<int()> get, std::function<void(int)> put, std::vector<Word> words,
             std::string help);
  // Every word, aliases included, as declared.
  std::vector<std::string> choices() const;
  // Says what is accepted in place of "one of a, b or c" (--help, the docs
  // and messages): "static, c10d or etcd (alias etcd-v3)".
  EnumOption& describedAs(std::string accepted);
  // The field's value `unset` means "not given" (`meaning` in --help and
  // the docs): "" sets it and check() accepts it; it has no word.
  template <typename E>
    requires std::is_enum_v<E>
  EnumOption& optional(E unset, std::string meaning) {
    return optionalValue(static_cast<int>(unset), std::move(meaning));
  }
  std::string typeName() const override { return "choice"; }
  std::string accepted() const override;
  std::string valueText() const override;
  void set(const std::string& text) override;
  void check() const override;

 private:
  EnumOption& optionalValue(int unset, std::string meaning);

  std::function<int()> get_;
  std::function<void(int)> put_;
  std::vector<Word> words_;
  std::string described_;
  bool optional_ = false;
  int unset_ = 0;
};

// A switch: "--x" sets the field to true, or to false for a negated one
// ("--no-cuda-graphs" over cuda_graphs = true).
class SwitchOption : public OptionBuilder<SwitchOption> {
 public:
  SwitchOption(std::string names, bool& field, std::string help, bool negated);
  std::string typeName() const override { return "switch"; }
  std::string accepted() const override { return "no value"; }
  std::string valueText() const override { return field_ ? "true" : "false"; }
  // "true"/"false" (and 1/0, yes/no, on/off) as the switch's own state.
  void set(const std::string& text) override;
  void check() const override {}
  bool isSwitch() const override { return true; }
  // Given on the command line: sets true, or false when negated.
  void give() { field_ = !negated_; }

 private:
  bool& field_;
};

class OptionSet {
 public:
  explicit OptionSet(std::string command);
  OptionSet(const OptionSet&) = delete;
  OptionSet& operator=(const OptionSet&) = delete;

  const std::string& command() const { return command_; }

  IntegerOption<int64_t>& integer(std::string names, int64_t& field, std::string help);
  IntegerOption<int>& integer(std::string names, int& field, std::string help);
  IntegerOption<uint64_t>& integer(std::string names, uint64_t& field, std::string help);
  PortOption& port(std::string names, int& field, std::string help);
  NumberOption& number(std::string names, double& field, std::string help);
  TextOption& text(std::string names, std::string& field, std::string help);
  PathOption& path(std::string names, std::string& field, std::string help);
  ChoiceOption& choice(std::string names, std::string& field, std::vector<std::string> choices, std::string help);
  // A word of `words` parsed into an enum class field.
  template <typename E>
    requires std::is_enum_v<E>
  EnumOption& choice(std::string names, E& field, std::vector<std::pair<std::string, E>> words, std::string help) {
    std::vector<EnumOption::Word> values;
    for (auto& [word, value] : words) values.emplace_back(std::move(word), static_cast<int>(value));
    return declare<EnumOption>(
        std::move(names), [&field] { return static_cast<int>(field); },
        [&field](int value) { field = static_cast<E>(value); }, std::move(values), std::move(help));
  }
  SwitchOption& toggle(std::string names, bool& field, std::string help);
  // "--no-x" that turns `field` (true by default) off.
  SwitchOption& negatedToggle(std::string names, bool& field, std::string help);

  // An option of a kind declared outside common/ (a subclass of Option that
  // a command's own grammar needs), under the same rules as the ones above.
  template <typename O, typename... Args>
  O& declare(Args&&... args) {
    return static_cast<O&>(adopt(std::make_unique<O>(std::forward<Args>(args)...)));
  }

  const std::vector<std::unique_ptr<Option>>& options() const { return options_; }
  // nullptr when no option has this name.
  Option* find(const std::string& name) const;

  // Checks every option's current value (the first rejection is thrown).
  void checkAll() const;
  // The options whose value differs from the declared default, as
  // arguments: {"--batch-size", "256", "--channels-last", ...}.
  std::vector<std::string> arguments() const;
  // "### dtrain train" and a table: option, type, default, accepted, meaning.
  std::string markdown() const;

 private:
  template <typename O, typename... Args>
  O& add(Args&&... args);
  // Refuses a name declared already, records the default, keeps the option.
  Option& adopt(std::unique_ptr<Option> option);

  std::string command_;
  std::vector<std::unique_ptr<Option>> options_;
};

// Numbers as the options print them: the shortest text that reads back to
// the same double ("0.05", "25", "1e-08").
std::string formatNumber(double value);

}  // namespace dtrain
