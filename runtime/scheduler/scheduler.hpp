#pragma once
// Continuous batching at iteration level (vLLM v1's scheduler shape: policy here, mechanism in
// the executor). Each step the scheduler emits one StepPlan: a flat batch of tokens from
// every running sequence (decode tokens first, then prefill chunks under a per-step token
// budget so long prompts never stall running decodes), with positions and page tables.
//
// Admission: in kReserve mode a waiting request joins only if LightLLM's estimate of the
// batch's peak future KV (admission.hpp) fits the pool, so the pool is never over-committed
// and no sequence is ever preempted. kOptimistic admits whenever the first chunk fits now;
// when the pool runs dry it preempts the most recently admitted sequence by recompute (its
// pages are freed and its prompt plus output so far is prefilled again later).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv/kv_compress.hpp"
#include "runtime/kv/page_pool.hpp"
#include "runtime/kv/prefix_cache.hpp"
#include "runtime/scheduler/admission.hpp"
#include "runtime/scheduler/speculation_trace.hpp"
#include "runtime/speculative/draft_tree.hpp"
#include "weft/error.hpp"

namespace weft::sched {

enum class AdmissionPolicy { kReserve, kOptimistic };

// The order of the waiting queue (admission never skips ahead in it). kFirstCome: arrival
// order. kLongestOutputFirst (SGLang's "lof"): a new request queues behind every waiting one
// with at least its max_new_tokens, ties in arrival order, and preempted sequences stay at the
// front. Offline, starting the longest requests first ends the run with the longest request's
// own chain of steps (docs/engine.md#how-fast-can-this-workload-go); it trusts max_new_tokens,
// which for real traffic is only an upper bound, and delays short requests.
enum class SchedulePolicy { kFirstCome, kLongestOutputFirst };

struct SchedulerConfig {
  int page_size = 16;
  int num_pages = 0;              // the pool's size; with a lent pool, 0 or the pool's num_pages()
  int max_tokens_per_step = 512;  // the step's token budget (decode + prefill chunks)
  int max_running = 256;          // sequences in one batch at most
  AdmissionPolicy admission = AdmissionPolicy::kReserve;
  SchedulePolicy schedule = SchedulePolicy::kFirstCome;
  // Keep finished sequences' full pages in a radix tree (kv::PrefixCache) and start a new
  // sequence after the longest cached prefix of its tokens.
  bool prefix_cache = false;
  // KV-Compress (runtime/kv/kv_compress.hpp): once a sequence's prompt is prefilled, each of
  // its kv heads evicts this share of its slots, in whole pages, and the pages freed go back
  // to the pool. A sequence holding shared pages (a prefix cache hit, a sibling's or a beam's
  // pages) is not compressed, since its pages are not its own to rewrite, and a compressed
  // sequence's pages never join the prefix cache (they no longer hold its tokens' prefix).
  kv::KvCompressConfig kv_compress;
};

// The prefix cache's counters.
struct PrefixCacheStats {
  std::uint64_t query_tokens = 0;  // tokens of admitted sequences looked up in the cache
  std::uint64_t hit_tokens = 0;    // of those, tokens found (not computed again)
  int cached_pages = 0;            // pages the tree holds now
  int evictable_pages = 0;         // of those, pages no sequence holds
  std::uint64_t evictions = 0;     // pages evicted so far
};

// One sequence's share of a step: tokens [token_begin, token_begin + token_count) of the
// plan's flat arrays, at positions first_position onward.
struct ScheduledSlice {
  std::uint64_t id = 0;
  int token_begin = 0;
  int token_count = 0;
  int first_position = 0;
  bool samples = false;  // this slice ends at the sequence's last token: sample the next one
  std::vector<std::int32_t> page_table;
  // Speculative verification (docs/speculative.md): the slice is the sequence's uncomputed
  // tokens up to its last one (the tree's root, at root_position(); a catch-up before it, see
  // decode_rows) and then the draft's nodes, each at the position root + its depth, its KV in
  // slot root + 1 + its index (scratch until accepted). Every token of the slice gets logits.
  // Null: an ordinary slice.
  std::shared_ptr<const speculative::DraftTree> draft;
  int root_position() const {
    return first_position + token_count - 1 - (draft ? draft->size() : 0);
  }
  // A short chunk of generated tokens the sequence has not computed: what a verification
  // accepted off the draft's first chain, and its bonus token. A backend computes each token as
  // a decode row (model::SequenceSlice::verify), as plain decoding computed it, so that greedy
  // speculative output stays plain greedy output where a prefill tile rounds otherwise (the
  // GPU, docs/speculative.md#exact-on-the-gpu).
  bool decode_rows = false;
  // KV-Compress: position p is in slot p - slot_offset; compress_evict > 0 asks the forward
  // pass to evict that many slots per (layer, kv head) after this slice, scored by its last
  // compress_window queries (model::SequenceSlice).
  int slot_offset = 0;
  int compress_evict = 0;
  int compress_window = 0;
  // KvCompressHeads::kVariable: the eviction is shared unevenly among each layer's kv heads
  // and slot_offset is their mean (model::SequenceSlice::compress_heads_vary).
  bool compress_heads_vary = false;
  // Encoder-decoder sequences (Scheduler::add_seq2seq): the pages of the encoder output's
  // cross-attention keys and values and the encoder input's length; encoder_tokens is not
  // empty in the step that runs the sequence's encoder pass (before its decoder tokens).
  std::vector<std::int32_t> cross_page_table;
  int cross_length = 0;
  std::vector<std::int32_t> encoder_tokens;
};

struct StepPlan {
  std::uint64_t step = 0;
  int group = -1;  // the sequence group planned (set_groups); -1: every running sequence
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;
  std::vector<ScheduledSlice> slices;
  std::vector<std::uint64_t> preempted;  // sequences sent back to waiting by this plan
  std::vector<std::uint64_t> admitted;   // waiting sequences this plan started, in order

