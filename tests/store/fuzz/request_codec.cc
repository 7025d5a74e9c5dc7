#include "request_codec.h"

#include "store/wire.h"

namespace dtrain::fuzz {

std::optional<Request> readRequest(std::string_view payload) {
  Request r;
  try {
    PayloadReader in(payload);
    r.op = in.u8("op");
    switch (static_cast<StoreOp>(r.op)) {
      case StoreOp::kHello:
        r.number = in.u32("version");
        r.value = in.bytes("token");
        break;
      case StoreOp::kSet:
      case StoreOp::kSetEphemeral:
        r.keys = {in.bytes("key")};
        r.value = in.bytes("value");
        break;
      case StoreOp::kGet:
      case StoreOp::kAdd:
        r.keys = {in.bytes("key")};
        r.number = in.i64("timeout_ms or delta");
        break;
      case StoreOp::kCompareSet:
        r.keys = {in.bytes("key")};
        r.expected = in.bytes("expected");
        r.value = in.bytes("desired");
        break;
      case StoreOp::kWait:
        r.keys = in.strings("keys");
        r.number = in.i64("timeout_ms");
        break;
      case StoreOp::kCheck:
        r.keys = in.strings("keys");
        break;
      case StoreOp::kDeleteKey:
        r.keys = {in.bytes("key")};
        break;
      case StoreOp::kNumKeys:
        break;
      default:
        return std::nullopt;
    }
    in.expectEnd("request");
  } catch (const WireError&) {
    return std::nullopt;
  }
  return r;
}

std::string writeRequest(const Request& r) {
  auto op = static_cast<StoreOp>(r.op);
  FrameWriter out(op);
  switch (op) {
    case StoreOp::kHello:
      out.u32(static_cast<uint32_t>(r.number)).bytes(r.value);
      break;
    case StoreOp::kSet:
    case StoreOp::kSetEphemeral:
      out.bytes(r.keys.at(0)).bytes(r.value);
      break;
    case StoreOp::kGet:
    case StoreOp::kAdd:
      out.bytes(r.keys.at(0)).i64(r.number);
      break;
    case StoreOp::kCompareSet:
      out.bytes(r.keys.at(0)).bytes(r.expected).bytes(r.value);
      break;
    case StoreOp::kWait:
      out.strings(r.keys).i64(r.number);
      break;
    case StoreOp::kCheck:
      out.strings(r.keys);
      break;
    case StoreOp::kDeleteKey:
      out.bytes(r.keys.at(0));
      break;
    case StoreOp::kNumKeys:
      break;
  }
  return out.finish();
}

}  // namespace dtrain::fuzz
