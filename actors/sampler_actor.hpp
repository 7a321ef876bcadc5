#pragma once
// The sampler: one SequenceSampler per live sequence (its seeded RNG and penalty counts), fed
// the rows of logits the executor returns, each with its grammar's bitmask when constrained.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/executor_actor.hpp"
#include "runtime/sampling/sequence_sampler.hpp"
#include "runtime/speculative/draft_tree.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

struct SampleRow {
  std::uint64_t id = 0;
  int row = 0;  // row of StepLogits
  // Constrained generation: the allowed tokens (ceil(vocab / 32) words from the constraint
  // actor), applied to the row before anything else; empty: unconstrained.
  std::vector<std::uint32_t> allowed;
  // Beam search: > 0 asks for the row's beam_k most likely tokens and their logprobs
  // (SequenceSampler::beam_candidates) instead of a sampled token.
  int beam_k = 0;
  // Sampling on the device: the row's bitmask starts at this word of the step's masks
  // (prepare()'s `masks`); -1: none (or `allowed`, which is copied in after them).
  std::int32_t mask_offset = -1;
};

struct SampleOutcome {
  std::uint64_t id = 0;
  std::optional<sampling::SampledToken> token;
  std::string error;  // why the row could not be sampled (the request then ends in error)
  std::vector<sampling::TokenLogprob> beam;  // a beam row's candidates (SampleRow::beam_k)
};

// A draft slice's rows (speculative decoding): the target's logits at the root (first_row)
// and at each of the tree's nodes after it, verified against the tree.
struct VerifyRow {
  std::uint64_t id = 0;
  int first_row = 0;
  std::shared_ptr<const speculative::DraftTree> tree;
};
struct VerifyOutcome {
  std::uint64_t id = 0;
  std::vector<int> accepted;                   // tree nodes, root first
  std::vector<sampling::SampledToken> tokens;  // the accepted nodes' tokens, then the bonus
  std::string error;                           // the request then ends in error
};
struct StepOutcomes {
  std::vector<SampleOutcome> sampled;
  std::vector<VerifyOutcome> verified;
};

// A step's rows prepared for sampling on the device: the backend's input, and for each row
// of the step (in order) either its index among input.rows or the error that kept it off.
struct DeviceSamplePlan {
  model::DeviceSamplingInput input;
  std::vector<std::uint64_t> ids;   // per row of the step
  std::vector<int> device_row;      // per row of the step; -1: see errors
  std::vector<std::string> errors;  // per row of the step
  std::vector<int> beam_k;          // per row of the step (SampleRow::beam_k)
  // Greedy draft slices verified from the device's picks (prepare_step): each slice's root
  // and node rows drawn greedily there, from input.rows[verify_row[k]] on; -1: see
  // verify_errors.
  std::vector<VerifyRow> verify;
  std::vector<int> verify_row;
  std::vector<std::string> verify_errors;
};

class SamplerActor : public Actor {
 public:
  using Actor::Actor;

  void add(std::uint64_t id, sampling::SamplingParams params, std::vector<std::int32_t> prompt,
           std::uint64_t seed, int sample_index);
  void remove(std::uint64_t id);
  // Tokens appended without sampling (jump-forward): counted for the penalties and the draw
  // counter as if they had been sampled. Unknown ids are ignored.
  void accept(std::uint64_t id, std::vector<std::int32_t> tokens);
  // Beam search: `child` starts as a copy of `parent`'s sampler (its penalties' counts). An
  // unknown parent is ignored.
  void fork(std::uint64_t parent, std::uint64_t child);

  // Replies once every message posted before it has run.
  template <class Token>
  auto flush(Token&& token) {
    return ask([] {}, std::forward<Token>(token));
  }

