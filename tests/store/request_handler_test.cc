// StoreRequestHandler with a fake clock: deferral, completion, expiry.
#include "store/request_handler.h"

#include <gtest/gtest.h>

namespace dtrain {
namespace {

using Clock = StoreRequestHandler::Clock;
using std::chrono::milliseconds;

std::string payloadOf(const std::string& frame) { return frame.substr(4); }

std::string request(FrameWriter& writer) { return payloadOf(writer.finish()); }

class RequestHandlerTest : public ::testing::Test {
 protected:
  std::optional<std::string> handle(ClientId client, FrameWriter& request_writer) {
    return handler_.handle(client, request(request_writer), now_);
  }
  // The reply's status; `fields` (if given) reads what follows it. The reader
  // views `reply_frame`, which must outlive it.
  static uint8_t statusOf(const std::string& reply_frame, PayloadReader* fields = nullptr) {
    PayloadReader in(std::string_view(reply_frame).substr(4));
    uint8_t status = in.u8("status");
    if (fields) *fields = in;
    return status;
  }

  StoreRequestHandler handler_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

constexpr auto kOk = static_cast<uint8_t>(ReplyStatus::kOk);
constexpr auto kTimeout = static_cast<uint8_t>(ReplyStatus::kTimeout);

TEST_F(RequestHandlerTest, AGetOfAMissingKeyIsAnsweredWhenTheKeyIsSet) {
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kGet).bytes("k").i64(1000)));
  EXPECT_TRUE(handler_.isDeferred(1));
  EXPECT_TRUE(handler_.takeCompleted().empty());
  ASSERT_TRUE(handle(2, FrameWriter(StoreOp::kSet).bytes("k").bytes("v")));
  auto done = handler_.takeCompleted();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].client, 1u);
  PayloadReader rest("");
  EXPECT_EQ(statusOf(done[0].frame, &rest), kOk);
  EXPECT_EQ(rest.bytes("value"), "v");
  EXPECT_FALSE(handler_.isDeferred(1));
  EXPECT_FALSE(handler_.nextDeadline());
}

TEST_F(RequestHandlerTest, AWaitCompletesOnlyWhenAllKeysExist) {
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kWait).strings({"a", "b"}).i64(1000)));
  handle(2, FrameWriter(StoreOp::kAdd).bytes("a").i64(1));
  EXPECT_TRUE(handler_.takeCompleted().empty());
  handle(2, FrameWriter(StoreOp::kCompareSet).bytes("b").bytes("").bytes("x"));
  EXPECT_EQ(handler_.takeCompleted().size(), 1u);
}

TEST_F(RequestHandlerTest, ADeferredRequestExpiresAtItsDeadlineNamingTheMissingKeys) {
  handle(2, FrameWriter(StoreOp::kSet).bytes("present").bytes("1"));
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kWait).strings({"present", "absent"}).i64(250)));
  EXPECT_EQ(handler_.nextDeadline(), now_ + milliseconds(250));
  EXPECT_TRUE(handler_.expire(now_ + milliseconds(249)).empty());
  auto expired = handler_.expire(now_ + milliseconds(250));
  ASSERT_EQ(expired.size(), 1u);
  PayloadReader rest("");
  EXPECT_EQ(statusOf(expired[0].frame, &rest), kTimeout);
  EXPECT_EQ(rest.strings("missing"), std::vector<std::string>{"absent"});
  EXPECT_EQ(rest.i64("timeout_ms"), 250);
  // Setting the key now must not answer the request a second time.
  handle(2, FrameWriter(StoreOp::kSet).bytes("absent").bytes("late"));
  EXPECT_TRUE(handler_.takeCompleted().empty());
}

TEST_F(RequestHandlerTest, AZeroTimeoutIsAPollAnsweredAtOnce) {
  auto reply = handle(1, FrameWriter(StoreOp::kWait).strings({"nope"}).i64(0));
  ASSERT_TRUE(reply);
  EXPECT_EQ(statusOf(*reply), kTimeout);
  EXPECT_FALSE(handler_.isDeferred(1));
}

