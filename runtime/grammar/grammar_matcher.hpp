#pragma once
// Matches generated tokens against a grammar and says which tokens may come next.
//
// CompiledGrammar is a grammar bound to one vocabulary, shareable between requests: the flat
// grammar, and for every position of every rule (a byte-set element inside an alternative)
// the split of the vocabulary that XGrammar introduced: tokens accepted there whatever the
// stack below (a bitmask computed on the position's first use and kept), tokens rejected
// whatever the stack, and the few whose fate depends on the stack because they run past the
// end of the rule ("uncertain": checked at run time against the real stack). FOLLOW sets cut the
// uncertain list down: a token that leaves the rule with a byte nothing can follow the rule with is
// rejected up front.
//
// GrammarMatcher is one sequence's state: a set of stacks, the history for rollback, and the
// next-token bitmask (32-bit words, bit i%32 of word i/32 = token i allowed).

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/grammar_compiler.hpp"
#include "runtime/grammar/pushdown.hpp"
#include "runtime/grammar/token_trie.hpp"
#include "weft/error.hpp"

namespace weft::grammar {

class CompiledGrammar {
 public:
  // Flattens and checks the grammar and lays out its positions; no mask is computed here.
  // Each position's mask is computed the first time a matcher needs it and then kept for
  // every matcher of this grammar (thread-safe, lock-free to read): compiling costs
  // milliseconds, and a position's first use costs one walk over the vocabulary.
  static Result<std::shared_ptr<const CompiledGrammar>> compile(
      const Grammar& grammar, std::shared_ptr<const TokenTrie> trie,
      const CompileLimits& limits = {});
  // A grammar flattened already (flatten_grammar, whose checks it passed): a front end that
  // flattens to check its grammar hands that form on instead of it being flattened again.
  static Result<std::shared_ptr<const CompiledGrammar>> compile(
      FlatGrammar flat, std::shared_ptr<const TokenTrie> trie);
  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  // Computes every mask not computed yet (what compile() did before masks were lazy): for
  // warming a grammar in the background, and for tests and diagnostics. Safe to call while
  // matchers run on other threads. Returns early once *cancel is true.
  void precompute_all(const std::atomic<bool>* cancel = nullptr) const;

  const FlatGrammar& flat() const { return g_; }
  const TokenTrie& trie() const { return *trie_; }
  // Byte-set positions of the grammar (each has a mask, computed on first use).
  std::size_t position_count() const { return slot_positions_; }
  // Masks computed so far (positions', per-place and per-count ones).
  std::size_t computed_mask_count() const;
  // Total uncertain (stack-dependent) entries over all positions: what a step may check.
  // Computes every mask first.
  std::size_t uncertain_count() const;
  // The rule name and uncertain-token count of the position with the most (diagnostics;
  // computes every mask first).
  std::pair<std::string, std::size_t> largest_uncertain() const;