  bool empty() const { return slices.empty(); }
  int sampling_slices() const;
};

struct Sequence {
  std::uint64_t id = 0;
  std::vector<std::int32_t> tokens;  // prompt, then output
  int prompt_len = 0;
  int max_new_tokens = 0;
  int computed = 0;  // tokens whose KV is written
  std::vector<std::int32_t> pages;
  int preemptions = 0;
  int cached_tokens = 0;  // prompt tokens the prefix cache gave it at its first admission
  // A sibling sample (n > 1): whose full prompt pages this sequence shares when admitted.
  std::uint64_t share_prefix_of = 0;
  // Sequence groups (Scheduler::set_groups): the group whose steps run this sequence, set when
  // it is admitted (or forked from a beam); -1 while waiting, or without groups.
  int group = -1;
  // Beam search: the group's first sequence (whose admission reserved the whole width); 0
  // for a sequence of its own.
  std::uint64_t beam_group = 0;
  // KV-Compress: slots each kv head evicted (the token at position p is in slot p - evicted),
  // and whether the sequence was compressed (then its pages never join the prefix cache).
  int evicted = 0;
  bool compressed = false;
  // Speculative decoding: a verification left tokens uncomputed (accepted off the draft's
  // first chain, and the bonus token) that the next steps compute as decode rows
  // (ScheduledSlice::decode_rows).
  bool catching_up = false;
  // Encoder-decoder models: the encoder's input (empty for a decoder-only sequence, whose
  // `tokens` are all it has) and the pages of its cross-attention keys and values, taken when
  // the sequence is admitted (its encoder pass runs in that step) and freed with its other
  // pages (a preempted sequence encodes again when readmitted). `tokens` are then the
  // decoder's: its start token and forced prefix as the prompt, then the output.
  std::vector<std::int32_t> source;
  std::vector<std::int32_t> cross_pages;

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

// Speculative decoding's share of the scheduler (runtime/scheduler/speculation.cpp).
struct SpeculationConfig {
  // Proposes a tree for a decoding sequence within max_nodes and max_depth (an empty tree:
  // none this step). Null: speculation off.
  std::function<speculative::DraftTree(const Sequence&, int max_nodes, int max_depth)> propose;
  // Or every decoding sequence of the step at once (a draft model runs one forward pass per
  // depth for all of them), one tree per ask in order; used instead of `propose` when set.
  struct Ask {
    const Sequence* sequence;
    int max_nodes;
    int max_depth;
  };
  std::function<std::vector<speculative::DraftTree>(const std::vector<Ask>&)> propose_batch;
  bool enabled() const { return propose || propose_batch; }
  int max_depth = 4;  // tokens of one path
  int max_nodes = 4;  // tokens of one tree
  // Draft tokens one step verifies over all its sequences: with few sequences each gets up to
  // max_nodes; with many, each gets step_budget / sequences, and none past step_budget
  // sequences, since a large batch is compute-bound and verifying rejected tokens costs.
  int step_budget = 32;
  bool trees = true;  // false: the backend has no tree attention; only first chains run
  // Decode and verification rows one step may hold for its verification rows to be computed
  // exactly as decode rows (the CUDA model's row kernel, docs/speculative.md#exact-on-the-gpu):
  // each of n decoding sequences gets at most (max_step_rows - n) / n draft tokens. 0: no limit.
  int max_step_rows = 0;
  // Called after each verification and each chunk of decode rows (WEFT_SPEC_TRACE,
  // runtime/scheduler/speculation_trace.hpp); null: nothing traced.
  std::function<void(const SpeculationTraceEvent&)> trace;
};

// A verified draft slice's outcome: the tree nodes accepted (root first) and the tokens
// appended to the sequence (their tokens, then the bonus token; cut short at a stop).
struct VerifiedDraft {
  std::vector<int> accepted;
  std::vector<std::int32_t> tokens;
};

struct SpeculationStats {
  std::uint64_t verifications = 0;  // draft slices verified
  std::uint64_t draft_tokens = 0;   // nodes proposed in them
  std::uint64_t accepted_tokens = 0;
  std::uint64_t appended_tokens = 0;  // accepted + bonus tokens appended
};

class Scheduler {
 public:
  // Owns a pool of config.num_pages pages (a scheduler on its own: tests, benchmarks).
  explicit Scheduler(SchedulerConfig config);
  // Allocates from `pool`, which another owner lends for the scheduler's lifetime (the KV
  // allocator actor, on the same strand). config.page_size must be the pool's; config.num_pages
  // must be 0 or the pool's. Sequences still held at destruction give their pages back.
  Scheduler(SchedulerConfig config, kv::PagePool& pool);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerConfig& config() const noexcept { return config_; }

