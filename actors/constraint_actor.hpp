#pragma once
// The constraint actor: one TokenConstraint (runtime/grammar) per constrained sequence. The
// step loop tells it each sampled token as soon as the sampler has drawn it (accept), and asks
// for the next step's masks right after it has handed that step to the executor (masks): the
// masks are computed on this actor's strand while the executor's thread runs the forward
// pass, and the sampler applies them to the logits when both are ready.

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/token_constraint.hpp"
#include "weft/actor.hpp"

namespace weft::actors {

struct AcceptedToken {
  std::uint64_t id = 0;
  std::int32_t token = 0;
};

// What a token meant, for the sequences where it was not simply "go on".
struct ConstraintVerdict {
  std::uint64_t id = 0;
  grammar::TokenConstraint::Verdict verdict = grammar::TokenConstraint::Verdict::kContinue;
};

struct StepMasks {
  // One per id asked for, in order: ceil(vocab / 32) words, or empty for an id without a
  // constraint (it samples unconstrained).
  std::vector<std::vector<std::uint32_t>> masks;
  std::uint64_t compute_ns = 0;  // time spent computing them on the strand
  int computed = 0;              // masks computed here (the others were ready from accept)
};

struct AcceptResult {
  std::vector<ConstraintVerdict> verdicts;  // kComplete and kRejected only
  std::uint64_t compute_ns = 0;
};

class ConstraintActor : public Actor {
 public:
  // `logits_vocab`: the width of the model's logits rows.
  ConstraintActor(const asio::any_io_executor& executor, int logits_vocab);

  void add(std::uint64_t id, std::shared_ptr<const grammar::CompiledGrammar> grammar);
  void remove(std::uint64_t id);

  template <class Token>
  auto flush(Token&& token) {
    return ask([] {}, std::forward<Token>(token));
  }

  // Advances each sequence's matcher by its sampled token.
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
  std::unordered_map<std::uint64_t, grammar::TokenConstraint> constraints_;
};

}  // namespace weft::actors
