#pragma once
// The embedding requests waiting for an encoder, and how they are packed into steps: whole
// sequences in arrival order, as many as fit a step's token budget (always at least one), so
// inputs of different requests share a forward pass. A plain class; the embedding actor
// (actors/embedding_engine.*) runs it on the device thread.

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "runtime/model/encoder_model.hpp"

namespace weft::model {

struct EmbedJob {
  std::uint64_t id = 0;
  std::vector<std::vector<std::int32_t>> sequences;
  Pooling pooling = Pooling::kMean;
  bool normalize = false;
};

class EmbeddingQueue {
 public:
  explicit EmbeddingQueue(int max_tokens_per_step) : max_tokens_(max_tokens_per_step) {}

  void push(EmbedJob job);
  bool empty() const noexcept { return jobs_.empty(); }
  std::size_t waiting_sequences() const noexcept;

  struct Step {
    EncodeBatch batch;
    std::vector<std::pair<std::uint64_t, std::size_t>> owners;  // (job id, sequence index)
  };
  // The next step's sequences; they stay queued until finish() or fail().
  Step next_step() const;

  // Pools the step's hidden states ([tokens, hidden_size]) into its jobs' results and removes
  // the jobs now complete, returning their vectors (one per sequence, in order).
  std::vector<std::pair<std::uint64_t, std::vector<std::vector<float>>>> finish(
      const Step& step, const std::vector<float>& hidden, int hidden_size);

  // Removes every job the step touched (its forward pass failed) and returns their ids.
  std::vector<std::uint64_t> fail(const Step& step);
  // Removes every job and returns their ids.
  std::vector<std::uint64_t> drain();

 private:
  struct Entry {
    EmbedJob job;
    std::size_t next = 0;  // first sequence not yet in a finished step
    std::vector<std::vector<float>> results;
  };
  int max_tokens_;
  std::deque<Entry> jobs_;
};

}  // namespace weft::model
