#pragma once
// A draft model as speculator (Leviathan et al. 2023; SpecInfer's small speculative model,
// seed 002): any Weft model with the target's tokenizer, run by a forward backend of its own
// (the CPU for a CPU target; a CudaModel on the target's GPU for a GPU target) with KV pages
// of its own. A step's proposals are made together (propose_batch): one forward pass brings
// every sequence's draft KV up to its tokens (the prompt at first, then what the last
// verification accepted that the draft had not already computed) and gives each sequence's
// last-token row; then the trees grow depth by depth, one forward per depth over every
// sequence's new frontier (a chain runs as one decode row per sequence, which a GPU replays as
// a CUDA graph; a wider tree with tree attention). Greedy verification takes each frontier
// node's top-`width` children and keeps the `width` most likely paths (cumulative draft
// probability): on a backend that samples on its device only the top entries of each row
// cross the bus (one wait per depth), never the logits; greedy chains (width 1) on a backend
// that runs them (ForwardBackend::greedy_chain, the CUDA model) go in one go: every depth
// enqueued without a wait, the argmaxes fed to the next depth on the device, one wait. Stochastic
// verification draws children from the draft's distribution at the request's temperature, and keeps
// the drawn tokens' q and draws for the verifier (the rows come to the host). The tree's own KV
// sits in scratch slots after the sequence's; the first chain's nodes sit at their final slots, so
// the part of it the target accepts is not computed again by the next proposal.

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/model.hpp"
#include "runtime/speculative/speculator.hpp"

namespace weft::speculative {

class DraftModel final : public Speculator {
 public:
  // `backend` runs the draft and holds its KV pool (pages [0, backend->num_pages())), pages of
  // `page_size` tokens; a sequence whose pages do not fit gets no proposal.
  DraftModel(std::unique_ptr<model::ForwardBackend> backend, int page_size);
  // On the CPU: `model` (which must outlive the speculator) with `num_pages` pages of f32 KV.
  DraftModel(const model::Model& model, int num_pages, int page_size, unsigned threads);

  DraftTree propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                    const ProposalLimits& limits) override;
  std::vector<DraftTree> propose_batch(std::span<const ProposalRequest> requests) override;
  void forget(std::uint64_t sequence) override;

  int num_pages() const noexcept { return backend_->num_pages(); }
  int free_pages() const noexcept { return static_cast<int>(free_.size()); }
  // Forward passes run so far (all sequences of a depth count once), and the tokens they ran.
  std::uint64_t forward_passes() const noexcept { return passes_; }
  std::uint64_t forward_tokens() const noexcept { return tokens_run_; }
  // Draft tokens whose KV a proposal found already computed (the accepted part of the last
  // proposal's first chain), so never ran again.
  std::uint64_t reused_tokens() const noexcept { return reused_; }
  // Whether the greedy trees' top entries are picked on the backend's device.
  bool picks_on_device() const noexcept { return backend_->samples_on_device(); }
  bool token_trees() const noexcept { return backend_->supports_token_trees(); }
  // Whether greedy chains run on the device in one go (ForwardBackend::greedy_chain) where the
  // backend can; off: one pass and one wait per depth, as for trees (for comparisons).
  void set_device_chains(bool on) noexcept { device_chains_ = on; }

 private:
  struct State {
    int computed = 0;  // tokens whose KV the draft holds
    std::vector<std::int32_t> pages;
    // The last proposal's first chain whose KV was written at slots computed, computed + 1,
    // ... (their positions): reused when the sequence's next tokens are these.
    std::vector<std::int32_t> chain;
  };
  struct Work;  // one sequence's proposal in flight (draft_model.cpp)
  bool reserve(State& state, int slots);
  // Runs `batch`; fills each work's frontier rows (greedy: top entries; sampled: full rows).
  bool run_rows(model::StepBatch& batch, std::vector<Work*>& works);
  void catch_up(std::vector<Work*>& works);

  std::unique_ptr<model::ForwardBackend> backend_;
  int page_size_;
  std::vector<std::int32_t> free_;  // free page ids, the most recently freed last
  std::unordered_map<std::uint64_t, State> states_;
  std::uint64_t passes_ = 0, tokens_run_ = 0, reused_ = 0;
  std::vector<float> logits_;
  bool device_chains_ = true;
};

}  // namespace weft::speculative