TEST_F(RequestHandlerTest, AForgottenClientIsNeverAnswered) {
  handle(1, FrameWriter(StoreOp::kGet).bytes("k").i64(1000));
  handler_.forget(1);
  handle(2, FrameWriter(StoreOp::kSet).bytes("k").bytes("v"));
  EXPECT_TRUE(handler_.takeCompleted().empty());
  EXPECT_TRUE(handler_.expire(now_ + std::chrono::hours(1)).empty());
}

TEST_F(RequestHandlerTest, AKeyDeletedAndSetAgainStillWakesAWaiter) {
  handle(2, FrameWriter(StoreOp::kSet).bytes("a").bytes("1"));
  handle(1, FrameWriter(StoreOp::kWait).strings({"a", "b"}).i64(1000));
  handle(2, FrameWriter(StoreOp::kDeleteKey).bytes("a"));
  handle(2, FrameWriter(StoreOp::kSet).bytes("b").bytes("1"));
  EXPECT_TRUE(handler_.takeCompleted().empty());
  handle(2, FrameWriter(StoreOp::kSet).bytes("a").bytes("2"));
  EXPECT_EQ(handler_.takeCompleted().size(), 1u);
}

TEST_F(RequestHandlerTest, AddOverflowIsAnErrorReplyAndChangesNothing) {
  handle(1, FrameWriter(StoreOp::kAdd).bytes("n").i64(INT64_MAX));
  auto reply = handle(1, FrameWriter(StoreOp::kAdd).bytes("n").i64(1));
  ASSERT_TRUE(reply);
  PayloadReader rest("");
  EXPECT_EQ(statusOf(*reply, &rest), static_cast<uint8_t>(ReplyStatus::kError));
  EXPECT_NE(rest.bytes("message").find("overflows"), std::string::npos);
}

TEST_F(RequestHandlerTest, MalformedRequestsThrowAndLeaveTheTableUnchanged) {
  std::string truncated_set = request(FrameWriter(StoreOp::kSet).bytes("k"));  // no value
  EXPECT_THROW(handler_.handle(1, truncated_set, now_), WireError);
  EXPECT_EQ(handler_.numKeys(), 0u);
  EXPECT_THROW(handler_.handle(1, std::string("\x63", 1), now_), WireError);  // unknown op 99
  EXPECT_THROW(handle(1, FrameWriter(StoreOp::kHello).u32(1).bytes("")), WireError);
  EXPECT_THROW(handler_.handle(1, "", now_), WireError);
}

TEST_F(RequestHandlerTest, AnEphemeralKeyGoesWithItsOwnersConnectionUnlessSetAgainPlainly) {
  ASSERT_TRUE(handle(1, FrameWriter(StoreOp::kSetEphemeral).bytes("present/1").bytes("1")));
  ASSERT_TRUE(handle(1, FrameWriter(StoreOp::kSetEphemeral).bytes("present/x").bytes("1")));
  ASSERT_TRUE(handle(2, FrameWriter(StoreOp::kSet).bytes("present/x").bytes("2")));  // now a plain key
  ASSERT_TRUE(handle(2, FrameWriter(StoreOp::kSet).bytes("other").bytes("v")));
  EXPECT_EQ(handler_.numKeys(), 3u);
  handler_.forget(2);  // another client's connection closing changes nothing
  EXPECT_EQ(handler_.numKeys(), 3u);
  handler_.forget(1);
  EXPECT_EQ(handler_.numKeys(), 2u);
  auto check = handle(3, FrameWriter(StoreOp::kCheck).strings({"present/1"}));
  PayloadReader fields("");
  ASSERT_EQ(statusOf(*check, &fields), kOk);
  EXPECT_EQ(fields.u8("present"), 0) << "the owner's key outlived its connection";
  check = handle(3, FrameWriter(StoreOp::kCheck).strings({"present/x", "other"}));
  ASSERT_EQ(statusOf(*check, &fields), kOk);
  EXPECT_EQ(fields.u8("present"), 1) << "a key set plainly since went with the old owner";
}

