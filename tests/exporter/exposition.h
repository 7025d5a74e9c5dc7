// Reading a /metrics body back in tests: samples by name and labels.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::testing {

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Sample lines only (comments skipped); label values unescaped.
std::vector<ParsedSample> parseExposition(const std::string& text);
// The samples of `name` whose labels include every pair of `having`.
std::vector<ParsedSample> samplesOf(const std::vector<ParsedSample>& all, const std::string& name,
                                    const std::map<std::string, std::string>& having = {});
// The value of the one sample of `name` with `having`; nullopt when there is
// none (and a test failure when there are several).
std::optional<double> valueOf(const std::vector<ParsedSample>& all, const std::string& name,
                              const std::map<std::string, std::string>& having = {});
// The "# TYPE name <type>" of a family, "" when absent.
std::string typeOf(const std::string& text, const std::string& name);

}  // namespace dtrain::testing
