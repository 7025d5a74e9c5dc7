// Chat templates: a conversation as the text a chat model reads, cut into
// the pieces the loss trains on and the pieces it does not (torch-free;
// library dtrain_text).
//
// Two formats are built in, written as Hugging Face's chat templates render
// them (apply_chat_template without a generation prompt):
//
//   llama3  Meta Llama 3 Instruct: "<|begin_of_text|>", then per message
//           "<|start_header_id|>ROLE<|end_header_id|>\n\n" + content (trimmed,
//           as the template's `| trim`) + "<|eot_id|>". Llama 3.1's default
//           system preamble (knowledge cut-off and date) is not added.
//   chatml  ChatML (Qwen 2 and others): per message
//           "<|im_start|>ROLE\n" + content + "<|im_end|>\n"; no default system
//           message.
//
// Trained pieces: an assistant message's content and its end-of-turn token
// (<|eot_id|>, <|im_end|>), as TRL's assistant-only loss marks them; headers,
// the begin-of-text token, ChatML's newline after <|im_end|> and every other
// role's messages are not.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

class Tokenizer;

enum class ChatRole { kSystem, kUser, kAssistant };
// kAuto: resolveChatTemplate picks one of the others.
enum class ChatTemplate { kLlama3, kChatml, kAuto };

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// A stretch of the rendered text and whether the loss trains on its tokens.
struct ChatPiece {
  std::string text;
  bool trained = false;
};

const char* chatRoleName(ChatRole role);             // "system", "user", "assistant"
std::optional<ChatRole> chatRoleOf(std::string_view name);
const char* chatTemplateName(ChatTemplate format);  // "llama3", "chatml", "auto"

// The conversation rendered by `format` (kLlama3 or kChatml), adjacent
// pieces of the same kind joined, so that a prompt is tokenized as one text.
std::vector<ChatPiece> renderChat(ChatTemplate format, const std::vector<ChatMessage>& messages);
// The pieces' text, joined.
std::string chatText(const std::vector<ChatPiece>& pieces);

// Which built-in format a tokenizer_config.json's chat_template (Jinja
// source) is: llama3 when it writes <|start_header_id|> and <|eot_id|>,
// chatml when it writes <|im_start|> and <|im_end|>; nullopt otherwise.
std::optional<ChatTemplate> recognizeChatTemplate(std::string_view jinja);

// The special tokens `format` writes, each of which the tokenizer must
// encode as one id of its own.
std::vector<std::string> chatTemplateTokens(ChatTemplate format);

// The format of a run: `requested` unless kAuto; kAuto takes the
// chat_template of tokenizer_dir/tokenizer_config.json when it is
// recognizable, else the format whose special tokens the tokenizer has.
// ConfigError naming --chat-template when auto finds neither, and when the
// tokenizer lacks a token of the format (it would read "<|im_start|>" as
// plain text).
ChatTemplate resolveChatTemplate(ChatTemplate requested, const std::string& tokenizer_dir,
                                 const Tokenizer& tokenizer);

}  // namespace dtrain::data
