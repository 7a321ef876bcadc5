#pragma once
// A draft model as speculator (Leviathan et al. 2023; SpecInfer's small speculative model,
// seed 002): any Weft model with the target's tokenizer, run on the CPU with KV pages of its
// own. Each proposal first brings the draft's KV up to the sequence's tokens (one forward
// over the tokens it has not seen: the prompt, then what the last verification accepted),
// then grows a tree depth by depth, one forward per depth over the new frontier with tree
// attention: greedy verification takes each frontier node's top-`width` children and keeps
// the `width` most likely paths (cumulative draft probability); stochastic verification draws
// children from the draft's distribution at the request's temperature, and keeps the drawn
// tokens' q and draws for the verifier. The tree's own KV sits in scratch slots after the
// sequence's, overwritten by the next proposal.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/kv_cache.hpp"
#include "runtime/model/model.hpp"
#include "runtime/speculative/speculator.hpp"

namespace weft::speculative {

class DraftModel final : public Speculator {
 public:
  // `model` must outlive the speculator. `num_pages` pages of `page_size` tokens hold every
  // sequence's draft KV; a sequence whose pages do not fit gets no proposal.
  DraftModel(const model::Model& model, int num_pages, int page_size, unsigned threads);

  DraftTree propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                    const ProposalLimits& limits) override;
  void forget(std::uint64_t sequence) override;

  int free_pages() const noexcept { return kv_.free_pages(); }
  std::uint64_t forward_passes() const noexcept { return passes_; }

 private:
  struct State {
    int computed = 0;  // tokens whose KV the draft holds
    std::vector<std::int32_t> pages;
  };
  bool reserve(State& state, int slots);

  const model::Model& model_;
  model::KvCache kv_;
  cpu::ThreadPool pool_;
  std::unordered_map<std::uint64_t, State> states_;
  std::uint64_t passes_ = 0;
};

}  // namespace weft::speculative
