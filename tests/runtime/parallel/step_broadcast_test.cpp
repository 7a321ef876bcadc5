// The tensor-parallel leader's step messages (step_broadcast.hpp) reach a follower whole: every
// field a backend reads from a step batch, KV-Compress's slot offsets and evictions included,
// as the leader's backend saw it. Without MPI: the leader's world records its point-to-point
// messages and the follower's world replays them in order.

#include "runtime/parallel/step_broadcast.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "tests/runtime/parallel/fake_pipeline_stage.hpp"

namespace weft {
namespace {

// Rank `rank` of two over a shared wire: rank 0 only sends, rank 1 only receives.
class WireWorld final : public test::RefusingWorld {
 public:
  WireWorld(int rank, std::deque<std::vector<std::byte>>& wire)
      : RefusingWorld(rank), wire_(wire) {}
  Result<void> send(std::span<const std::byte> data, int dest) override {
    if (rank() != 0 || dest != 1) return refused();
    wire_.emplace_back(data.begin(), data.end());
    return {};
  }
  Result<void> recv(std::span<std::byte> data, int source) override {
    if (rank() != 1 || source != 0 || wire_.empty()) return refused();
    if (wire_.front().size() != data.size()) {
      return Error(ErrorCode::kInvalidArgument,
                   "wire: a message of " + std::to_string(wire_.front().size()) + " bytes where " +
                       std::to_string(data.size()) + " were expected");
    }
    std::copy(wire_.front().begin(), wire_.front().end(), data.begin());
    wire_.pop_front();
    return {};
  }

 private:
  std::deque<std::vector<std::byte>>& wire_;
};

// Records every batch it runs; its logits are zeros of the right size.
class RecordingBackend final : public model::ForwardBackend {
 public:
  RecordingBackend(int num_pages, std::vector<model::StepBatch>& seen)
      : num_pages_(num_pages), seen_(seen) {}
  const model::ModelSpec& spec() const noexcept override { return spec_; }
  int num_pages() const noexcept override { return num_pages_; }
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    seen_.push_back(batch);
    logits.assign(static_cast<std::size_t>(batch.logit_rows()) * spec_.vocab_size, 0.0f);
    return {};
  }

 private:
  model::ModelSpec spec_ = test::two_layer_spec();
  int num_pages_;
  std::vector<model::StepBatch>& seen_;
};

void expect_same(const model::StepBatch& got, const model::StepBatch& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.positions, want.positions);
  ASSERT_EQ(got.sequences.size(), want.sequences.size());
  for (std::size_t i = 0; i < want.sequences.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    const auto &g = got.sequences[i], &w = want.sequences[i];
    EXPECT_EQ(g.token_begin, w.token_begin);
    EXPECT_EQ(g.token_count, w.token_count);
    EXPECT_EQ(g.all_logits, w.all_logits);
    EXPECT_EQ(g.verify, w.verify);
    EXPECT_EQ(g.page_table, w.page_table);
    EXPECT_EQ(g.slot_offset, w.slot_offset);
    EXPECT_EQ(g.compress_evict, w.compress_evict);
    EXPECT_EQ(g.compress_window, w.compress_window);
  }
}

TEST(StepBroadcast, FollowersRunTheLeadersBatchesWithEveryFieldAndKvCompressPlans) {
  std::deque<std::vector<std::byte>> wire;
  WireWorld leader_world(0, wire), follower_world(1, wire);
  std::vector<model::StepBatch> on_leader, on_follower;
  // A prefill whose second sequence compresses after the step (evicts 16 slots, window 4), a
  // decode step of a compressed sequence (slot offset 16) beside a verification row and a
  // scored prompt, as the scheduler plans them.
  model::StepBatch prefill = test::prefill_step(2, 40);
  prefill.sequences[1].compress_evict = 16;
  prefill.sequences[1].compress_window = 4;
  model::StepBatch decode = test::prefill_step(3, 1);
  decode.positions = {40, 40, 7};
  decode.sequences[0].slot_offset = 16;
  decode.sequences[1].verify = true;
  decode.sequences[2].all_logits = true;
  {
    auto leader = parallel::TensorParallelLeader::create(
        std::make_unique<RecordingBackend>(64, on_leader), leader_world,
        /*point_to_point=*/true);
    ASSERT_TRUE(leader) << leader.error().what();
    std::vector<float> logits;
    ASSERT_TRUE((*leader)->forward(prefill, logits));
    ASSERT_TRUE((*leader)->forward(decode, logits));
  }  // stops the follower
  int pool = 0;
  auto followed = parallel::follow_tensor_parallel_leader(
      follower_world,
      [&](int num_pages) -> Result<std::unique_ptr<model::ForwardBackend>> {
        pool = num_pages;
        return std::unique_ptr<model::ForwardBackend>(
            std::make_unique<RecordingBackend>(num_pages, on_follower));
      },
      /*point_to_point=*/true);
  ASSERT_TRUE(followed) << followed.error().what();
  EXPECT_TRUE(wire.empty()) << wire.size() << " messages left unread";
  EXPECT_EQ(pool, 64);
  ASSERT_EQ(on_leader.size(), 2u);
  ASSERT_EQ(on_follower.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    expect_same(on_follower[k], on_leader[k]);
  }
  expect_same(on_follower[0], prefill);
  expect_same(on_follower[1], decode);
}

}  // namespace
}  // namespace weft
