#include "data/chat_template.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "data/text_files.h"
#include "data/tokenizer.h"

namespace dtrain::data {
namespace {

// Python's str.strip() on ASCII whitespace (Jinja's `trim`).
std::string_view trimmed(std::string_view text) {
  const std::string_view space = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

void addPiece(std::vector<ChatPiece>& pieces, std::string_view text, bool trained) {
  if (text.empty()) return;
  if (!pieces.empty() && pieces.back().trained == trained) {
    pieces.back().text += text;
  } else {
    pieces.push_back(ChatPiece{std::string(text), trained});
  }
}

// The chat_template of a tokenizer_config.json: a string, or a list of
// {"name", "template"} of which "default" is the one applied.
std::optional<std::string> configChatTemplate(const std::string& tokenizer_dir) {
  const std::string path = tokenizer_dir + "/tokenizer_config.json";
  if (tokenizer_dir.empty() || !isRegularFile(path)) return std::nullopt;
  const nlohmann::json config = nlohmann::json::parse(readFileBytes(path), nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const nlohmann::json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

// Whether the tokenizer encodes `token` as one id that decodes back to it.
bool hasToken(const Tokenizer& tokenizer, const std::string& token) {
  const std::vector<uint32_t> ids = tokenizer.encode(token);
  return ids.size() == 1 && tokenizer.decode(ids) == token;
}

std::vector<std::string> missingTokens(const Tokenizer& tokenizer, ChatTemplate format) {
  std::vector<std::string> missing;
  for (const std::string& token : chatTemplateTokens(format)) {
    if (!hasToken(tokenizer, token)) missing.push_back(token);
  }
  return missing;
}

}  // namespace

const char* chatRoleName(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "?";
}

std::optional<ChatRole> chatRoleOf(std::string_view name) {
  for (ChatRole role : {ChatRole::kSystem, ChatRole::kUser, ChatRole::kAssistant}) {
    if (name == chatRoleName(role)) return role;
  }
  return std::nullopt;
}

const char* chatTemplateName(ChatTemplate format) {
  switch (format) {
    case ChatTemplate::kLlama3: return "llama3";
    case ChatTemplate::kChatml: return "chatml";
    case ChatTemplate::kAuto: return "auto";
  }
  return "?";
}

std::vector<ChatPiece> renderChat(ChatTemplate format, const std::vector<ChatMessage>& messages) {
  if (format == ChatTemplate::kAuto) throw ConfigError("renderChat: resolve --chat-template auto first");
  std::vector<ChatPiece> pieces;
  const bool llama3 = format == ChatTemplate::kLlama3;
  if (llama3) addPiece(pieces, "<|begin_of_text|>", false);
  for (const ChatMessage& m : messages) {
    const bool trained = m.role == ChatRole::kAssistant;
    const std::string role = chatRoleName(m.role);
    if (llama3) {
      addPiece(pieces, "<|start_header_id|>" + role + "<|end_header_id|>\n\n", false);
      addPiece(pieces, trimmed(m.content), trained);
      addPiece(pieces, "<|eot_id|>", trained);
    } else {
      addPiece(pieces, "<|im_start|>" + role + "\n", false);
      addPiece(pieces, m.content, trained);
      addPiece(pieces, "<|im_end|>", trained);
      addPiece(pieces, "\n", false);
    }
  }
  return pieces;
}

std::string chatText(const std::vector<ChatPiece>& pieces) {
  std::string text;
  for (const ChatPiece& p : pieces) text += p.text;
  return text;
}

std::optional<ChatTemplate> recognizeChatTemplate(std::string_view jinja) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatTemplate::kLlama3;
  if (has("<|im_start|>") && has("<|im_end|>")) return ChatTemplate::kChatml;
  return std::nullopt;
}

std::vector<std::string> chatTemplateTokens(ChatTemplate format) {
  if (format == ChatTemplate::kLlama3) {
    return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  }
  if (format == ChatTemplate::kChatml) return {"<|im_start|>", "<|im_end|>"};
  return {};
}

ChatTemplate resolveChatTemplate(ChatTemplate requested, const std::string& tokenizer_dir,
                                 const Tokenizer& tokenizer) {
  ChatTemplate format = requested;
  std::string why = "--chat-template " + std::string(chatTemplateName(requested));
  if (format == ChatTemplate::kAuto) {
    const std::optional<std::string> jinja = configChatTemplate(tokenizer_dir);
    if (const auto known = jinja ? recognizeChatTemplate(*jinja) : std::nullopt) {
      format = *known;
      why = "the chat_template of " + tokenizer_dir + "/tokenizer_config.json";
    } else if (missingTokens(tokenizer, ChatTemplate::kLlama3).empty()) {
      format = ChatTemplate::kLlama3;
    } else if (missingTokens(tokenizer, ChatTemplate::kChatml).empty()) {
      format = ChatTemplate::kChatml;
    } else {
      throw ConfigError(
          "--chat-template auto: " +
          std::string(jinja ? "the chat_template of " + tokenizer_dir +
                                  "/tokenizer_config.json is neither Llama 3's nor ChatML's, and "
                            : "no chat_template in a tokenizer_config.json beside the tokenizer, and ") +
          "the " + tokenizer.name() + " tokenizer has neither Llama 3's special tokens (<|start_header_id|>, "
          "<|eot_id|>, ...) nor ChatML's (<|im_start|>, <|im_end|>); expected --chat-template llama3 or chatml "
          "with a tokenizer (--tokenizer-dir) that has its tokens");
    }
  }
  const std::vector<std::string> missing = missingTokens(tokenizer, format);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& t : missing) list += (list.empty() ? "" : ", ") + t;
    throw ConfigError(why + " is " + chatTemplateName(format) + ", whose special tokens the " + tokenizer.name() +
                      " tokenizer lacks (" + list + " are not tokens of their own); expected a tokenizer "
                      "(--tokenizer-dir) that has them, or the other --chat-template");
  }
  return format;
}

}  // namespace dtrain::data
