// Fuzz target: StoreRequestHandler driven as TcpStoreServer drives it, by up
// to four clients whose byte streams, clock and disconnects come from the
// input (handler_script.h). Each connection decodes frames, is greeted by
// HELLO, and stops reading while it has a deferred request; the clock is fake.
//
// Invariants, from request_handler.h's contract:
// - every request handed to handle() gets exactly one reply: at once, or
//   later from takeCompleted() (as soon as all its keys exist) or from
//   expire() (once its deadline passed); a request deferred when its
//   connection closes gets none, and a closed connection gets nothing;
// - each reply is the one StoreModel computes, byte for byte;
// - handle() throws WireError exactly for payloads that do not match their
//   op's layout (and for HELLO), leaving the table unchanged;
// - nextDeadline() is the earliest deadline of a deferred request;
// - when the clock has passed every deadline, nothing is deferred.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "handler_script.h"
#include "request_codec.h"
#include "store/request_handler.h"
#include "store/tcp_store.h"
#include "store/wire.h"
#include "store_model.h"

namespace dtrain::fuzz {
namespace {

using Clock = StoreRequestHandler::Clock;
using std::chrono::milliseconds;

constexpr size_t kMaxKeysPerRequest = 8;

struct Connection {
  explicit Connection(ClientId id) : id(id), decoder(kStoreMaxFrameBytes) {}
  ClientId id;
  FrameDecoder decoder;
  bool greeted = false;
  uint64_t requests = 0;  // handed to handle()
  uint64_t replies = 0;
  std::optional<Request> deferred;
  Clock::time_point deadline;
};

class ServerSimulation {
 public:
  void run(std::string_view script) {
    ScriptReader reader(script);
    ScriptRecord record;
    while (reader.next(record)) {
      if (record.action == ScriptAction::kData) {
        receive(record.slot, record.data);
      } else if (record.action == ScriptAction::kAdvance) {
        advance(milliseconds(record.millis));
      } else if (slots_[record.slot]) {
        close(record.slot);
      }
    }
    // Past every deadline, again while the frames queued behind an answered
    // wait defer anew: then every request of a live connection is answered.
    do {
      advance(milliseconds(StoreModel::kMaxWaitMillis + 1));
    } while (std::any_of(slots_.begin(), slots_.end(), [](const auto& c) { return c && c->deferred; }));
    for (int slot = 0; slot < kScriptClients; ++slot) {
      if (!slots_[slot]) continue;
      const Connection& c = *slots_[slot];
      FUZZ_CHECK(c.requests == c.replies, "client %llu: %llu requests, %llu replies", ull(c.id), ull(c.requests),
                 ull(c.replies));
      close(slot);
    }
    FUZZ_CHECK(!handler_.nextDeadline(), "a deadline is left with no client");
    FUZZ_CHECK(handler_.numKeys() == model_.size(), "%zu keys, expected %zu", handler_.numKeys(), model_.size());
  }

 private:
  static unsigned long long ull(uint64_t v) { return v; }

  void receive(int slot, std::string_view bytes) {
    if (!slots_[slot]) slots_[slot].emplace(next_id_++);
    slots_[slot]->decoder.append(bytes);
    serve(slot);
    drainReady();
  }

  // TcpStoreServer::processFrames: frames until one is deferred or fails.
  void serve(int slot) {
    while (slots_[slot] && !slots_[slot]->deferred) {
      Connection& c = *slots_[slot];
      std::optional<std::string_view> payload;
      try {
        payload = c.decoder.next();
      } catch (const WireError&) {
        close(slot);
        return;
      }
      if (!payload) return;
      if (!c.greeted) {
        std::optional<Request> hello = readRequest(*payload);
        bool accepted = hello && hello->op == static_cast<uint8_t>(StoreOp::kHello) &&
                        hello->number == kStoreProtocolVersion;
        if (!accepted) {
          close(slot);  // refused or malformed: the server closes either way
          return;
        }
        c.greeted = true;
        continue;
      }
      handleOne(slot, std::string(*payload));
    }
  }

  // WAIT and CHECK declaring more keys than the limit get one ERROR reply
  // whatever follows the count: the handler never parses the rest.
  static bool overKeyLimit(const std::string& payload) {
    if (payload.size() < 5) return false;
    const auto op = static_cast<StoreOp>(payload[0]);
    if (op != StoreOp::kWait && op != StoreOp::kCheck) return false;
    uint32_t count = 0;
    for (int i = 1; i < 5; ++i) count = (count << 8) | static_cast<unsigned char>(payload[i]);
    return count > kMaxKeysPerRequest;
  }

