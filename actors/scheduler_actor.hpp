#pragma once
// The scheduler actor owns every live request and drives the step loop on its strand: plan a
// step (runtime/scheduler), run it on the executor, sample the new tokens, hand them to the
// detokenizer, decide which requests finish. Requests join and leave between steps; cancel
// frees a request's KV pages at once. For constrained sequences the step's bitmasks are asked
// of the constraint actor right after the forward pass is launched, so they are computed
// while it runs; sampled tokens advance the matchers (while the detokenizer turns them into
// text) before the next step is planned. Unconstrained steps overlap their detokenizing with
// the next step's forward pass (scheduler_actor_overlap.cpp, docs/engine.md#step-loop).

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/constraint_actor.hpp"
#include "actors/detokenizer_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/kv_allocator_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "runtime/sampling/beam_search.hpp"
#include "runtime/scheduler/scheduler.hpp"
#include "runtime/speculative/speculator.hpp"
#include "weft/actor.hpp"
#include "weft/engine.hpp"

namespace weft::actors {

class SchedulerActor : public Actor {
 public:
  // Runs on the KV allocator's strand and plans with the pool it lends.
  SchedulerActor(KvAllocatorActor& kv_allocator, sched::SchedulerConfig config,
                 ExecutorActor& executor_actor, SamplerActor& sampler,
                 DetokenizerActor& detokenizer, ConstraintActor& constraint,
                 std::vector<std::int32_t> eos_ids);

  // Speculative decoding (docs/speculative.md): before start(), the speculator that proposes
  // trees for every request that may speculate (unconstrained, no penalties, no mirostat),
  // and the scheduler's budgets. `width` is the trees' width.
  void set_speculation(std::unique_ptr<speculative::Speculator> speculator,
                       sched::SpeculationConfig config, int width);

  // Sequence groups (pipeline parallelism with steps in flight, docs/parallel.md): before
  // start(), split the running sequences into `groups` groups, each stepped by a loop of its
  // own, so that up to `groups` steps are in the executor's pipeline at once (the executor's
  // steps_in_flight()). A group's step is submitted as soon as its last step's tokens are
  // sampled; steps are collected in the order submitted, each once no other group is about
  // to submit. 1 (the default): one loop over every running sequence.
  void set_groups(int groups);

  // Before start(): one JSON line per planned step to `out`, after a header line
  // (runtime/scheduler/step_trace.hpp, docs/engine.md#step-trace).
  void set_step_trace(std::unique_ptr<std::ostream> out);

  // Before start(): whether a step's detokenizing (text, stop strings) and the ending of its
  // finished sequences may overlap the next step's forward pass (EngineConfig::overlap_steps,
  // docs/engine.md#step-loop). On by default; off, every step ends before the next is planned.
  void set_overlap(bool on) { overlap_ = on; }

  // Starts the step loop (once).
  void start();

  // Queues a tokenized request as params.n sequences with ids id .. id + n - 1 (the samples
  // after the first share its prompt pages); the reply fails if the scheduler refuses it (it
  // could never fit the KV pool) or the engine is stopping. `constrained`: the constraint
  // actor holds a matcher for each of the sequences.
  template <class Token>
  auto add(std::uint64_t id, std::vector<std::int32_t> prompt, SamplingParams params,
           std::shared_ptr<RequestStream> stream, bool constrained, Token&& token) {
    return ask(
        [this, id, prompt = std::move(prompt), params = std::move(params),
         stream = std::move(stream), constrained]() mutable {
          add_request(id, std::move(prompt), std::move(params), std::move(stream), constrained);
        },
        std::forward<Token>(token));
  }

  // An encoder-decoder request (scheduler_actor_seq2seq.cpp): `source` is the encoder's input,
  // `decoder_prompt` the decoder's start token and forced prefix (not streamed, not counted
  // as output); usage counts the source as the prompt. params.n sequences as add() makes.
  template <class Token>
  auto add_seq2seq(std::uint64_t id, std::vector<std::int32_t> source,
                   std::vector<std::int32_t> decoder_prompt, SamplingParams params,
                   std::shared_ptr<RequestStream> stream, Token&& token) {
    return ask(
        [this, id, source = std::move(source), decoder_prompt = std::move(decoder_prompt),
         params = std::move(params), stream = std::move(stream)]() mutable {
          add_seq2seq_request(id, std::move(source), std::move(decoder_prompt), std::move(params),
                              std::move(stream));
        },
        std::forward<Token>(token));
  }

  // Cancels every sample of the request `id` (the id its stream carries).
  void cancel(std::uint64_t id);

  template <class Token>
  auto metrics(Token&& token) {
    return ask([this] { return snapshot(); }, std::forward<Token>(token));
  }

  // Live requests end with kShutdown; completes once the loop has exited.
  void shutdown(asio::any_completion_handler<void(std::exception_ptr)> handler);