  // Sampling on the device, in two halves around ExecutorActor::sample: prepare() describes
  // each row's draw (the step's `masks`, which rows point into with mask_offset, become the
  // plan's as they are; rows' own `allowed` masks are copied after them), finish() completes
  // the draws from the device's results and returns outcomes in the rows' order, like
  // sample().
  template <class Token>
  auto prepare(std::vector<SampleRow> rows, int vocab, std::vector<std::uint32_t> masks,
               Token&& token) {
    return ask(
        [this, rows = std::move(rows), vocab, masks = std::move(masks)]() mutable {
          return prepare_rows(rows, vocab, std::move(masks));
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto prepare(std::vector<SampleRow> rows, int vocab, Token&& token) {
    return prepare(std::move(rows), vocab, {}, std::forward<Token>(token));
  }
  template <class Token>
  auto finish(DeviceSamplePlan plan, model::DeviceSamplingOutput output, Token&& token) {
    return ask([this, plan = std::move(plan),
                output = std::move(output)]() mutable { return finish_rows(plan, output); },
               std::forward<Token>(token));
  }

  // Sampling on the device with greedy draft slices: prepare() for the plain rows, and each
  // draft slice's rows (its root and every node) as greedy draws on the device; finish_step()
  // completes the plain draws and walks each tree by the device's picks (the argmax at each
  // node: plain greedy decoding's token, logprob and top logprobs), so only the picks cross
  // the bus, never the rows (actors/sampler_verify.cpp). Every draft slice's request must
  // decode greedily.
  template <class Token>
  auto prepare_step(std::vector<SampleRow> rows, std::vector<VerifyRow> verify, int vocab,
                    std::vector<std::uint32_t> masks, Token&& token) {
    return ask(
        [this, rows = std::move(rows), verify = std::move(verify), vocab,
         masks = std::move(masks)]() mutable {
          DeviceSamplePlan plan = prepare_rows(rows, vocab, std::move(masks));
          prepare_verify_rows(plan, std::move(verify), vocab);
          return plan;
        },
        std::forward<Token>(token));
  }
  template <class Token>
  auto finish_step(DeviceSamplePlan plan, model::DeviceSamplingOutput output, Token&& token) {
    return ask(
        [this, plan = std::move(plan), output = std::move(output)]() mutable {
          StepOutcomes out;
          out.sampled = finish_rows(plan, output);
          out.verified = finish_verify_rows(plan, output);
          return out;
        },
        std::forward<Token>(token));
  }

  // sample() for the plain rows, and the verification of the draft slices' rows
  // (actors/sampler_verify.cpp: greedy, or SpecInfer's multi-step stochastic verification).
  template <class Token>
  auto sample_and_verify(StepLogits logits, std::vector<SampleRow> rows,
                         std::vector<VerifyRow> verify, Token&& token) {
    return ask(
        [this, logits = std::move(logits), rows = std::move(rows),
         verify = std::move(verify)]() mutable {
          StepOutcomes out;
          out.sampled = sample_rows(logits, rows);
          out.verified = verify_rows(logits, verify);
          return out;
        },
        std::forward<Token>(token));
  }

  template <class Token>
  auto sample(StepLogits logits, std::vector<SampleRow> rows, Token&& token) {
    return ask([this, logits = std::move(logits),
                rows = std::move(rows)]() mutable { return sample_rows(logits, rows); },
               std::forward<Token>(token));
  }

 private:
  std::vector<SampleOutcome> sample_rows(StepLogits& logits, const std::vector<SampleRow>& rows);
  std::vector<VerifyOutcome> verify_rows(const StepLogits& logits,
                                         const std::vector<VerifyRow>& rows);
  DeviceSamplePlan prepare_rows(std::vector<SampleRow>& rows, int vocab,
                                std::vector<std::uint32_t> masks);
  std::string check_row(const SampleRow& r, std::size_t vocab, sampling::SequenceSampler*& sampler);
  std::vector<SampleOutcome> finish_rows(const DeviceSamplePlan& plan,
                                         model::DeviceSamplingOutput& output);
  void prepare_verify_rows(DeviceSamplePlan& plan, std::vector<VerifyRow> verify, int vocab);
  std::vector<VerifyOutcome> finish_verify_rows(const DeviceSamplePlan& plan,
                                                model::DeviceSamplingOutput& output);

  std::unordered_map<std::uint64_t, sampling::SequenceSampler> samplers_;
};

}  // namespace weft::actors
