// `dtrain settings`: every tunable from the one registry, as a table or as
// the Markdown of docs/settings.md.
#include <cstdio>

#include "cli/commands.h"
#include "common/settings.h"

namespace dtrain::cli {

void registerSettings(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand("settings", "List every setting: name, environment variable, default, current value");
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--markdown", *markdown, "Print the Markdown table of docs/settings.md");
  cmd->callback([markdown, &exit_code] {
    if (*markdown) {
      std::fputs(settingsMarkdown().c_str(), stdout);
      return;
    }
    std::printf("%-24s %-28s %-12s %s\n", "SETTING", "ENVIRONMENT", "DEFAULT", "CURRENT");
    for (const SettingBase* s : allSettings()) {
      auto value = s->envValue();
      std::printf("%-24s %-28s %-12s %s\n", s->name().c_str(), s->env().c_str(),
                  s->defaultText().empty() ? "\"\"" : s->defaultText().c_str(),
                  value ? value->c_str() : "(default)");
    }
    exit_code.value = 0;
  });
}

}  // namespace dtrain::cli
