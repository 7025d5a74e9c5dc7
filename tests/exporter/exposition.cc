#include "exposition.h"

#include <gtest/gtest.h>

#include <sstream>

namespace dtrain::testing {

std::vector<ParsedSample> parseExposition(const std::string& text) {
  std::vector<ParsedSample> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ParsedSample s;
    size_t pos = line.find_first_of("{ ");
    s.name = line.substr(0, pos);
    if (pos != std::string::npos && line[pos] == '{') {
      ++pos;
      while (pos < line.size() && line[pos] != '}') {
        size_t eq = line.find('=', pos);
        std::string key = line.substr(pos, eq - pos);
        std::string value;
        size_t i = eq + 2;  // after ="
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        s.labels[key] = value;
        pos = i + 1;
        if (pos < line.size() && line[pos] == ',') ++pos;
      }
      ++pos;  // '}'
    }
    s.value = std::stod(line.substr(pos + 1));
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<ParsedSample> samplesOf(const std::vector<ParsedSample>& all, const std::string& name,
                                    const std::map<std::string, std::string>& having) {
  std::vector<ParsedSample> out;
  for (const ParsedSample& s : all) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : having) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) match = false;
    }
    if (match) out.push_back(s);
  }
  return out;
}

std::optional<double> valueOf(const std::vector<ParsedSample>& all, const std::string& name,
                              const std::map<std::string, std::string>& having) {
  auto found = samplesOf(all, name, having);
  EXPECT_LE(found.size(), 1u) << name;
  if (found.empty()) return std::nullopt;
  return found[0].value;
}

std::string typeOf(const std::string& text, const std::string& name) {
  std::string prefix = "# TYPE " + name + " ";
  size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  size_t eol = text.find('\n', at);
  return text.substr(at + prefix.size(), eol - at - prefix.size());
}

}  // namespace dtrain::testing