 private:
  struct LiveRequest {
    std::shared_ptr<RequestStream> stream;
    SamplingParams params;
    int prompt_len = 0;
    int index = 0;                 // which sample of its request
    std::uint64_t request_id = 0;  // the first sample's id
    bool constrained = false;
    bool speculate = false;
    // The overlapped loop (scheduler_actor_overlap.cpp) ends some sequences before their
    // final event may go out: final_tokens >= 0 is the usage they had when they ended (their
    // scheduler sequence may be gone by then), and `ending` the reason a stop string (or a
    // failed detokenize) gave while the step in flight still ran them.
    int final_tokens = -1;
    int final_cached = 0;
    std::optional<FinishReason> ending;
    std::string ending_error;
  };
  // A step's tokens at the detokenizer, its reply filled on this strand by the callback; with
  // the sequences the step ended by a stop token or their length, which finish after it.
  struct PendingDetokenize {
    bool done = false;
    std::exception_ptr error;
    std::vector<std::uint64_t> ids;      // the sequences of the tokens sent
    std::vector<std::uint64_t> stopped;  // the reply: outputs that reached a stop string
    std::vector<std::pair<std::uint64_t, FinishReason>> finishing;
  };
  // The step loop's time by phase, in nanoseconds (EngineMetrics::step_phases).
  struct PhaseClock {
    std::uint64_t plan = 0, batch = 0, launch = 0, launch_prepare = 0, mask_wait = 0,
                  detokenize_wait = 0, sampler_prepare = 0, sample = 0, sampler_finish = 0,
                  complete = 0, accept_wait = 0, finish = 0, step = 0, gap = 0;
  };
  // The constraint actor's reply for one step, filled on this strand by its callback.
  struct PendingMasks {
    bool done = false;
    std::exception_ptr error;
    StepMasks masks;
  };

  // The constraint actor's reply to a step's accept, filled on this strand by its callback.
  struct PendingAccept {
    bool done = false;
    std::exception_ptr error;
    AcceptResult result;
  };

  // The step loop: of every running sequence (group -1), or of one sequence group's.
  asio::awaitable<void> loop(int group);
  // Sequence groups (scheduler_actor_groups.cpp): a group's loop is busy (planning, sampling,
  // streaming: about to submit, or to go idle), in flight (its step submitted, not yet
  // collected) or idle (nothing to run).
  enum class GroupState { kIdle, kBusy, kInFlight };
  void set_group_state(int group, GroupState state);
  // Submits `batch` as group `group`'s step, then collects its logits once it is the oldest
  // step in flight and no other group is busy (so that the executor's first stage runs a
  // group's next step before it waits for another group's logits).
  // On a backend that samples on its device, the collected logits wait in the device's
  // sampler until the group samples them, and a step submitted meanwhile would drop them (a GPU
  // stage's enqueue ends the launched step, and may move its logits buffer): from its collect
  // to the end of its sampling a group holds the sampler (sampling_group_; released at once
  // where the logits come to the host), and another group submits only once it is released.
  asio::awaitable<StepLogits> run_in_flight(model::StepBatch batch, int group);
  void release_device_sampler(int group);
  // Hands tokens to the detokenizer and ends the sequences it reports stopped (a stop
  // string) with `stop`; a failure ends every sequence of `tokens` in error.
  asio::awaitable<void> detokenize(std::vector<NewToken> tokens);
  // The overlapped loop (scheduler_actor_overlap.cpp). send_detokenize() hands a step's tokens
  // to the detokenizer without waiting; settle_detokenize() waits for the reply (at once when
  // nothing is pending) and ends the sequences it stopped, then the step's `finishing` ones.
  // A sequence that the step in flight runs ends only once the device is done with that step
  // (end_in_flight()), before its tokens are read: its token there is dropped.
  void send_detokenize(std::vector<NewToken> tokens,
                       std::vector<std::pair<std::uint64_t, FinishReason>> finishing);
  asio::awaitable<void> settle_detokenize();
  void end_after_step(std::uint64_t id, FinishReason reason, std::string error = {});
  void end_in_flight();
  // Takes a sequence that ended (a stop token, its length) out of the scheduler now, its
  // pages back before the next plan, while its request waits for its last text.
  void retire(std::uint64_t id);
  bool runs_in_flight(std::uint64_t id) const;
  void add_request(std::uint64_t id, std::vector<std::int32_t> prompt, SamplingParams params,
                   std::shared_ptr<RequestStream> stream, bool constrained);
  void add_seq2seq_request(std::uint64_t id, std::vector<std::int32_t> source,
                           std::vector<std::int32_t> decoder_prompt, SamplingParams params,
                           std::shared_ptr<RequestStream> stream);
  // After the scheduler took request `id` (sample 0): its samples 1..n-1 as siblings (all
  // removed again, and the error thrown, if one cannot be added), each one live, then the loop
  // woken.
  void add_samples(std::uint64_t id, const SamplingParams& params,
                   const std::shared_ptr<RequestStream>& stream, int prompt_len, bool constrained,
                   bool speculate);
  // `completion_tokens` >= 0 overrides the count the scheduler's sequence gives (beam search:
  // the returned hypothesis's length).
  void finish(std::uint64_t id, FinishReason reason, std::string error = {},
              int completion_tokens = -1);

