#pragma once
// The constraint actor: one TokenConstraint (runtime/grammar) per constrained sequence. The
// step loop tells it each sampled token as soon as the sampler has drawn it (accept), and asks
// for the next step's masks right after it has handed that step to the executor (masks): the
// masks are computed on this actor's strand while the executor's thread runs the forward
// pass, and the sampler applies them to the logits when both are ready.

#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/token_constraint.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

struct AcceptedToken {
  std::uint64_t id = 0;
  std::int32_t token = 0;
  // Jump-forward: how many tokens the grammar may force after this one (the request's
  // remaining max_tokens; 0 when the output ends with this token anyway).
  int max_forced = 0;
};

// What a token meant, for the sequences where it was not simply "go on".
struct ConstraintVerdict {
  std::uint64_t id = 0;
  // After `forced`, when there are any.
  grammar::TokenConstraint::Verdict verdict = grammar::TokenConstraint::Verdict::kContinue;
  // Jump-forward: tokens the grammar forced after the sampled one, already accepted; the
  // step loop appends them to the sequence without sampling them.
  std::vector<std::int32_t> forced;
  // With kRejected: why the grammar refused the output whatever the token (the matcher's
  // bound on live stacks, GrammarMatcher::error); empty when only this token was refused.
  std::string error;
};

struct StepMasks {
  // The masks of the ids with a constraint, back to back in the order asked, ceil(vocab / 32)
  // words each: one buffer for the step, which goes on to the device sampler's input as it is
  // (no copy per row).
  std::vector<std::uint32_t> words;
  // One per id asked for: the word of `words` its mask starts at, or -1 for an id without a
  // constraint (it samples unconstrained).
  std::vector<std::int32_t> offsets;
  int words_per_mask = 0;
  std::uint64_t compute_ns = 0;  // time spent computing them on the strand
  int computed = 0;              // masks computed here (the others were ready from accept)
};

struct AcceptResult {
  // kComplete and kRejected, and kContinue with forced tokens.
  std::vector<ConstraintVerdict> verdicts;
  std::uint64_t compute_ns = 0;
};

class ConstraintActor : public Actor {
 public:
  // `logits_vocab`: the width of the model's logits rows. `jump_forward`: after each accepted
  // token, force the grammar's only continuation where it has one (EngineConfig::jump_forward).
  // `mask_pool`, when given (it must outlive the actor), shares a step's masks with the
  // strand's own thread: a new schema's first-use masks take milliseconds each on a 128K
  // vocabulary, and the whole batch waits for the slowest row's.
  ConstraintActor(const asio::any_io_executor& executor, int logits_vocab, bool jump_forward = true,
                  asio::thread_pool* mask_pool = nullptr);

  void add(std::uint64_t id, std::shared_ptr<const grammar::CompiledGrammar> grammar);
  void remove(std::uint64_t id);

  template <class Token>
  auto flush(Token&& token) {
    return ask([] {}, std::forward<Token>(token));
  }

  // Advances each sequence's matcher by its sampled token, then by the tokens the grammar
  // forces after it (jump-forward, up to AcceptedToken::max_forced).
  template <class Token>
  auto accept(std::vector<AcceptedToken> tokens, Token&& token) {
    return ask([this, tokens = std::move(tokens)] { return accept_tokens(tokens); },
               std::forward<Token>(token));
  }

  // The masks the next tokens of `ids` are sampled under.
  template <class Token>
  auto masks(std::vector<std::uint64_t> ids, Token&& token) {
    return ask([this, ids = std::move(ids)] { return compute_masks(ids); },
               std::forward<Token>(token));
  }

 private:
  AcceptResult accept_tokens(const std::vector<AcceptedToken>& tokens);
  StepMasks compute_masks(const std::vector<std::uint64_t>& ids);

  int vocab_;
  bool jump_forward_;
  asio::thread_pool* mask_pool_;
  std::unordered_map<std::uint64_t, grammar::TokenConstraint> constraints_;
};

}  // namespace weft::actors
