#include "store/wire.h"

#include <gtest/gtest.h>

namespace dtrain {
namespace {

TEST(WireTest, FrameLayoutIsBigEndianLengthThenOpThenFields) {
  std::string frame = FrameWriter(StoreOp::kSet).bytes("k").bytes("vv").finish();
  const std::string expected("\x00\x00\x00\x0c"   // length of what follows: 12
                             "\x02"               // SET
                             "\x00\x00\x00\x01k"  // key
                             "\x00\x00\x00\x02vv",  // value
                             16);
  EXPECT_EQ(frame, expected);
}

TEST(WireTest, EveryFieldTypeRoundTrips) {
  const std::string binary("a\0b", 3);
  std::string frame = FrameWriter(ReplyStatus::kOk)
                          .u8(200)
                          .u32(0xdeadbeef)
                          .i64(-42)
                          .i64(INT64_MIN)
                          .bytes(binary)
                          .bytes("")
                          .strings({"x", "", "yz"})
                          .strings({})
                          .finish();
  FrameDecoder decoder(1024);
  decoder.append(frame);
  auto payload = decoder.next();
  ASSERT_TRUE(payload);
  PayloadReader in(*payload);
  EXPECT_EQ(in.u8("status"), 0);
  EXPECT_EQ(in.u8("a"), 200);
  EXPECT_EQ(in.u32("b"), 0xdeadbeefu);
  EXPECT_EQ(in.i64("c"), -42);
  EXPECT_EQ(in.i64("d"), INT64_MIN);
  EXPECT_EQ(in.bytes("e"), binary);
  EXPECT_EQ(in.bytes("f"), "");
  EXPECT_EQ(in.strings("g"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_TRUE(in.strings("h").empty());
  EXPECT_NO_THROW(in.expectEnd("test"));
}

TEST(WireTest, DecoderYieldsEachFrameOnceWhateverTheChunking) {
  std::string stream;
  for (int i = 0; i < 5; ++i) stream += FrameWriter(StoreOp::kAdd).bytes("n").i64(i).finish();
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
    SCOPED_TRACE(chunk);
    FrameDecoder decoder(1024);
    std::vector<int64_t> deltas;
    for (size_t at = 0; at < stream.size(); at += chunk) {
      decoder.append(std::string_view(stream).substr(at, chunk));
      while (auto payload = decoder.next()) {
        PayloadReader in(*payload);
        EXPECT_EQ(in.u8("op"), static_cast<uint8_t>(StoreOp::kAdd));
        EXPECT_EQ(in.bytes("key"), "n");
        deltas.push_back(in.i64("delta"));
      }
    }
    EXPECT_EQ(deltas, (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(decoder.bufferedBytes(), 0u);
  }
}

TEST(WireTest, AFrameAtTheLimitPassesAndOneByteMoreIsRejected) {
  FrameDecoder at_limit(16);
  at_limit.append(FrameWriter(StoreOp::kSet).bytes("0123456789a").finish());  // 1 + 4 + 11
  EXPECT_TRUE(at_limit.next());

  FrameDecoder over_limit(16);
  over_limit.append(FrameWriter(StoreOp::kSet).bytes("0123456789ab").finish());
  try {
    over_limit.next();
    FAIL() << "an oversized frame was accepted";
  } catch (const WireError& e) {
    EXPECT_NE(e.message().find("frame of 17 bytes exceeds the limit of 16 bytes"), std::string::npos)
        << e.message();
  }
}

TEST(WireTest, TheLimitIsCheckedBeforeThePayloadArrives) {
  FrameDecoder decoder(1024);
  decoder.append(std::string("\xff\xff\xff\xff", 4));
  EXPECT_THROW(decoder.next(), WireError);
}

TEST(WireTest, ATruncatedFieldNamesTheField) {
  std::string payload("\x02\x00\x00\x00\x09short", 10);
  PayloadReader in(payload);
  in.u8("op");
  try {
    in.bytes("key");
    FAIL();
  } catch (const WireError& e) {
    EXPECT_NE(e.message().find("truncated field 'key': needs 9 bytes, 5 left"), std::string::npos)
        << e.message();
  }
}

TEST(WireTest, AHostileListCountFailsWithoutAllocating) {
  std::string payload("\xff\xff\xff\xff", 4);  // 4 billion entries announced
  PayloadReader in(payload);
  EXPECT_THROW(in.strings("keys"), WireError);
}

TEST(WireTest, LeftoverBytesAreAnError) {
  std::string payload("\x09\x01", 2);
  PayloadReader in(payload);
  in.u8("op");
  EXPECT_THROW(in.expectEnd("NUM_KEYS"), WireError);
}

TEST(WireTest, OpNames) {
  EXPECT_EQ(storeOpName(static_cast<uint8_t>(StoreOp::kCompareSet)), "COMPARE_SET");
  EXPECT_EQ(storeOpName(0xee), "op 238");
}

}  // namespace
}  // namespace dtrain
