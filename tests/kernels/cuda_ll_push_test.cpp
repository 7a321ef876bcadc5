// The host side of the products' pushes into the LL exchange (kernels/cuda/ll_push.hpp,
// tp_fused_push in tp_fused.hpp): which products may push, and the push a group gives them. A
// product that pushes while the fused kernel after it does not expect it (or the reverse) leaves
// a rank waiting for lines that never come, so these rules are what keeps a step from hanging.
// No GPU needed; the pushes themselves run in NcclFusedNorm.ProductsPushIntoTheLlExchange.

#include <gtest/gtest.h>

#include "kernels/cuda/ll_push.hpp"
#include "kernels/cuda/tp_fused.hpp"

namespace weft::cuda {
namespace {

TEST(LlPush, TakesOnlyWhatTheReceiveAreaHolds) {
  unsigned counters[2] = {};
  LlPush push;
  push.epochs = counters;
  push.rank = 0;
  push.ranks = 2;
  push.rows = 2;
  push.width = 4096;
  EXPECT_TRUE(push.takes(1, 4096));
  EXPECT_TRUE(push.takes(2, 4096));
  EXPECT_TRUE(push.takes(1, 384));    // narrower rows than the area's
  EXPECT_FALSE(push.takes(3, 4096));  // more rows than the area holds
  EXPECT_FALSE(push.takes(0, 4096));
  EXPECT_FALSE(push.takes(1, 8192));  // wider than the area
  EXPECT_FALSE(push.takes(1, 4094));  // not whole pairs of lines for gemv's warps
  LlPush alone = push;
  alone.ranks = 1;
  EXPECT_FALSE(alone.takes(1, 4096));
  LlPush too_many = push;
  too_many.ranks = kLlMaxRanks + 1;
  EXPECT_FALSE(too_many.takes(1, 4096));
  LlPush no_counters = push;
  no_counters.epochs = nullptr;
  EXPECT_FALSE(no_counters.takes(1, 4096));
  EXPECT_FALSE(LlPush{}.takes(1, 4096));
}

TEST(LlPush, AGroupGivesAPushOnlyOnceEveryPeersAreaIsKnown) {
  unsigned counters[2] = {};
  char areas[4][16];
  TpFusedGroup g;
  g.rank = 1;
  g.ranks = 4;
  g.ll_rows = 2;
  g.ll_width = 4096;
  g.ll_epochs = counters;
  // tp_fused_enable_push not run: no areas.
  EXPECT_FALSE(tp_fused_push(g).takes(1, 4096));
  // Every peer's area but one.
  g.ll_area[0] = areas[0];
  g.ll_area[2] = areas[2];
  EXPECT_FALSE(tp_fused_push(g).takes(1, 4096));
  // Every peer's (this rank's own is never written through the push).
  g.ll_area[3] = areas[3];
  const LlPush push = tp_fused_push(g);
  EXPECT_TRUE(push.takes(2, 4096));
  EXPECT_FALSE(push.takes(3, 4096));
  EXPECT_EQ(push.rank, 1);
  EXPECT_EQ(push.ranks, 4);
  EXPECT_EQ(push.rows, 2);
  EXPECT_EQ(push.width, 4096);
  EXPECT_EQ(push.epochs, counters);
  EXPECT_EQ(push.area[0], areas[0]);
  EXPECT_EQ(push.area[2], areas[2]);
  EXPECT_EQ(push.area[3], areas[3]);
  // Without the LL exchange there is nothing to push into.
  TpFusedGroup barrier_only = g;
  barrier_only.ll_rows = 0;
  EXPECT_FALSE(tp_fused_push(barrier_only).takes(1, 4096));
  TpFusedGroup no_counters = g;
  no_counters.ll_epochs = nullptr;
  EXPECT_FALSE(tp_fused_push(no_counters).takes(1, 4096));
}

}  // namespace
}  // namespace weft::cuda
