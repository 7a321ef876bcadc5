#pragma once
// A pipeline stage with no weights, for tests of the pipeline's messages (what is sent, when a
// rank may wait) rather than of its arithmetic: a tiny spec cut into two one-layer stages. Its
// forward() writes zeros of the right size (the next stage's input, or the logits). Also a
// world of two ranks that refuses every call a test does not override.

#include <memory>
#include <string>
#include <vector>

#include "runtime/model/layer_pipeline.hpp"
#include "runtime/model/step_batch.hpp"
#include "runtime/parallel/communicator.hpp"

namespace weft::test {

// Rank `rank` of two: every collective and message is refused (a test's world overrides the
// calls it records or replays).
class RefusingWorld : public parallel::Communicator {
 public:
  explicit RefusingWorld(int rank) : rank_(rank) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return 2; }
  std::string name() const override { return "test world"; }
  Result<void> all_reduce_sum(std::span<float>) override { return refused(); }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t>) override { return refused(); }
  Result<void> all_gather(std::span<const float>, std::span<float>) override { return refused(); }
  Result<void> broadcast(std::span<std::byte>, int) override { return refused(); }
  Result<void> barrier() override { return refused(); }
  Result<void> send(std::span<const std::byte>, int) override { return refused(); }
  Result<void> recv(std::span<std::byte>, int) override { return refused(); }
  Result<void> wait_sends() override { return {}; }
  Result<std::unique_ptr<Communicator>> split(int, int) override { return refused(); }

 protected:
  static Error refused() { return Error(ErrorCode::kUnsupported, "not in the test's world"); }

 private:
  int rank_;
};

inline model::ModelSpec two_layer_spec() {
  model::ModelSpec spec;
  spec.architecture = "fake";
  spec.vocab_size = 32;
  spec.hidden_size = 8;
  spec.intermediate_size = 16;
  spec.num_layers = 2;
  spec.num_heads = 1;
  spec.num_kv_heads = 1;
  spec.head_dim = 8;
  return spec;
}

class FakeStage final : public model::StageForward {
 public:
  // stage 0 holds layer 0 (embeds), stage 1 layer 1 (ends); cuda_device -1 is a CPU stage, 0
  // one that says it is on a GPU (for the pipeline's choices; nothing runs there).
  FakeStage(int stage, int cuda_device) : stage_(stage), cuda_device_(cuda_device) {}
  const model::ModelSpec& spec() const noexcept override { return spec_; }
  model::LayerRange layers() const noexcept override { return {stage_, 1}; }
  int num_pages() const noexcept override { return 256; }
  int page_size() const noexcept override { return 16; }
  int cuda_device() const noexcept override { return cuda_device_; }
  Result<void> forward(const model::StepBatch& batch, std::span<const float>,
                       std::vector<float>& out, parallel::Communicator*) override {
    const auto width = static_cast<std::size_t>(ends() ? spec_.vocab_size : spec_.hidden_size);
    const auto rows = ends() ? static_cast<std::size_t>(batch.logit_rows()) : batch.tokens.size();
    out.assign(rows * width, 0.0f);
    return {};
  }

 private:
  model::ModelSpec spec_ = two_layer_spec();
  int stage_;
  int cuda_device_;
};

// `sequences` prefills of `length` tokens each, one logit row each, pages 0, 1, ... in turn.
// Its message (step_broadcast.cpp: tokens, positions, 7 words a sequence, the page ids) is
// (2 * length + 7 + pages) * 4 bytes a sequence: 6 x 100 tokens are 5,136 bytes, past Open
// MPI's 4 KiB eager limit for shared memory.
inline model::StepBatch prefill_step(int sequences, int length) {
  model::StepBatch b;
  const int pages = (length + 15) / 16;
  for (int s = 0; s < sequences; ++s) {
    model::SequenceSlice slice;
    slice.token_begin = static_cast<int>(b.tokens.size());
    slice.token_count = length;
    for (int p = 0; p < pages; ++p)
      slice.page_table.push_back(s * pages + p);
    for (int i = 0; i < length; ++i) {
      b.tokens.push_back((s * 7 + i) % 32);
      b.positions.push_back(i);
    }
    b.sequences.push_back(std::move(slice));
  }
  return b;
}

}  // namespace weft::test