  // Beam search (scheduler_actor_beam.cpp). A request with beam_width > 1 is one group: its
  // live beams are sequences (the first is the request's id, forks get ids from
  // kFirstForkId on) whose rows are collected until every live beam has one; then the
  // BeamSearch steps, and its choices fork, continue or drop the sequences. Once done, the n
  // best hypotheses stream out as samples 0..n-1 of the request.
  struct BeamGroupState {
    sampling::BeamSearch search;
    std::vector<std::uint64_t> beams;  // the sequence of search.live()[i]
    std::unordered_map<std::uint64_t, std::vector<sampling::TokenLogprob>> rows;  // this step's
  };
  static constexpr std::uint64_t kFirstForkId = 1ull << 62;  // above every engine id
  void add_beam_request(std::uint64_t id, std::vector<std::int32_t> prompt,
                        const SamplingParams& params, std::shared_ptr<RequestStream> stream);
  // Takes the beam rows out of a step's outcomes and advances their groups.
  asio::awaitable<void> advance_beams(std::vector<SampleOutcome>& outcomes);
  // Removes a group's live beams from the scheduler and the sampler (not its output slots).
  void drop_beams(std::uint64_t request_id);
  int beam_row_k(std::uint64_t sequence) const;  // 0: not a beam
  bool is_stop_token(const LiveRequest& request, std::int32_t token) const;
  EngineMetrics snapshot() const;
  // A request's proposal limits; none when it does not speculate.
  std::optional<speculative::ProposalLimits> proposal_limits(const sched::Sequence& s,
                                                             int max_nodes, int max_depth) const;
  speculative::DraftTree propose(const sched::Sequence& s, int max_nodes, int max_depth);
  std::vector<speculative::DraftTree> propose_batch(
      const std::vector<sched::SpeculationConfig::Ask>& asks);
  // A verified draft's tokens cut after the first stop token and at max_tokens.
  sched::VerifiedDraft cut_verified(const VerifyOutcome& o) const;

  sched::Scheduler scheduler_;
  ExecutorActor& executor_;
  SamplerActor& sampler_;
  DetokenizerActor& detokenizer_;
  ConstraintActor& constraint_;
  std::vector<std::int32_t> eos_ids_;
  std::unique_ptr<speculative::Speculator> speculator_;
  int speculation_width_ = 1;
  std::unordered_map<std::uint64_t, LiveRequest> live_;                    // by sequence id
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> samples_;  // request -> sequences
  std::unordered_map<std::uint64_t, BeamGroupState> beam_groups_;          // by request id
  std::unordered_map<std::uint64_t, std::uint64_t> beam_of_;  // beam sequence -> request
  std::uint64_t next_fork_id_ = kFirstForkId;
  asio::steady_timer wake_;
  asio::steady_timer masks_ready_;  // cancelled when a step's masks or verdicts arrive
  asio::steady_timer turn_;         // cancelled when a group's state changes
  int groups_ = 1;
  int loops_ = 0;  // group loops still running
  std::vector<GroupState> group_state_;
  std::deque<int> in_flight_;  // groups whose steps were submitted, oldest first
  int sampling_group_ = -1;    // the group collecting, or whose logits wait in the sampler
  bool started_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  std::vector<asio::any_completion_handler<void(std::exception_ptr)>> shutdown_waiters_;
  EngineMetrics metrics_;
  std::unique_ptr<std::ostream> step_trace_;  // null: no trace
  std::optional<std::chrono::steady_clock::time_point> step_trace_start_;
  std::uint64_t step_trace_steps_ = 0;
  bool overlap_ = true;
  std::shared_ptr<PendingDetokenize> detokenizing_;  // the last step's, while pending
  // The sequences of the step launched and not yet sampled (sorted), while one is.
  std::vector<std::uint64_t> in_flight_ids_;
  bool step_in_flight_ = false;
  std::vector<std::uint64_t> ending_in_flight_;  // ended while the step in flight runs them
  PhaseClock phases_;
  // When the last step's forward pass was known done (PhaseClock::gap); none while idle.
  std::optional<std::chrono::steady_clock::time_point> forward_done_;
  std::uint64_t overlapped_steps_ = 0, dropped_tokens_ = 0;
  std::uint64_t mask_compute_ns_ = 0, mask_wait_ns_ = 0, accept_ns_ = 0, forward_ns_ = 0,
                constrained_forward_ns_ = 0;
};

}  // namespace weft::actors