  // Queues a request. Fails (kResourceExhausted) if the request alone could never fit in the
  // pool, and (kInvalidArgument) on an empty prompt, max_new_tokens < 1 or a duplicate id.
  Result<void> add(std::uint64_t id, std::vector<std::int32_t> prompt, int max_new_tokens);

  // Queues an encoder-decoder request (scheduler_seq2seq.cpp): `source` is the encoder's
  // input, `decoder_prompt` the decoder's first tokens (its start token, then any forced
  // prefix). Admission counts the cross-attention pages the encoder output takes
  // (pages_for(source)) with the decoder's pages, for the sequence's whole life, so the pool is
  // never over-committed; they are taken in the step that runs the encoder pass. Fails as
  // add() does, and on an empty source. Sequences of one scheduler are best all of one kind:
  // the prefix cache never holds or matches an encoder-decoder sequence's pages (its decoder
  // KV depends on its source).
  Result<void> add_seq2seq(std::uint64_t id, std::vector<std::int32_t> source,
                           std::vector<std::int32_t> decoder_prompt, int max_new_tokens);

  // Queues another sample of the same prompt as `parent` (added before it). When it is
  // admitted after the parent has prefilled, it shares the parent's full prompt pages
  // (reference-counted, never written again) and recomputes only the prompt's last, partial
  // page in a page of its own, so no KV is ever copied. If the parent is gone or was
  // preempted by then, it simply prefills from scratch.
  Result<void> add_sibling(std::uint64_t id, std::uint64_t parent);

