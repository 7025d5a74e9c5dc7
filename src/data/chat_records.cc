#include "data/chat_records.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/text_files.h"

namespace dtrain::data {
namespace {

using Json = nlohmann::json;

ChatMessage chatMessageOf(const Json& m, size_t index) {
  const std::string at = "message " + std::to_string(index) + ": ";
  if (!m.is_object()) throw ConfigError(at + "not an object");
  if (!m.contains("role")) throw ConfigError(at + "no \"role\"");
  if (!m["role"].is_string()) throw ConfigError(at + "\"role\" is not a string");
  const std::string role = m["role"].get<std::string>();
  const std::optional<ChatRole> known = chatRoleOf(role);
  if (!known) throw ConfigError(at + "unknown role '" + role + "' (expected system, user or assistant)");
  if (!m.contains("content") || !m["content"].is_string()) throw ConfigError(at + "no string \"content\"");
  return ChatMessage{*known, m["content"].get<std::string>()};
}

// A prompt or completion: a string (as `role`'s message) or a list of messages.
void appendTurns(const Json& part, const char* field, ChatRole role, std::vector<ChatMessage>& messages) {
  if (part.is_string()) {
    messages.push_back(ChatMessage{role, part.get<std::string>()});
  } else if (part.is_array()) {
    for (const Json& m : part) messages.push_back(chatMessageOf(m, messages.size()));
  } else {
    throw ConfigError(std::string("\"") + field + "\" is neither a string nor a list of messages");
  }
}

}  // namespace

std::vector<ChatMessage> parseChatRecord(std::string_view line) {
  const Json record = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) throw ConfigError("invalid JSON");
  if (!record.is_object()) throw ConfigError("not a JSON object");
  std::vector<ChatMessage> messages;
  if (record.contains("messages")) {
    const Json& list = record["messages"];
    if (!list.is_array()) throw ConfigError("\"messages\" is not a list");
    for (const Json& m : list) messages.push_back(chatMessageOf(m, messages.size()));
  } else if (record.contains("prompt") && record.contains("completion")) {
    appendTurns(record["prompt"], "prompt", ChatRole::kUser, messages);
    appendTurns(record["completion"], "completion", ChatRole::kAssistant, messages);
  } else {
    throw ConfigError("no \"messages\" (nor \"prompt\" and \"completion\")");
  }
  if (messages.empty()) throw ConfigError("no messages");
  const bool answered = std::any_of(messages.begin(), messages.end(),
                                    [](const ChatMessage& m) { return m.role == ChatRole::kAssistant; });
  if (!answered) throw ConfigError("no assistant message (nothing to train on)");
  return messages;
}

ChatRecords readChatRecords(const std::vector<std::string>& files) {
  ChatRecords out;
  for (const std::string& file : files) {
    const std::string text = readFileBytes(file);
    requireUtf8(text, file);
    int64_t line_number = 0;
    for (size_t begin = 0; begin < text.size();) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + begin, end - begin);
      begin = end + 1;
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      try {
        out.records.push_back(ChatRecord{file, line_number, parseChatRecord(line), recordHash(line)});
      } catch (const ConfigError& e) {
        out.bad.push_back(BadRecord{file, line_number, e.message()});
      }
    }
  }
  return out;
}

std::vector<std::string> chatDataFiles(const std::string& path, const std::string& what) {
  if (isRegularFile(path)) return {path};
  if (!isDirectory(path)) throw ConfigError(what + " " + path + ": no such file or directory");
  std::vector<std::string> files;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.size() > 6 && name.ends_with(".jsonl") && isRegularFile(path + "/" + name)) {
        files.push_back(path + "/" + name);
      }
    }
    ::closedir(dir);
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw ConfigError(what + " " + path + ": no *.jsonl files (expected JSONL records of \"messages\" or "
                      "\"prompt\"/\"completion\")");
  }
  return files;
}

uint64_t recordHash(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool heldOut(const ChatRecord& record, double fraction) {
  if (fraction <= 0) return false;
  // splitmix64's finalizer spreads FNV's last bytes over every bit; then
  // the top 53 bits as a fraction in [0, 1).
  uint64_t z = record.hash + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return std::ldexp(static_cast<double>(z >> 11), -53) < fraction;
}

}  // namespace dtrain::data