constexpr auto kError = static_cast<uint8_t>(ReplyStatus::kError);

TEST_F(RequestHandlerTest, TooManyKeysIsAnErrorNamingTheLimitAndChangesNothing) {
  StoreRequestHandler handler(4);
  const std::vector<std::string> five = {"a", "b", "c", "d", "e"};
  for (StoreOp op : {StoreOp::kWait, StoreOp::kCheck}) {
    FrameWriter writer(op);
    writer.strings(five);
    if (op == StoreOp::kWait) writer.i64(1000);
    std::optional<std::string> reply = handler.handle(1, request(writer), now_);
    ASSERT_TRUE(reply) << "one reply per request, at once";
    PayloadReader rest("");
    EXPECT_EQ(statusOf(*reply, &rest), kError);
    const std::string message = rest.bytes("message");
    EXPECT_NE(message.find(storeOpName(static_cast<uint8_t>(op)) + " of 5 keys exceeds the limit of 4 keys"),
              std::string::npos) << message;
    EXPECT_FALSE(handler.isDeferred(1));
  }
  FrameWriter four(StoreOp::kWait);
  four.strings({"a", "b", "c", "d"}).i64(1000);
  EXPECT_FALSE(handler.handle(1, request(four), now_)) << "at the limit is allowed";
}

TEST_F(RequestHandlerTest, AWaitNamingAKeyTwiceCompletesWhenEachDistinctKeyExists) {
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kWait).strings({"a", "b", "a"}).i64(1000)));
  handle(2, FrameWriter(StoreOp::kSet).bytes("a").bytes("1"));
  handle(2, FrameWriter(StoreOp::kSet).bytes("a").bytes("2"));  // an overwrite is no new key
  EXPECT_TRUE(handler_.takeCompleted().empty());
  handle(2, FrameWriter(StoreOp::kSet).bytes("b").bytes("1"));
  EXPECT_EQ(handler_.takeCompleted().size(), 1u);
}

TEST_F(RequestHandlerTest, AKeyDeletedWhileOthersAreAwaitedIsAwaitedAgain) {
  handle(2, FrameWriter(StoreOp::kSet).bytes("a").bytes("1"));
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kWait).strings({"a", "b"}).i64(1000)));
  handle(2, FrameWriter(StoreOp::kDeleteKey).bytes("a"));
  handle(2, FrameWriter(StoreOp::kSet).bytes("b").bytes("1"));
  EXPECT_TRUE(handler_.takeCompleted().empty()) << "'a' is gone again";
  // An ephemeral key that goes with its owner counts as deleted too.
  handle(3, FrameWriter(StoreOp::kSetEphemeral).bytes("a").bytes("1"));
  EXPECT_EQ(handler_.takeCompleted().size(), 1u);
  EXPECT_FALSE(handle(1, FrameWriter(StoreOp::kWait).strings({"a", "c"}).i64(1000)));
  handler_.forget(3);
  handle(2, FrameWriter(StoreOp::kSet).bytes("c").bytes("1"));
  EXPECT_TRUE(handler_.takeCompleted().empty()) << "'a' left with its owner";
  handle(2, FrameWriter(StoreOp::kAdd).bytes("a").i64(1));
  EXPECT_EQ(handler_.takeCompleted().size(), 1u);
}

TEST_F(RequestHandlerTest, ExpiryStopsAtItsKeyBudgetAndResumesOnTheNextCall) {
  for (ClientId client = 1; client <= 3; ++client) {
    EXPECT_FALSE(handle(client, FrameWriter(StoreOp::kWait).strings({"x", "y"}).i64(10)));
  }
  now_ += milliseconds(20);
  EXPECT_EQ(handler_.expire(now_, 3).size(), 2u) << "2 keys, then 4 >= 3: stop";
  EXPECT_TRUE(handler_.nextDeadline() && *handler_.nextDeadline() <= now_);
  EXPECT_EQ(handler_.expire(now_, 3).size(), 1u);
  EXPECT_FALSE(handler_.nextDeadline());
}

}  // namespace
}  // namespace dtrain
