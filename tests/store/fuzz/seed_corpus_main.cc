// store_fuzz_seeds OUT_DIR: writes the fuzzers' seed corpora, built by
// FrameWriter so they follow the wire format as it is in this checkout:
//   OUT_DIR/frame_decoder/    request streams, one per op and one of all
//   OUT_DIR/request_handler/  client scripts (handler_script.h): each op,
//                             waits answered by a write, by the clock, and
//                             cut off by a disconnect; malformed requests
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "handler_script.h"
#include "request_codec.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain::fuzz {
namespace {

uint8_t op(StoreOp o) { return static_cast<uint8_t>(o); }

std::string frame(StoreOp o, std::vector<std::string> keys = {}, std::string value = "", int64_t number = 0,
                  std::string expected = "") {
  return writeRequest(Request{op(o), std::move(keys), std::move(value), std::move(expected), number});
}

std::string hello() { return frame(StoreOp::kHello, {}, "", kStoreProtocolVersion); }

// One request of every op, in an order where each finds what it needs.
std::vector<std::pair<std::string, std::string>> everyOp() {
  return {
      {"hello", hello()},
      {"set", frame(StoreOp::kSet, {"/run/0/k"}, "v")},
      {"get", frame(StoreOp::kGet, {"/run/0/k"}, "", 1000)},
      {"add", frame(StoreOp::kAdd, {"/run/0/n"}, "", 3)},
      {"cas", frame(StoreOp::kCompareSet, {"/run/0/k"}, "w", 0, "v")},
      {"wait", frame(StoreOp::kWait, {"/run/0/k", "/run/0/n"}, "", 1000)},
      {"check", frame(StoreOp::kCheck, {"/run/0/k", "/run/0/absent"})},
      {"delete", frame(StoreOp::kDeleteKey, {"/run/0/k"})},
      {"numkeys", frame(StoreOp::kNumKeys)},
      {"set_ephemeral", frame(StoreOp::kSetEphemeral, {"/run/0/presence"}, "node-0")},
  };
}

std::vector<std::pair<std::string, std::string>> handlerScripts() {
  std::vector<std::pair<std::string, std::string>> out;
  std::string all;
  for (const auto& [name, request] : everyOp()) {
    if (name != "hello") out.emplace_back("op-" + name, ScriptWriter().data(0, hello() + request).script());
    all += request;
  }
  out.emplace_back("every-op", ScriptWriter().data(0, all).script());
  std::string get_k = frame(StoreOp::kGet, {"k"}, "", 500);
  out.emplace_back("get-answered-by-set", ScriptWriter()
                                               .data(0, hello() + get_k + frame(StoreOp::kNumKeys))
                                               .data(1, hello() + frame(StoreOp::kSet, {"k"}, "v"))
                                               .script());
  out.emplace_back("wait-answered-by-add-and-cas",
                   ScriptWriter()
                       .data(0, hello() + frame(StoreOp::kWait, {"a", "b"}, "", 500))
                       .data(1, hello() + frame(StoreOp::kAdd, {"a"}, "", 1))
                       .data(2, hello() + frame(StoreOp::kCompareSet, {"b"}, "x", 0, ""))
                       .script());
  out.emplace_back("get-times-out", ScriptWriter().data(0, hello() + get_k).advance(499).advance(1).script());
  out.emplace_back("get-polls", ScriptWriter().data(0, hello() + frame(StoreOp::kGet, {"k"}, "", 0)).script());
  out.emplace_back("ephemeral-gone-with-its-client",
                   ScriptWriter()
                       .data(0, hello() + frame(StoreOp::kSetEphemeral, {"p"}, "node-0"))
                       .data(1, hello() + frame(StoreOp::kWait, {"p", "q"}, "", 300))
                       .disconnect(0)
                       .data(2, hello() + frame(StoreOp::kSet, {"q"}, "1") + frame(StoreOp::kCheck, {"p"}))
                       .script());
  out.emplace_back("waiter-disconnects", ScriptWriter()
                                              .data(0, hello() + get_k)
                                              .disconnect(0)
                                              .data(1, hello() + frame(StoreOp::kSet, {"k"}, "v"))
                                              .data(0, hello() + get_k)
                                              .script());
  std::string bad_add = frame(StoreOp::kSet, {"n"}, "x") + frame(StoreOp::kAdd, {"n"}, "", 1);
  out.emplace_back("add-to-text", ScriptWriter().data(0, hello() + bad_add).script());
  std::string truncated = frame(StoreOp::kSet, {"k"}, "v");
  truncated = std::string("\0\0\0\x04", 4) + truncated.substr(4, 4);
  out.emplace_back("truncated-field", ScriptWriter().data(0, hello() + truncated).script());
  // Over the fuzz target's limit of 8 keys per request: an ERROR, then served on.
  std::vector<std::string> nine{"a", "b", "c", "d", "e", "f", "g", "h", "i"};
  out.emplace_back("too-many-keys", ScriptWriter()
                                        .data(0, hello() + frame(StoreOp::kWait, nine, "", 100) +
                                                     frame(StoreOp::kCheck, nine) + frame(StoreOp::kNumKeys))
                                        .script());
  out.emplace_back("hello-twice", ScriptWriter().data(0, hello() + hello()).script());
  out.emplace_back("wrong-version", ScriptWriter().data(0, frame(StoreOp::kHello, {}, "", 99)).script());
  return out;
}

void writeFiles(const std::filesystem::path& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::filesystem::remove_all(dir);  // no seed left over from an older wire format
  std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : files) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  }
}

}  // namespace
}  // namespace dtrain::fuzz

int main(int argc, char** argv) {
  using namespace dtrain::fuzz;
  if (argc != 2) {
    std::cerr << "usage: store_fuzz_seeds OUT_DIR\n";
    return 2;
  }
  std::filesystem::path out = argv[1];
  std::vector<std::pair<std::string, std::string>> streams = everyOp();
  std::string all;
  for (const auto& [name, request] : streams) all += request;
  streams.emplace_back("every-op", all);
  writeFiles(out / "frame_decoder", streams);
  writeFiles(out / "request_handler", handlerScripts());
  return 0;
}
