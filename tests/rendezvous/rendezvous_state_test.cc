#include "rendezvous/rendezvous_state.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace dtrain::testing {
namespace {

TEST(RendezvousStateTest, EmptyTextIsTheInitialState) {
  RendezvousState state = RendezvousState::decode("", "k");
  EXPECT_EQ(state, RendezvousState{});
  EXPECT_EQ(state.round, 0);
  EXPECT_FALSE(state.complete);
  EXPECT_TRUE(state.participants.empty());
}

TEST(RendezvousStateTest, EncodeDecodeRoundTrips) {
  RendezvousState state;
  state.round = 7;
  state.complete = true;
  state.participants = {"4", "2", "9"};
  state.departed = {"2"};
  state.waiting = {"11"};
  EXPECT_EQ(state.encode(), "round=7;complete=1;closed=0;participants=4,2,9;departed=2;waiting=11;lost=;expected=");
  EXPECT_EQ(RendezvousState::decode(state.encode(), "k"), state);
  state.closed = true;
  state.departed.clear();
  EXPECT_EQ(RendezvousState::decode(state.encode(), "k"), state);
}

TEST(RendezvousStateTest, MalformedTextIsAConfigErrorNamingTheKey) {
  for (const std::string text : {"garbage", "round=x;complete=0;closed=0;participants=;departed=;waiting=;lost=;expected=",
                                 "round=1;complete=0"}) {
    try {
      RendezvousState::decode(text, "/run/r/rdzv/state");
      FAIL() << "decoded '" << text << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(e.message().find("/run/r/rdzv/state"), std::string::npos) << e.message();
    }
  }
}

TEST(RendezvousStateTest, NextRoundOpensOnlyWhenEveryParticipantDeparted) {
  RendezvousState state;
  state.round = 3;
  state.participants = {"1", "2"};
  EXPECT_FALSE(state.advanceIfAllDeparted()) << "an open round never advances";
  state.complete = true;
  state.departed = {"2"};
  state.waiting = {"5"};
  EXPECT_TRUE(state.isActive("1"));
  EXPECT_FALSE(state.isActive("2"));
  EXPECT_FALSE(state.advanceIfAllDeparted());
  state.departed.push_back("1");
  EXPECT_TRUE(state.advanceIfAllDeparted());
  EXPECT_EQ(state.round, 4);
  EXPECT_FALSE(state.complete);
  EXPECT_TRUE(state.participants.empty());
  EXPECT_TRUE(state.departed.empty());
  EXPECT_EQ(state.waiting, std::vector<std::string>{"5"}) << "waiting nodes join the new round";
  EXPECT_EQ(state.expected, (std::vector<std::string>{"1", "2", "5"}));
}

TEST(RendezvousStateTest, TheNextRoundExpectsTheLastRosterLessTheLostAndTheWaiting) {
  RendezvousState state;
  state.complete = true;
  state.participants = {"1", "2", "3"};
  state.departed = {"1", "3", "2"};
  state.lost = {"3"};
  state.waiting = {"4"};
  ASSERT_TRUE(state.advanceIfAllDeparted());
  EXPECT_EQ(state.expected, (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_TRUE(state.lost.empty());
}

}  // namespace
}  // namespace dtrain::testing
