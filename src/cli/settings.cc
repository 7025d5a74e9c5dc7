// `dtrain settings`: every tunable from the one registry, as a table or as
// the Markdown of docs/settings.md (the environment variables, then every
// command's declared options).
#include <cstdio>

#include "cli/commands.h"
#include "cli/option_binding.h"
#include "common/settings.h"
#include "launch/launch_flags.h"

namespace dtrain::cli {

void registerSettings(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand("settings", "List every setting: name, environment variable, default, current value");
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--markdown", *markdown, "Print the Markdown of docs/settings.md: the environment variables and every command's options");
  cmd->callback([markdown, &exit_code] {
    if (*markdown) {
      std::printf("## Environment variables\n\n%s\n## Command-line options\n\n%s\n%s", settingsMarkdown().c_str(),
                  launchFlagsMarkdown().c_str(), boundOptionsMarkdown().c_str());
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