  // Beam search (beam_fork.cpp). add_beam queues the first beam of a group of `width`: its
  // admission reserves KV for `width` sequences (each counted at the group's longest), so the
  // beams forked from it later never over-commit the pool. Fails as add() does, and
  // (kResourceExhausted) when `width` such sequences could never fit.
  Result<void> add_beam(std::uint64_t id, std::vector<std::int32_t> prompt, int max_new_tokens,
                        int width);
  // Starts `child` as a copy of the beam `parent` (same group, same tokens, then `extra`
  // appended), running at once (the group's admission reserved it; max_running does not
  // apply): it shares every page of the parent that is full and computed (reference-counted,
  // never written again) and recomputes only the tokens after them (at most page_size - 1,
  // plus `extra`) in pages of its own, so no KV is copied. A parent that is not running
  // (preempted under optimistic admission) shares nothing, and the child waits to be
  // prefilled like it. Fails (kInvalidArgument) for an unknown parent, one that is not a
  // beam, or a live child id.
  Result<void> fork(std::uint64_t parent, std::uint64_t child, std::span<const std::int32_t> extra);

  // Ends a sequence (finished, cancelled, stopped) and frees its pages at once. Unknown ids
  // are a no-op that returns false.
  bool remove(std::uint64_t id);

  StepPlan plan_step();

  // Sequence groups (pipeline parallelism with steps in flight, docs/parallel.md): the running
  // sequences are split into `groups` groups whose steps are planned and completed apart, so
  // one group's step can be planned while another's is still running. plan_step(g) plans
  // only group g's sequences (preempting only among them) and admits waiting sequences into g
  // while g holds fewer than its share, ceil(min(running + waiting, max_running) / groups),
  // of the sequences
  // (so a new request joins the group that is short of sequences; a beam's members stay in
  // one group). The caller must not plan a group again before completing its step. With one
  // group (the default) plan_step(0) is plan_step().
  void set_groups(int groups) { groups_ = std::max(1, groups); }
  int groups() const noexcept { return groups_; }
  StepPlan plan_step(int group);
  // Running sequences of group g.
  int group_size(int group) const;

  // Records a step's results: `sampled` holds one token per slice with samples == true, in
  // slice order. Slices of sequences removed since the plan was made are skipped.
  // Draft slices (slice.draft) take their outcome from `verified`, one per draft slice in
  // slice order, and have no entry in `sampled`: the root and the accepted nodes that
  // sit at their final slots count as computed, the rest of the tokens are computed by later
  // steps, and scratch pages past the sequence's tokens go back to the pool.
  void complete_step(const StepPlan& plan, std::span<const std::int32_t> sampled,
                     std::span<const VerifiedDraft> verified = {});

  // Throws weft::Error (kInvalidArgument) with KV-Compress on: draft trees sit at slots
  // counted from positions, which a compressed sequence no longer has.
  void set_speculation(SpeculationConfig config) {
    if (config.enabled() && config_.kv_compress.enabled()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "speculative decoding and KV-Compress (kv_compress_rate > 0) do not mix");
    }
    speculation_ = std::move(config);
  }
  const SpeculationStats& speculation_stats() const noexcept { return speculation_stats_; }

  // Appends tokens that were not sampled (jump-forward decoding: the grammar forced them) to
  // a sequence's output, at most max_new_tokens - generated of them; returns how many. They
  // are computed by the next steps as one prefill slice, which samples after its last token.
  int append_tokens(std::uint64_t id, std::span<const std::int32_t> tokens);