 private:
  CompiledGrammar() = default;
  friend class GrammarMatcher;
  struct PositionMask {
    std::vector<std::uint32_t> accepted_bits;  // full bitmask, or empty when ids are used
    std::vector<std::int32_t> accepted_ids;    // when few tokens are accepted
    // Stack-dependent tokens as indices into the trie's order(), sorted, so the run-time
    // check can walk the trie and skip subtrees holding none of them.
    std::vector<std::uint32_t> uncertain;
  };
  // What mask index i is: the position `frame`, with its rule's static context below it
  // (site < 0), or with place `site` of rule_sites_[frame.rule] below it.
  struct MaskSpec {
    Frame frame;
    std::int32_t site = -1;
  };
  std::uint32_t slot(const Frame& f) const { return alt_base_[rule_base_[f.rule] + f.alt] + f.pos; }
  // The frames every stack has below a frame of a rule, when the grammar fixes them: a rule
  // used from a single place always sits on that place's frame (tail calls see through their
  // caller). Precomputing with this context, rather than an unknown stack right below, keeps
  // tiny rules (one JSON string character, one digit) from making every token uncertain.
  struct StaticContext {
    NodeId bottom = kContextNode;   // kRootNode when the whole stack is known
    std::vector<Frame> frames;      // bottom to top
    std::uint32_t bottom_rule = 0;  // whose FOLLOW applies when the context is left
    // frames[0] is a counted element's frame (Element::counted), whose count the masks depend
    // on: they are computed per count (counted_mask), the context ending there.
    bool counted = false;
  };
  // Scratch for one precomputation; a pool of them lets threads compute masks at once.
  struct Scratch {
    Scratch(const FlatGrammar& g, const StackArena& arena, std::size_t depth, std::size_t vocab)
        : pda(g, arena), levels(depth), kind(vocab, 0) {}
    Pushdown pda;
    std::vector<StackSet> levels;
    std::vector<std::uint8_t> kind;
    // The walks' transitions, memoized: each distinct stack set met gets an id, and
    // next[id * 256 + byte] the id of the set one byte later (-1 unknown). A step depends only
    // on the set's contents, so the memo holds across the masks of one grammar; a JSON string
    // character loops on one set, so the ~100K tokens inside a string cost a lookup per trie
    // node instead of a pushdown step. Bounded by kMaxStates (then cleared).
    static constexpr std::size_t kMaxStates = 4096;
    std::deque<StackSet> states;
    std::unordered_map<std::string, std::int32_t> index;
    std::vector<std::int32_t> next;
    std::string key;
    std::int32_t intern(const StackSet& s);
    // The memo id one byte after `id` (stepped and interned on a miss), -1 when the memo is full.
    std::int32_t step(std::int32_t id, std::uint8_t byte);
    // Whether every path of the string automaton `klass` (token_trie.hpp), from its character
    // boundary, keeps the set `id` alive (some stack left): then every token of a trie subtree
    // whose string_classes() hold klass is accepted from there, without walking it. A free
    // JSON string's character loop holds kStringUtf8; the check is one product of the
    // automaton with the memo (a few hundred memoized steps), cached per id.
    // Inside a counted string (maxLength), a character takes the set back to itself with its
    // count one higher: that counts as the same set (`g` tells counted elements), and
    // horizon[id] is then how many more characters the counts allow (the fewest copies left
    // of a counted frame in the set; 0xffffffff without one): only subtrees whose tokens are at
    // most that many bytes past the node are accepted whole.
    bool holds_string(std::int32_t id, StringClass klass, const FlatGrammar& g);
    static bool same_but_count(const StackSet& a, const StackSet& b, const FlatGrammar& g);
    std::vector<std::uint32_t> horizon;
    std::vector<std::int8_t> holds_utf8, holds_ascii;  // per id: -1 unknown, 0 no, 1 yes
    StackSet stepped;
    void clear_memo() {
      states.clear();
      index.clear();
      next.clear();
      holds_utf8.clear();
      holds_ascii.clear();
      horizon.clear();
    }
  };
  void compute_contexts();
  // `ref`, when given, is the mask of the same position in the outermost copy of a bounded
  // repetition (FlatGrammar::repeat_outer), and `skip_len` this copy's copies left: tokens of
  // at most skip_len bytes take ref's verdict and only the longer ones are walked.
  void precompute(std::uint32_t rule, std::uint32_t alt, std::uint32_t pos,
                  const StaticContext& ctx, PositionMask& out, Scratch& scratch,
                  const PositionMask* ref = nullptr, std::size_t skip_len = 0) const;
  // Mask i, computed now if no thread has computed it yet.
  const PositionMask& mask(std::uint32_t i) const;
  // Whether rule r (with rule_sites_) uses its per-place masks; decided on first use from
  // how many tokens its positions' shared masks leave stack-dependent.
  bool per_site(std::uint32_t r) const;
  std::size_t mask_count() const { return specs_.size(); }
  // The mask of a committed stack top: its position's, or for a rule used from a few places
  // (rule_sites_) that uses per-place masks, the one for the frame below it, or below a counted
  // element the one for its count's bucket.
  static constexpr std::uint32_t kNoBucket = 0xffffffffu;
  static constexpr std::uint32_t kUnknownCount = 0xfffffffeu;  // the stack below taken as unknown
  struct MaskRef {
    std::uint32_t index = 0;
    std::uint32_t bucket = kNoBucket;  // kNoBucket: mask(index); else counted_mask()
    std::uint32_t count = 0;
  };
  MaskRef mask_index(const StackArena& arena, NodeId top) const;
  const PositionMask& mask_at(const MaskRef& ref) const {
    return ref.bucket == kNoBucket ? mask(ref.index)
                                   : counted_mask(ref.index, ref.bucket, ref.count);
  }
  // A count seen by tokens: at most the longest token's bytes plus one (see count_bucket).
  std::uint32_t counted_cap() const {
    return static_cast<std::uint32_t>(std::min<std::size_t>(trie_->max_token_bytes() + 1, 0x7fff));
  }
  // (copies left, capped) << 16 | (copies missing, capped).
  std::uint32_t count_bucket(const Element& e, std::uint32_t count) const;
  // Mask i resting on a counted element whose count falls in `bucket`, computed with `count`
  // on first use and kept.
  const PositionMask& counted_mask(std::uint32_t i, std::uint32_t bucket,
                                   std::uint32_t count) const;
  mutable std::mutex counted_mutex_;
  mutable std::unordered_map<std::uint64_t, std::unique_ptr<const PositionMask>> counted_masks_;
  std::unique_ptr<Scratch> take_scratch() const;
  void give_scratch(std::unique_ptr<Scratch> scratch) const;
  std::vector<StaticContext> contexts_;  // per rule
  // Per rule used from 2..kMaxSites places: those places' frames. Its positions may then have
  // one mask per place, each precomputed with that place as the stack below, because a bounded
  // repetition (x{0,n} lowered as n rules using x) makes the shared x rule's masks depend on
  // which copy it sits in.
  std::vector<std::vector<Frame>> rule_sites_;