  void handleOne(int slot, const std::string& payload) {
    Connection& c = *slots_[slot];
    if (overKeyLimit(payload)) {
      std::optional<std::string> reply = handler_.handle(c.id, payload, now_);
      FUZZ_CHECK(reply && reply->size() > 4 && (*reply)[4] == static_cast<char>(ReplyStatus::kError),
                 "a request over the key limit got no ERROR reply");
      FUZZ_CHECK(!handler_.isDeferred(c.id), "a request over the key limit was deferred");
      FUZZ_CHECK(handler_.numKeys() == model_.size(), "a request over the key limit changed the table");
      ++c.requests;
      ++c.replies;
      return;
    }
    std::optional<Request> request = readRequest(payload);
    bool well_formed = request && request->op != static_cast<uint8_t>(StoreOp::kHello);
    std::optional<std::string> reply;
    try {
      reply = handler_.handle(c.id, payload, now_);
    } catch (const WireError& e) {
      FUZZ_CHECK(!well_formed, "%s refused a well-formed %s: %s", "handle()", storeOpName(request->op).c_str(),
                 e.message().c_str());
      FUZZ_CHECK(handler_.numKeys() == model_.size(), "a refused request changed the table");
      FUZZ_CHECK(handler_.takeCompleted().empty(), "a refused request completed a wait");
      close(slot);
      return;
    }
    FUZZ_CHECK(well_formed, "handle() accepted a malformed payload of %zu bytes (op %s)", payload.size(),
               payload.empty() ? "none" : storeOpName(static_cast<uint8_t>(payload[0])).c_str());
    ++c.requests;
    std::optional<std::string> expected = model_.execute(c.id, *request);
    if (expected) {
      FUZZ_CHECK(reply && sameReply(*reply, *expected), "%s: %s", storeOpName(request->op).c_str(),
                 reply ? "the reply differs from the model's" : "deferred, the model answers at once");
      FUZZ_CHECK(!handler_.isDeferred(c.id), "answered and deferred at once");
      ++c.replies;
    } else {
      FUZZ_CHECK(!reply && handler_.isDeferred(c.id), "%s of missing keys was answered at once",
                 storeOpName(request->op).c_str());
      c.deferred = request;
      c.deadline = now_ + milliseconds(StoreModel::clampedTimeout(request->number));
    }
    FUZZ_CHECK(handler_.numKeys() == model_.size(), "%zu keys after %s, expected %zu", handler_.numKeys(),
               storeOpName(request->op).c_str(), model_.size());
    collectCompleted();
  }

  // The deferred requests whose keys now all exist, and only those, complete.
  void collectCompleted() {
    std::vector<StoreReply> done = handler_.takeCompleted();
    size_t expected = 0;
    for (const auto& slot : slots_) {
      if (slot && slot->deferred && model_.allPresent(slot->deferred->keys)) ++expected;
    }
    FUZZ_CHECK(done.size() == expected, "%zu waits completed, expected %zu", done.size(), expected);
    for (StoreReply& reply : done) {
      int slot = deferredSlot(reply.client);
      const Request& request = *slots_[slot]->deferred;
      FUZZ_CHECK(model_.allPresent(request.keys), "a %s completed with keys missing", storeOpName(request.op).c_str());
      FUZZ_CHECK(reply.frame == model_.satisfiedReply(request), "a completed %s's reply differs from the model's",
                 storeOpName(request.op).c_str());
      answerDeferred(slot);
    }
  }

  void advance(milliseconds step) {
    now_ += step;
    std::vector<StoreReply> expired = handler_.expire(now_);
    size_t expected = 0;
    for (const auto& slot : slots_) {
      if (slot && slot->deferred && slot->deadline <= now_) ++expected;
    }
    FUZZ_CHECK(expired.size() == expected, "%zu waits expired, expected %zu", expired.size(), expected);
    for (StoreReply& reply : expired) {
      int slot = deferredSlot(reply.client);
      FUZZ_CHECK(slots_[slot]->deadline <= now_, "a wait expired before its deadline");
      FUZZ_CHECK(reply.frame == model_.timeoutReply(*slots_[slot]->deferred), "a TIMEOUT reply differs from the model's");
      answerDeferred(slot);
    }
    std::optional<Clock::time_point> earliest;
    for (const auto& slot : slots_) {
      if (slot && slot->deferred && (!earliest || slot->deadline < *earliest)) earliest = slot->deadline;
    }
    FUZZ_CHECK(handler_.nextDeadline() == earliest, "nextDeadline() is not the earliest deadline");
    drainReady();
  }

  int deferredSlot(ClientId client) {
    for (int slot = 0; slot < kScriptClients; ++slot) {
      if (slots_[slot] && slots_[slot]->id == client) {
        FUZZ_CHECK(slots_[slot]->deferred, "a second reply to client %llu's request", ull(client));
        FUZZ_CHECK(!handler_.isDeferred(client), "client %llu answered but still deferred", ull(client));
        return slot;
      }
    }
    FUZZ_CHECK(false, "a reply to client %llu, whose connection is closed", ull(client));
    return -1;
  }

  void answerDeferred(int slot) {
    slots_[slot]->deferred.reset();
    ++slots_[slot]->replies;
    ready_.push_back(slot);
  }

  // TcpStoreServer::drainReady: frames that queued behind an answered wait.
  void drainReady() {
    while (!ready_.empty()) {
      int slot = ready_.back();
      ready_.pop_back();
      serve(slot);
    }
  }

  void close(int slot) {
    ClientId id = slots_[slot]->id;
    handler_.forget(id);
    model_.forget(id);
    slots_[slot].reset();
    std::erase(ready_, slot);
    FUZZ_CHECK(!handler_.isDeferred(id), "client %llu is still deferred after forget()", ull(id));
    FUZZ_CHECK(handler_.takeCompleted().empty(), "a closed connection completed a wait");
    FUZZ_CHECK(handler_.numKeys() == model_.size(), "%zu keys after a close, expected %zu", handler_.numKeys(),
               model_.size());
  }

  // A small limit, so that inputs reach the refusal of too many keys.
  StoreRequestHandler handler_{kMaxKeysPerRequest};
  StoreModel model_;
  std::array<std::optional<Connection>, kScriptClients> slots_;
  std::vector<int> ready_;  // slots whose wait was answered, to be served again
  ClientId next_id_ = 2;    // as the server's: 0 and 1 tag its own descriptors
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

}  // namespace
}  // namespace dtrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrain::fuzz::ServerSimulation().run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