  const Sequence* find(std::uint64_t id) const;
  int running() const noexcept { return static_cast<int>(running_.size()); }
  int waiting() const noexcept { return static_cast<int>(waiting_.size()); }
  const kv::PagePool& pool() const noexcept { return pool_; }
  std::uint64_t preemptions() const noexcept { return preemptions_; }
  // KV-Compress: sequences compressed and pages their compressions gave back.
  std::uint64_t compressions() const noexcept { return compressions_; }
  std::uint64_t compressed_pages() const noexcept { return compressed_pages_; }
  PrefixCacheStats prefix_cache_stats() const;

 private:
  int pages_for(int tokens) const { return pool_.pages_for(tokens); }
  // The eviction a slice asks for: > 0 when it is the prefill chunk that completes an
  // uncompressed sequence whose pages are all its own (a decode step never compresses).
  int compress_evict(const Sequence& s, int count) const;
  void complete_compression(Sequence& s, const ScheduledSlice& slice);
  void check_config() const;
  // The pages a sequence holds whatever its length (its cross-attention pages, once taken).
  int fixed_pages(const Sequence& s) const {
    return s.source.empty() ? 0 : pages_for(static_cast<int>(s.source.size()));
  }
  // Takes an encoder-decoder sequence's cross pages before its first step (false: too few
  // free pages); true without doing anything for other sequences or when it holds them.
  bool take_cross_pages(Sequence& s);
  bool grow_pages(Sequence& seq, int positions);
  int available_pages() const;
  void release_pages(Sequence& seq);
  bool admission_allows(const Sequence& candidate) const;
  void preempt(std::uint64_t id, StepPlan& plan);
  // Puts a new sequence in the waiting queue where config_.schedule says.
  void enqueue(const Sequence& s);
  void share_prefix(Sequence& s);
  void leave_beam_group(const Sequence& s);
  // Each beam group with a running member (or `candidate`'s) as `width` sequences of its
  // longest member's demand.
  void add_beam_demands(std::vector<KvDemand>& demands, const Sequence* candidate) const;
  // Trees for the step's decoding sequences under `budget` tokens, their scratch pages taken;
  // `other_rows`: the step's decode rows besides those sequences' (chunks of decode_rows).
  std::unordered_map<std::uint64_t, std::shared_ptr<const speculative::DraftTree>> propose_drafts(
      const std::vector<std::uint64_t>& decoding, int budget, int other_rows);
  // Whether a chunk of `count` tokens of `s` is a catch-up of generated tokens
  // (ScheduledSlice::decode_rows).
  bool catches_up(const Sequence& s, int count) const;
  void trace_slice(const StepPlan& plan, const Sequence& s, const ScheduledSlice& slice,
                   const VerifiedDraft* verified) const;
  ScheduledSlice draft_slice(const Sequence& s, StepPlan& plan,
                             std::shared_ptr<const speculative::DraftTree> tree);
  void complete_draft(Sequence& s, const ScheduledSlice& slice, const VerifiedDraft& verified);

  SchedulerConfig config_;
  std::unique_ptr<kv::PagePool> owned_pool_;  // null when the pool is lent
  kv::PagePool& pool_;
  std::unordered_map<std::uint64_t, Sequence> sequences_;
  std::vector<std::uint64_t> running_;  // in admission order
  std::deque<std::uint64_t> waiting_;
  std::uint64_t next_step_ = 0;
  int groups_ = 1;
  std::uint64_t preemptions_ = 0;
  std::uint64_t compressions_ = 0;
  std::uint64_t compressed_pages_ = 0;
  std::unique_ptr<kv::PrefixCache> cache_;  // null with prefix_cache off
  struct BeamGroup {
    int width = 1;
    int members = 0;
  };
  std::unordered_map<std::uint64_t, BeamGroup> beam_groups_;  // by the group's first id
  std::uint64_t cache_query_tokens_ = 0;
  std::uint64_t cache_hit_tokens_ = 0;
  SpeculationConfig speculation_;
  SpeculationStats speculation_stats_;
};

}  // namespace weft::sched
