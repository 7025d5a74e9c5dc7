// Instruction data: JSONL files of conversations, read and checked record
// by record (torch-free; library dtrain_text).
//
// A record is one line, a JSON object of either form (TRL's
// "conversational" and "prompt-completion" data):
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
//   {"prompt": "...", "completion": "..."}       (a user and an assistant message;
//                                                  each may also be a list of messages)
// Other fields are ignored; blank lines are skipped. A record is bad when
// its line is not a JSON object, has neither form, has a message that is
// not an object with a known role and a string content, or has no
// assistant message (nothing to train on); bad records are collected with
// their file and line, not thrown, so a run can report all of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"

namespace dtrain::data {

struct ChatRecord {
  std::string file;
  int64_t line = 0;  // 1-based
  std::vector<ChatMessage> messages;
  uint64_t hash = 0;  // of the line's text (the validation split's choice)
};

struct BadRecord {
  std::string file;
  int64_t line = 0;
  std::string reason;  // "invalid JSON: ...", "no assistant message", ...
  std::string where() const { return file + ":" + std::to_string(line); }
};

struct ChatRecords {
  std::vector<ChatRecord> records;
  std::vector<BadRecord> bad;
};

// The messages of one record's text. ConfigError with the reason (no file
// or line: the caller adds them) when the record is bad.
std::vector<ChatMessage> parseChatRecord(std::string_view line);

// Every record of the files, in order. ConfigError naming a file that
// cannot be read or is not UTF-8.
ChatRecords readChatRecords(const std::vector<std::string>& files);

// The *.jsonl files of a directory (sorted by name), or `path` itself when
// it is a file. ConfigError naming `what` (the flag) and the path when it
// holds none.
std::vector<std::string> chatDataFiles(const std::string& path, const std::string& what);

// FNV-1a, 64 bits: a record's hash.
uint64_t recordHash(std::string_view text);

// Whether a record goes to the validation split: its hash, as a fraction of
// 2^64, is below `fraction`. A pure function of the record's text, so the
// split does not depend on file order, ranks or the seed.
bool heldOut(const ChatRecord& record, double fraction);

}  // namespace dtrain::data
