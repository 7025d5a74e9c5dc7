#include "cli/option_binding.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace dtrain::cli {
namespace {

std::vector<std::pair<std::string, std::string>>& tables() {
  static std::vector<std::pair<std::string, std::string>> bound;
  return bound;
}

std::string helpLine(const Option& option) {
  std::string help = option.help();
  if (!option.isSwitch()) help += " (" + option.accepted() + ")";
  return help;
}

std::string typeLabel(const Option& option) {
  std::vector<std::string> choices;
  if (const auto* words = dynamic_cast<const ChoiceOption*>(&option)) choices = words->choices();
  if (const auto* words = dynamic_cast<const EnumOption*>(&option)) choices = words->choices();
  if (!choices.empty()) {
    std::string words;
    for (const std::string& choice : choices) words += (words.empty() ? "" : "|") + choice;
    return words;
  }
  std::string label = option.typeName();
  std::transform(label.begin(), label.end(), label.begin(), [](unsigned char c) { return std::toupper(c); });
  return label;
}

}  // namespace

void bindOptions(CLI::App& command, OptionSet& options) {
  for (const auto& declared : options.options()) {
    Option* option = declared.get();
    CLI::Option* bound = nullptr;
    if (option->isSwitch()) {
      auto* toggle = static_cast<SwitchOption*>(option);
      bound = command.add_flag_function(
          option->names(), [toggle](int64_t) { toggle->give(); }, helpLine(*option));
    } else {
      bound = command.add_option_function<std::string>(
          option->names(), [option](const std::string& value) { option->set(value); }, helpLine(*option));
      bound->type_name(typeLabel(*option));
      // As argparse (and torchrun): an option given twice takes the last value.
      bound->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      bound->default_str(option->defaultShown());
    }
    if (option->hidden()) bound->group("");
  }
  auto& all = tables();
  auto same = std::find_if(all.begin(), all.end(), [&](const auto& t) { return t.first == options.command(); });
  if (same == all.end()) all.emplace_back(options.command(), options.markdown());
}

std::string boundOptionsMarkdown() {
  std::string text;
  for (const auto& [command, table] : tables()) text += (text.empty() ? "" : "\n") + table;
  return text;
}

}  // namespace dtrain::cli
