// World rank 0 of a pipeline with steps in flight (sequence groups) sends each step's batch
// point to point and, on GPU stages joined over NCCL, then waits for the other ranks in CUDA,
// not in MPI. Those waits must come after the batch is delivered: an undelivered batch past
// MPI's eager limit may need this rank inside MPI to arrive, and the follower waiting for it
// could never run the work this rank waits for (issue #20, docs/notes/ppgroups_gpu.md;
// pipeline_delivery_mpi_test shows the hang itself over MPI). With a world that counts its
// undelivered sends and device links that record that count whenever a step is handed to them.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/parallel/pipeline_backend.hpp"
#include "runtime/parallel/step_broadcast.hpp"
#include "tests/runtime/parallel/fake_pipeline_stage.hpp"

namespace weft {
namespace {

// World rank 0 of two; sends are held until wait_sends() delivers them.
class CountingWorld final : public test::RefusingWorld {
 public:
  CountingWorld() : RefusingWorld(0) {}
  Result<void> send(std::span<const std::byte>, int) override {
    ++sent;
    ++undelivered;
    return {};
  }
  Result<void> wait_sends() override {
    undelivered = 0;
    return {};
  }

  int sent = 0, undelivered = 0;
};

// World rank 0's links, as the NCCL ones: each step deferred, its logits taken later. Each
// call records how many of the world's sends were still undelivered when the step came.
class RecordingLinks final : public parallel::DeviceStageLinks {
 public:
  RecordingLinks(const CountingWorld& world, std::vector<int>& seen) : world_(world), seen_(seen) {}
  Result<void> forward(model::StageForward&, const std::vector<model::StepBatch>& parts,
                       std::vector<float>& logits, parallel::Communicator*, bool) override {
    seen_.push_back(world_.undelivered);
    logits.assign(rows(parts) * 32, 0.0f);
    return {};
  }
  std::string description() const override { return "recording links"; }
  bool defers_logits() const override { return true; }
  Result<void> forward_deferred(model::StageForward&, const std::vector<model::StepBatch>& parts,
                                parallel::Communicator*) override {
    seen_.push_back(world_.undelivered);
    deferred_rows_.push_back(rows(parts));
    return {};
  }
  Result<void> take_logits(model::StageForward&, std::vector<float>& logits, bool) override {
    logits.assign(deferred_rows_.front() * 32, 0.0f);
    deferred_rows_.erase(deferred_rows_.begin());
    return {};
  }

 private:
  static std::size_t rows(const std::vector<model::StepBatch>& parts) {
    std::size_t n = 0;
    for (const auto& p : parts)
      n += static_cast<std::size_t>(p.logit_rows());
    return n;
  }
  const CountingWorld& world_;
  std::vector<int>& seen_;
  std::vector<std::size_t> deferred_rows_;
};

// Rank 0 (stage 0 of two) with `groups` steps in flight, led as the engine leads it.
std::unique_ptr<parallel::TensorParallelLeader> lead(CountingWorld& world, int cuda_device,
                                                     parallel::DeviceLinksFactory links,
                                                     int groups) {
  auto backend = parallel::PipelineBackend::create(
      std::make_unique<test::FakeStage>(0, cuda_device), world, parallel::pipeline_place(0, 1, 2),
      2, std::move(links), groups);
  EXPECT_TRUE(backend) << backend.error().what();
  if (!backend) return nullptr;
  auto leader = parallel::TensorParallelLeader::create(std::move(*backend), world, groups > 1);
  EXPECT_TRUE(leader) << leader.error().what();
  return leader ? std::move(*leader) : nullptr;
}

TEST(PipelineDelivery, DeviceLinksGetAStepOnlyOnceItsBatchIsDelivered) {
  CountingWorld world;
  std::vector<int> seen;
  auto leader = lead(
      world, 0,
      [&](parallel::Communicator&, const parallel::PipelinePlace&,
          model::StageForward&) -> Result<std::unique_ptr<parallel::DeviceStageLinks>> {
        return std::unique_ptr<parallel::DeviceStageLinks>(
            std::make_unique<RecordingLinks>(world, seen));
      },
      2);
  ASSERT_NE(leader, nullptr);
  // Two groups' prefills in flight (messages past the eager limit), then the first collected
  // and a third submitted, as the scheduler's group loops do.
  const model::StepBatch a = test::prefill_step(6, 100), b = test::prefill_step(2, 40);
  ASSERT_TRUE(leader->submit(a));
  ASSERT_TRUE(leader->submit(b));
  std::vector<float> logits;
  ASSERT_TRUE(leader->collect(logits, false));
  EXPECT_EQ(logits.size(), 6u * 32u);
  ASSERT_TRUE(leader->submit(a));
  ASSERT_EQ(seen.size(), 3u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], 0) << "step " << i << " reached the device links with " << seen[i]
                          << " of rank 0's sends undelivered";
  }
  EXPECT_EQ(world.sent, 1 + 3 * 2);  // the pool's size, then each step's header and batch
}

TEST(PipelineDelivery, StagesOnTheCpuKeepSendingWithoutWaiting) {
  // CPU stages wait for the others in MPI calls only, which progress the sends: rank 0 must
  // go on to the next group's step at once (the pipeline's overlap on the CPU).
  CountingWorld world;
  auto leader = lead(world, -1, {}, 2);
  ASSERT_NE(leader, nullptr);
  ASSERT_TRUE(leader->submit(test::prefill_step(6, 100)));
  ASSERT_TRUE(leader->submit(test::prefill_step(2, 40)));
  // The pool's size, two headers and batches, and each step's residual stream in two pieces,
  // none waited for.
  EXPECT_EQ(world.sent, 1 + 2 * 2 + 2 * 2);
  EXPECT_EQ(world.undelivered, world.sent);
}

}  // namespace
}  // namespace weft