  FlatGrammar g_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::uint32_t> rule_base_;      // rule -> index of its first alternative
  std::vector<std::uint32_t> alt_base_;       // alternative -> first slot
  std::vector<std::int32_t> slot_mask_;       // slot -> its position's mask index, -1 for rules
  std::vector<std::int32_t> slot_site_base_;  // slot -> first of its per-place masks, or -1
  std::size_t slot_positions_ = 0;
  std::vector<MaskSpec> specs_;  // mask index -> what it is
  // Mask index -> the mask once computed (null before). Written once (compare-and-swap: a
  // thread that loses the race drops its copy), so readers never lock.
  std::unique_ptr<std::atomic<const PositionMask*>[]> masks_;
  // Per rule: 0 undecided, 1 shared masks, 2 per-place masks (see per_site).
  std::unique_ptr<std::atomic<std::uint8_t>[]> rule_mode_;
  mutable std::mutex scratch_mutex_;
  mutable std::vector<std::unique_ptr<Scratch>> scratch_;
  // Stack-dependent verdicts, shared by every matcher of the grammar: the key is a mask index
  // and the full stacks at it (each stack's frames top to bottom, then its bottom node), the
  // value the uncertain tokens the walk allowed from those stacks. The walk's outcome depends
  // on nothing else, and a JSON string's characters meet the same key at every step, so a
  // position with ~100 stack-dependent tokens costs a lookup instead of ~100 µs of walking.
  // At most kMaxDependent entries (later keys are walked every time).
  struct KeyHash {
    std::size_t operator()(const std::vector<std::uint32_t>& key) const noexcept;
  };
  static constexpr std::size_t kMaxDependent = 16384;
  bool find_dependent(const std::vector<std::uint32_t>& key,
                      std::vector<std::int32_t>& tokens) const;
  void store_dependent(const std::vector<std::uint32_t>& key,
                       const std::vector<std::int32_t>& tokens) const;
  mutable std::mutex dependent_mutex_;
  mutable std::unordered_map<std::vector<std::uint32_t>, std::vector<std::int32_t>, KeyHash>
      dependent_;
  StackArena sentinels_;  // only kRootNode and kContextNode, for precomputation
};

class GrammarMatcher {
 public:
  // max_rollback_tokens: how many accepted tokens rollback() can undo.
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                          std::size_t max_rollback_tokens = 16);

  std::size_t bitmask_words() const { return (grammar_->trie().vocab_size() + 31) / 32; }
  // Writes the allowed next tokens; `words` must hold bitmask_words(). After termination only
  // nothing is allowed.
  void fill_next_token_bitmask(std::span<std::uint32_t> words);
  // Advances by one token; false (state unchanged) when the grammar does not allow it. An
  // end-of-sequence token is allowed only where the grammar matches, and terminates.
  bool accept_token(std::int32_t token);
  // Advances by raw bytes (e.g. a jump-forward string); false and unchanged when not allowed.
  // Counts as one step for rollback.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last k accepted steps (tokens or byte strings, termination included).
  Result<void> rollback(std::size_t k);
  // The bytes every continuation must start with: empty unless exactly one byte is possible
  // at each step (and the grammar cannot end there). Does not change the state.
  std::string find_jump_forward_string(std::size_t max_bytes = 4096);

  bool can_terminate() const { return !terminated_ && state().accepted; }
  bool is_terminated() const { return terminated_; }
  std::size_t rollback_depth() const { return history_.size() - 1; }
  std::size_t stack_count() const { return state().tops.size(); }

  // Set once the output needed more than kMaxLiveStacks stacks (an exponentially ambiguous
  // grammar): the output is refused from then on. accept_token and accept_bytes return false,
  // and the mask allows only the end-of-sequence tokens, so a decode ends at its next token
  // (whose rejection reports this error). Rollback does not clear it. Null otherwise.
  const Error* error() const { return error_ ? &*error_ : nullptr; }

 private:
  struct State {
    std::vector<NodeId> tops;
    bool accepted = false;
    bool terminated = false;
    std::size_t bytes = 0;  // of output accepted up to here
  };
  const State& state() const { return history_.back(); }
  void load(const State& s, StackSet& out) const;
  State commit(const StackSet& set);
  bool run_bytes(StackSet& set, std::string_view bytes);
  // Records the overflow of the step over byte `at` of the output (counting from 1; see
  // error()).
  void fail(std::size_t at);
  void push_state(State s);
  // Appends to dependent_tokens_ the tokens of `ords` (below trie node `node`) that the
  // stacks of levels_[depth] allow.
  void check_uncertain(std::uint32_t node, std::size_t depth,
                       const std::vector<std::uint32_t>& ords);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::size_t max_rollback_;
  StackArena arena_;
  Pushdown pda_;
  std::deque<State> history_;
  bool terminated_ = false;
  std::optional<Error> error_;
  // Scratch reused across calls so a step allocates nothing once warm.
  StackSet a_, b_;
  std::vector<StackSet> levels_;  // per byte depth, for check_uncertain
  std::vector<CompiledGrammar::MaskRef> seen_slots_;
  std::vector<std::uint32_t> dependent_key_;    // see CompiledGrammar::find_dependent
  std::vector<std::int32_t> dependent_tokens_;  // the tokens check_uncertain allowed
  std::vector<std::uint32_t> slot_epoch_;
  std::uint32_t epoch_ = 0;
};

}  // namespace weft::grammar
