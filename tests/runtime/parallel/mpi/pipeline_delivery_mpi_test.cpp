// Run under `mpirun -np 2` (tests/runtime/CMakeLists.txt sets
// OMPI_MCA_btl_vader_single_copy_mechanism=none): issue #20's hang, without a GPU. World rank
// 0 leads a two-stage pipeline with two steps in flight, so it sends each step's batch point
// to point; its device links stand in for NCCL ones: handed a step, they wait, outside MPI,
// until rank 1's links have been handed the same step (a GPU stage waits so in CUDA for the
// next stage's receive, the logits, a buffer that grows). The ranks meet through a shared
// file, not MPI. A batch past Open MPI's eager limit (4 KiB over shared memory) that rank 0
// has not delivered before waiting arrives, without the single-copy path, only once rank 0
// is back inside MPI: rank 1 waits in MPI_Recv, rank 0 in its links, and the step never runs
// (here: rank 0's links give up after kPatience and fail the step). The pipeline delivers the
// batch first (PipelineBackend::deliver_sends_before_device_waits).
// Elsewhere (another MPI, or Open MPI with CMA) the batch arrives either way and this passes.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/pipeline_backend.hpp"
#include "runtime/parallel/step_broadcast.hpp"
#include "tests/runtime/parallel/fake_pipeline_stage.hpp"
#include "tests/runtime/parallel/mpi/mpi_gtest_main.hpp"

namespace weft {
namespace {

parallel::Communicator* g_world = nullptr;
constexpr auto kPatience = std::chrono::seconds(10);

// A page both ranks map: how many steps rank 1's links were handed.
struct SharedPage {
  std::atomic<int> steps_at_rank_1;
};

class SharedFile {
 public:
  // Collective: rank 0 makes the file and tells rank 1 its name.
  explicit SharedFile(parallel::Communicator& world) {
    char name[64] = "/tmp/weft-delivery-XXXXXX";
    int fd = -1;
    if (world.rank() == 0) {
      fd = mkstemp(name);
      if (fd >= 0 && ftruncate(fd, 4096) != 0) {
        close(fd);
        fd = -1;
      }
    }
    EXPECT_TRUE(world.broadcast(std::as_writable_bytes(std::span<char>(name)), 0));
    if (world.rank() != 0) fd = open(name, O_RDWR);
    EXPECT_GE(fd, 0) << name << ": " << std::strerror(errno);
    if (fd < 0) return;
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(p, MAP_FAILED);
    if (p != MAP_FAILED) page_ = static_cast<SharedPage*>(p);
    EXPECT_TRUE(world.barrier());
    if (world.rank() == 0) unlink(name);
  }
  ~SharedFile() {
    if (page_ != nullptr) munmap(page_, 4096);
  }
  SharedPage* page() const { return page_; }

 private:
  SharedPage* page_ = nullptr;
};

// Rank 1's links count the steps they are handed; rank 0's wait for rank 1 to have each.
class WaitingLinks final : public parallel::DeviceStageLinks {
 public:
  WaitingLinks(int rank, SharedPage& shared) : rank_(rank), shared_(shared) {}
  Result<void> forward(model::StageForward&, const std::vector<model::StepBatch>&,
                       std::vector<float>& logits, parallel::Communicator*, bool) override {
    logits.clear();
    if (rank_ != 0) shared_.steps_at_rank_1.fetch_add(1);
    return {};
  }
  std::string description() const override { return "links that wait for rank 1 outside MPI"; }
  bool defers_logits() const override { return rank_ == 0; }
  Result<void> forward_deferred(model::StageForward&, const std::vector<model::StepBatch>& parts,
                                parallel::Communicator*) override {
    const int step = ++handed_;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (shared_.steps_at_rank_1.load() < step) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Error(ErrorCode::kInternal,
                     "rank 1 had not been handed step " + std::to_string(step) + " after " +
                         std::to_string(kPatience.count()) +
                         " s while rank 0 waited outside MPI: its batch was never delivered");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::size_t rows = 0;
    for (const auto& p : parts)
      rows += static_cast<std::size_t>(p.logit_rows());
    rows_.push_back(rows);
    return {};
  }
  Result<void> take_logits(model::StageForward& stage, std::vector<float>& logits, bool) override {
    logits.assign(rows_.front() * static_cast<std::size_t>(stage.spec().vocab_size), 0.0f);
    rows_.erase(rows_.begin());
    return {};
  }

 private:
  int rank_;
  SharedPage& shared_;
  int handed_ = 0;
  std::vector<std::size_t> rows_;
};

Result<std::unique_ptr<model::ForwardBackend>> stage_backend(parallel::Communicator& world,
                                                             SharedPage& shared) {
  auto links = [&shared](
                   parallel::Communicator& w, const parallel::PipelinePlace&,
                   model::StageForward&) -> Result<std::unique_ptr<parallel::DeviceStageLinks>> {
    return std::unique_ptr<parallel::DeviceStageLinks>(
        std::make_unique<WaitingLinks>(w.rank(), shared));
  };
  auto backend = parallel::PipelineBackend::create(
      std::make_unique<test::FakeStage>(world.rank(), 0), world,
      parallel::pipeline_place(world.rank(), 1, 2), 2, links, /*groups=*/2);
  if (!backend) return backend.error();
  return std::unique_ptr<model::ForwardBackend>(std::move(*backend));
}

TEST(PipelineDeliveryMpi, StepsInFlightRunWhileRankZeroWaitsOutsideMpi) {
  auto& w = *g_world;
  ASSERT_EQ(w.size(), 2) << "run under mpirun -np 2";
  if (w.rank() == 0) {
    const char* copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    std::printf("OMPI_MCA_btl_vader_single_copy_mechanism=%s\n",
                copy != nullptr ? copy : "(unset)");
  }
  SharedFile file(w);
  ASSERT_NE(file.page(), nullptr);
  if (w.rank() != 0) {
    auto followed = parallel::follow_tensor_parallel_leader(
        w, [&](int) { return stage_backend(w, *file.page()); }, /*point_to_point=*/true);
    EXPECT_TRUE(followed) << followed.error().what();
    EXPECT_EQ(file.page()->steps_at_rank_1.load(), 3);
    return;
  }
  auto local = stage_backend(w, *file.page());
  ASSERT_TRUE(local) << local.error().what();
  auto leader = parallel::TensorParallelLeader::create(std::move(*local), w, true);
  ASSERT_TRUE(leader) << leader.error().what();
  // Two groups' prefills of 5 KB messages in flight, the first collected, a third submitted.
  const model::StepBatch a = test::prefill_step(6, 100), b = test::prefill_step(6, 90);
  std::vector<float> logits;
  for (const auto* step : {&a, &b}) {
    auto ok = (*leader)->submit(*step);
    ASSERT_TRUE(ok) << ok.error().what();
  }
  auto ok = (*leader)->collect(logits, false);
  ASSERT_TRUE(ok) << ok.error().what();
  ok = (*leader)->submit(a);
  ASSERT_TRUE(ok) << ok.error().what();
  EXPECT_EQ(logits.size(), 6u * 32u);
  leader->reset();  // tells rank 1 to stop (and delivers what is left)
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  return weft::test_support::mpi_gtest_main(argc, argv, weft::g_world);
}
